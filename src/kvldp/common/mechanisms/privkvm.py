"""PrivKVM: PrivKV iterated over c rounds, with virtual iterations (reconstructed).

The algorithm text of the original PrivKV paper (Ye et al. 2019) was not available; this
follows kvldp's reconstruction from the PCKV authors' reference code and a third-party
implementation (docs/mechanisms.md, *PrivKVM*), and is flagged as such in every
estimate's diagnostics.

Protocol: in every round a device draws a key j and reports PrivKV's LPP of it (Sun et al.
2019, Alg. 1); before round r >= 2 the server publishes m^(r-1) and non-holders perturb that
value instead of a uniform fake, which removes PrivKV's shrinkage geometrically. Live,
the aggregator closes a round by its policy (``round_min_reports`` reports and
``round_period`` elapsed) and publishes the next means on a control topic (see
:mod:`kvldp.common.messages.control_record`); ``collect`` runs the same rounds in-process on one population,
each round on the means computed from the rounds before it.

This module is the mechanism as registered: its parameters, the client (one round's
reports ``(r, md, j, s)``), the statistics counts[r, j, s] with their expectation, and
the privacy model. Its two siblings hold the rest, as the classes :class:`PrivKVM`
derives from: :mod:`~kvldp.common.mechanisms.privkvm_rounds` the round protocol client
and server share (budget per round, published means, means digest, adaptive stop), and
:mod:`~kvldp.common.mechanisms.privkvm_estimate` the estimators.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from kvldp.common.channel.output_model import OutputModel, ProductModel, discrete_users
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import Field, Report, ReportBatch, concat, row
from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms.base import COLLECT_CHUNK, IntArray
from kvldp.common.mechanisms.keysampled import ABSENT, NEG, POS, states_of
from kvldp.common.mechanisms.privkv import lpp_perturb, lpp_transition
from kvldp.common.mechanisms.privkvm_estimate import PrivKVMEstimators
from kvldp.common.mechanisms.privkvm_rounds import means_digest
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray
from kvldp.common.spec.params import InvalidParameter, Param
from kvldp.common.spec.privacy import InvalidPrivacy, parse_duration


def _is_duration(text: object) -> bool:
    try:
        parse_duration(text, "round_period")
    except InvalidPrivacy:
        return False
    return True


@register
class PrivKVM(PrivKVMEstimators):
    """PrivKVM as registered under ``privkvm``: c rounds of PrivKV's LPP, non-holders
    perturbing the means the server published before each round."""

    name = "privkvm"
    summary = "PrivKVM: c rounds of PrivKV with published means (Ye et al. 2019, reconstructed)"
    estimator_names = ("unbiased", "paper", "em", "normsub", "virtual")
    params_spec = (
        Param(
            "rounds",
            int,
            10,
            "real rounds c (Sun et al. 2019 use 10, Horigome et al. 2023 3, PCKV's comparison 1)",
            check=lambda v: 1 <= int(v) <= 64,
            check_doc="must lie in [1, 64]",
        ),
        Param(
            "virtual",
            int,
            0,
            "virtual iterations after one real round ('1r5v' = rounds 1, virtual 5)",
            check=lambda v: 0 <= int(v) <= 10_000,
            check_doc="must lie in [0, 10000]",
        ),
        Param(
            "budget_mode",
            str,
            "default",
            "default: key eps/2 in round 1 only; per_round_equal: eps/(2c) to key and value every round",
            choices=("default", "per_round_equal"),
        ),
        Param(
            "round_min_reports",
            int,
            1,
            "live rounds: reports a round needs before it may close",
            check=lambda v: 1 <= int(v) <= 10**12,
            check_doc="must lie in [1, 1e12]",
        ),
        Param(
            "round_period",
            str,
            "1h",
            "live rounds: time a round stays open at least (e.g. '30s', '1h'; devices report once per round)",
            check=_is_duration,
            check_doc="a duration such as '30s', '15m', '1h' or '1d'",
        ),
        Param(
            "adaptive",
            bool,
            False,
            "PrivKVM+ stopping rule (reconstructed): stop after the first round whose means moved by <= a0",
        ),
        Param(
            "a0",
            float,
            0.0,
            "threshold A0 of the adaptive rule on mean_k |m^(r) - m^(r-1)| (values in [-1, 1])",
            check=lambda v: 0.0 <= float(v) <= 2.0,
            check_doc="must lie in [0, 2]",
        ),
    )

    def _setup(self) -> None:
        self.rounds = int(self.params["rounds"])
        self.virtual = int(self.params["virtual"])
        if self.virtual and self.rounds != 1:
            raise InvalidParameter("privkvm: virtual iterations are reconstructed for one real round only")
        self.adaptive = bool(self.params["adaptive"])
        self.a0 = float(self.params["a0"])
        if self.adaptive and self.a0 <= 0:
            raise InvalidParameter("privkvm: adaptive = true needs a0 > 0 (the stopping threshold A0)")
        if self.a0 > 0 and not self.adaptive:
            raise InvalidParameter("privkvm: a0 is the threshold of the adaptive rule; set adaptive = true")
        self.round_min_reports = int(self.params["round_min_reports"])
        self.round_period_s = parse_duration(self.params["round_period"], "round_period")
        self._schedule_budget()

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        return (
            Field("r", "uint", 0, self.rounds),
            Field("md", "uint", 0, 2**32),
            Field("j", "uint", 0, self.d),
            Field("s", "uint", 0, 3),
        )

    def perturb_round(
        self, users: KVData, rng: np.random.Generator, round_index: int, published: FloatArray
    ) -> ReportBatch:
        """One round of the protocol for every user, given the server's published means."""
        n = users.n_users
        j = rng.integers(0, self.d, size=n, dtype=np.int64)
        fake = None if round_index == 0 else published[j]
        s = lpp_perturb(states_of(users, j, rng), float(self.p1[round_index]), self.p2, rng, fake)
        return {
            "r": np.full(n, round_index, dtype=np.int64),
            "md": np.full(n, means_digest(round_index, published), dtype=np.int64),
            "j": j,
            "s": s,
        }

    def perturb_round_many(
        self, users: KVData, rng: np.random.Generator, round_index: int, published: FloatArray
    ) -> ReportBatch:
        """:meth:`perturb_round` in the blocks of :meth:`collect`: the same generator gives
        the same reports whether the round runs in-process or through a live fleet."""
        return concat(
            [self.perturb_round(b, rng, round_index, published) for b in users.chunks(COLLECT_CHUNK)]
        )

    def perturb(
        self,
        pairs: Mapping[int, float],
        rng: np.random.Generator,
        round_index: int = 0,
        published: FloatArray | None = None,
    ) -> Report:
        """One device's report for one round (``published`` = the means announced before it)."""
        pub = np.zeros(self.d) if published is None else np.asarray(published, dtype=np.float64)
        batch = self.perturb_round(KVData.from_pairs(self.d, [pairs]), rng, round_index, pub)
        return row(batch, self.fields(), 0)

    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        stats = self.new_stats()
        batches = []
        for r in range(self.rounds):
            batch = self.perturb_round(
                users, rng, r, self.published_means(stats.arrays["counts"].astype(np.float64))[r]
            )
            stats.fold(batch)
            batches.append(batch)
            if self.stops_after(r, stats.arrays["counts"].astype(np.float64)):
                break
        return concat(batches)

    def collect(self, users: KVData, rng: np.random.Generator) -> Stats:
        """All rounds on the whole population (published means must see every user), with
        the adaptive rule's early stop."""
        stats = self.new_stats()
        for r in range(self.rounds):
            published = self.published_means(stats.arrays["counts"].astype(np.float64))[r]
            stats.fold(self.perturb_round_many(users, rng, r, published))
            if self.stops_after(r, stats.arrays["counts"].astype(np.float64)):
                break
        return stats

    # --------------------------------------------------------------- statistics
    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"counts": (self.rounds, self.d, 3)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        codes = (batch["r"].astype(np.int64) * self.d + batch["j"].astype(np.int64)) * 3 + batch["s"].astype(
            np.int64
        )
        arrays["counts"] += np.bincount(codes, minlength=self.rounds * self.d * 3).reshape(
            self.rounds, self.d, 3
        )

    def expected_stats(self, users: KVData) -> Stats:
        """Expected counts along the noise-free trajectory: each round's published mean is
        computed from the previous rounds' expected counts, as the server would."""
        holders = np.bincount(users.keys, minlength=self.d).astype(np.float64)
        up = np.bincount(users.keys, weights=(1.0 + users.values) / 2.0, minlength=self.d)
        latent = np.stack([holders - up, users.n_users - holders, up], axis=1)
        counts = np.zeros((self.rounds, self.d, 3))
        for r in range(self.rounds):
            published = self.published_means(counts)[r]
            p = lpp_transition(float(self.p1[r]), self.p2, published)
            counts[r] = np.einsum("gjk,gk->gj", p, latent) / self.d
            if self.stops_after(r, counts):
                break
        return Stats.expected(self, {"counts": counts, "n": np.array([float(counts.sum())])})

    # --------------------------------------------------------------- privacy
    def _analysed_epsilon(self) -> float:
        """Round 1 is the LPP at (eps_key[0], eps/(2c)) with a fair fake coin; every later
        round, against the worst published mean, adds eps_key[r] + eps/(2c) at most and
        exactly that for the holder-versus-non-holder pair that is worst in round 1."""
        e2 = self.eps_value
        first = max(e2, float(self.eps_key[0]) + math.log(2.0 / (1.0 + math.exp(-e2))))
        return first + float(np.sum(self.eps_key[1:])) + (self.rounds - 1) * e2

    def exhaustive_feasible(self) -> bool:
        return self.d <= 3

    def audit_model(self, exhaustive: bool) -> OutputModel:
        """Rounds are independent coordinates (fresh j and coins each round); published means
        are public and adversarial: each later round takes the worst vertex of [-1, 1]^d
        (ratios are linear-fractional in each mean). Reduced: key 0's three states, outputs
        (j = 0, z) plus one merged symbol for other keys (all three inputs are absent there)."""
        if exhaustive:
            users, labels = discrete_users(self.d)
            held, values = users.to_dense()
            states = np.where(held, np.where(values > 0, POS, NEG), ABSENT)  # (X, d)
            vertices = np.array(np.meshgrid(*[[-1.0, 1.0]] * self.d, indexing="ij")).reshape(self.d, -1).T
            factors = np.zeros((states.shape[0], self.rounds, vertices.shape[0], 3 * self.d))
            for r in range(self.rounds):
                for v, mean in enumerate(vertices):
                    p = lpp_transition(float(self.p1[r]), self.p2, np.zeros(self.d) if r == 0 else mean)
                    for j in range(self.d):
                        factors[:, r, v, 3 * j : 3 * j + 3] = p[j][:, states[:, j]].T / self.d
            return ProductModel(factors, labels)
        states = np.array([ABSENT, POS, NEG])
        factors = np.zeros((3, self.rounds, 2, 4))
        for r in range(self.rounds):
            for v, vertex in enumerate((-1.0, 1.0)):
                p = lpp_transition(float(self.p1[r]), self.p2, 0.0 if r == 0 else vertex)
                factors[:, r, v, :3] = p[:, states].T / self.d
                factors[:, r, v, 3] = (self.d - 1) / self.d
        return ProductModel(factors, ("{}", "{0:+1}", "{0:-1}"))
