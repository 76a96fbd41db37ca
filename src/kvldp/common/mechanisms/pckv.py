"""PCKV: Padding-and-Sampling with PCKV-UE and PCKV-GRR (Gu et al. 2020; docs/mechanisms.md, *PCKV*).

The mechanism classes: configuration, the client, the statistics its reports fold into,
and the exact audit. The estimators and their standard errors are in
:mod:`~kvldp.common.mechanisms.pckv_estimate` (:class:`PCKV` inherits them); the split of
epsilon into (eps1, eps2), the probabilities it gives and the privacy theorems are in
:mod:`~kvldp.common.mechanisms.pckv_budget`; the share of reports that sampled a dummy
slot, which tells whether ell covers the devices' pairs, in
:mod:`~kvldp.common.mechanisms.pckv_padded`.

Client. Each device pads its set S with ell *distinct* dummy keys d..d+ell-1 and samples
one pair (Alg. 1, in the equivalent form of the authors' reference code: with probability
|S| / max(|S|, ell) a uniform pair of S, otherwise a uniform dummy whose value is 0), then
discretises the value, v* = Disc(v). The sampled pair is perturbed over the padded domain
of d' = d + ell keys, which is why every allocation formula depends on d':

* PCKV-UE (Alg. 2): a ternary vector; the sampled coordinate keeps v* with probability
  a p, flips it with a(1-p), drops to 0 otherwise; every other coordinate is +-1 with
  probability b/2 each. The report keeps the *real* coordinates only (fields ``pos`` and
  ``neg``, LSB-first bitsets of d bits); dropping the dummy coordinates is
  post-processing, so the mechanism stays eps-LDP and the estimators never need them.
* PCKV-GRR (Alg. 3): one pair <k', v'>; with probability a the sampled key with v* kept
  with probability p, otherwise a uniform other key of the d' with a fair sign. Fields
  ``k`` in [0, d] and ``v`` in {-1, 0, +1}: any dummy output is reported as k = d, v = 0
  (post-processing again); a real key always carries v = +-1.

Statistics (both): n1[j] = #reports with +1 at key j, n2[j] = #reports with -1, and n.
Per key j and user u the report's symbol at j is +1/-1/0 with the same probabilities in
both protocols — a/2 (1 +- (2p-1) v) when u sampled j, b/2 each otherwise — so the
estimators and their variances are shared.

Privacy: Theorem 2 (UE) and Theorem 3 (GRR) give the claimed epsilon. The exact audit
enumerates discrete users and every output.

Instantaneous randomization (docs/mechanisms.md, *Instantaneous randomization*): PCKV-UE's
coordinates by 3-ary randomized response each, PCKV-GRR's (key, sign) pair by randomized
response over its 2d + 1 symbols. Both keep every per-key law in PCKV's family at the
composed (a*, b*, p*) (:func:`~kvldp.common.mechanisms.pckv_budget.composed_probabilities`),
so the estimators, their variances and the padded share carry over at those; the composed
PCKV-UE is PCKV-UE at (a*, b*, p*) outright (its plausibility rule included), while
PCKV-GRR's one dummy symbol stands for 2 ell symbols of the family and receives
(2 ell - 1) q1 less, which only its exact model and level see.
"""

from __future__ import annotations

import abc
import itertools
import math
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from kvldp.common.channel.instantaneous import (
    InstantaneousRandomizer,
    SymbolOutput,
    TernaryOutput,
    solve_contrast,
)
from kvldp.common.channel.output_model import (
    AuditTooLarge,
    DenseModel,
    Layout,
    OutputModel,
    PatternLayout,
    SymbolLayout,
    discrete_users,
)
from kvldp.common.channel.plausibility import RefusalRule, set_bits
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.padding import sample_slots, slot_weights
from kvldp.common.mechanisms.pckv_budget import (
    allocate,
    composed_probabilities,
    grr_level,
    grr_probabilities,
    theorem2_epsilon,
    theorem3_epsilon,
    ue_level,
    ue_probabilities,
    utility_gh,
)
from kvldp.common.mechanisms.pckv_estimate import PCKVEstimation
from kvldp.common.mechanisms.pckv_padded import PaddedShare, padded_share
from kvldp.common.mechanisms.registry import register
from kvldp.common.mechanisms.unary_plausibility import PCKVAccepted, pckv_ue_rule
from kvldp.common.primitives import FloatArray, bit_column_sums, disc, flip, pack_bits
from kvldp.common.spec.params import InvalidParameter, Param

ELL = Param(
    "ell",
    int,
    1,
    "padding length: each user samples one of max(|S|, ell) slots, empty slots are distinct dummy keys",
    check=lambda v: 1 <= int(v) <= 1_000_000,
    check_doc="must be an integer between 1 and 1000000",
)
ALLOCATION = Param(
    "allocation",
    str,
    "optimized",
    "split of epsilon into key budget eps1 and value budget eps2: optimized (Gu et al. 2020, Lemmas 2-3), "
    "naive (eps1 = eps2 = eps/2) or nonoptimized (Eq. 21: eps2 = eps/2, eps1 = ln[(e^eps + e^(eps/2))/2])",
    choices=("optimized", "naive", "nonoptimized"),
)
COUNT_FLOOR = Param(
    "count_floor",
    int,
    1,
    "lower clip L of the calibrated counts in Algorithm 4 (1 in the author's code, 0 in others)",
    check=lambda v: v in (0, 1),
    check_doc="must be 0 or 1",
)

#: users whose ternary vectors are generated together (bounds simulator memory to ~4M cells)
UE_BLOCK_CELLS = 1 << 22
#: an exact audit may hold at most this many probabilities ...
MAX_AUDIT_ENTRIES = 1 << 22
#: ... and compare at most this many (input, input, output) triples
MAX_AUDIT_WORK = 1 << 28


# ---------------------------------------------------------------------- padding and sampling
def pad_and_sample(users: KVData, ell: int, rng: np.random.Generator) -> tuple[IntArray, NDArray[np.int8]]:
    """Padding-and-Sampling (in the form of the authors' reference code): the sampled key in [0, d + ell) (indices >= d
    are the ell distinct dummies, uniform among them) and v* = Disc(v), a fair coin for a
    dummy (v = 0)."""
    real, key, value = sample_slots(users, ell, rng)
    dummy = users.d + rng.integers(0, ell, size=users.n_users)
    return np.where(real, key, dummy).astype(np.int64), disc(value, rng)


def bernoulli_positions(trials: int, prob: float, rng: np.random.Generator) -> IntArray:
    """Sorted indices of the successes among ``trials`` iid Bernoulli(prob) draws.

    Gaps between successes are iid Geometric(prob), so the cost is proportional to the
    number of successes, not of trials: PCKV-UE's non-sampled coordinates are nonzero with
    probability b, which is small at large epsilon.
    """
    if trials <= 0 or prob <= 0.0:
        return np.zeros(0, dtype=np.int64)
    if prob >= 1.0:
        return np.arange(trials, dtype=np.int64)
    mean = trials * prob
    batch = int(mean + 6.0 * math.sqrt(mean) + 16)
    parts: list[IntArray] = []
    last = -1
    while True:
        pos = last + np.cumsum(rng.geometric(prob, size=batch))
        parts.append(pos[pos < trials])
        if pos[-1] >= trials:
            return np.concatenate(parts).astype(np.int64)
        last = int(pos[-1])


def _count_sets(m: int, max_size: int) -> int:
    """Number of users over m keys with at most ``max_size`` pairs of values +-1."""
    return sum(math.comb(m, s) * 2**s for s in range(min(m, max_size) + 1))


# ---------------------------------------------------------------------- the shared family
class PCKV(PCKVEstimation):
    """What PCKV-UE and PCKV-GRR share: configuration, sampling, statistics, audit inputs.

    The estimators are inherited from
    :class:`~kvldp.common.mechanisms.pckv_estimate.PCKVEstimation`.
    """

    params_spec: ClassVar[tuple[Param, ...]] = (ELL, ALLOCATION, COUNT_FLOOR)
    #: whether a report carries d independent coordinates (PCKV-UE) or one key (PCKV-GRR)
    unary: ClassVar[bool]
    #: how much less than a + (ell - 1) b and ell b the dummy output of PCKV-GRR receives
    #: (after an instantaneous randomization; 0 for the client's own reports)
    dummy_deficit: float = 0.0

    def _setup(self) -> None:
        self.ell = int(self.params["ell"])
        self.d_prime = self.d + self.ell
        self.count_floor = float(self.params["count_floor"])
        self.eps1, self.eps2 = allocate(self.epsilon, str(self.params["allocation"]), self.name, self.ell)
        self.client_a, self.client_b, self.p = self._probabilities()
        # a or p rounding to exactly 1 would make the client deterministic (infinite loss)
        if not (0.0 < self.client_b < self.client_a < 1.0 and 0.5 < self.p < 1.0):
            raise InvalidParameter(
                f"{self.name}: epsilon={self.epsilon} gives degenerate probabilities in floating point "
                f"a={self.client_a}, b={self.client_b}, p={self.p} (need 0 < b < a < 1 and 1/2 < p < 1)"
            )
        self._accept()

    def _accept(self) -> None:
        self.accepted = self._accepted()
        # the estimators' (a, b): the client's, conditioned on the report being accepted
        self.a, self.b = self.accepted.a, self.accepted.b

    @abc.abstractmethod
    def _probabilities(self) -> tuple[float, float, float]:
        """(a, b, p) from (eps1, eps2, d')."""

    def _accepted(self) -> PCKVAccepted:
        """The law of accepted reports (docs/plausibility.md); every report is accepted by default."""
        a, b = self.client_a, self.client_b
        return PCKVAccepted(1.0, a, b, 1.0, b)

    def utility(self) -> tuple[float, float]:
        """(g, h) of Gu et al. 2020, Eq. 16, for this configuration (any allocation)."""
        return utility_gh(self.client_a, self.client_b, self.p)

    # --------------------------------------------------------------- instantaneous randomization
    @abc.abstractmethod
    def _level(self, a: float, b: float, p: float, deficit: float) -> float:
        """The exact privacy level at probabilities (a, b, p) (and PCKV-GRR's dummy deficit)."""

    def _composed(self, contrast: float) -> tuple[float, float, float]:
        """(a*, b*, p*) after the randomizer of this contrast."""
        size = self.randomized_output().size
        return composed_probabilities(self.client_a, self.client_b, self.p, size, contrast)

    def _dummy_deficit(self, contrast: float) -> float:
        """How much less than the family's the dummy output receives (PCKV-GRR only)."""
        return 0.0

    def _composed_level(self, contrast: float) -> float:
        return self._level(*self._composed(contrast), self._dummy_deficit(contrast))

    def _per_report_level(self) -> float:
        return self._level(self.client_a, self.client_b, self.p, 0.0)

    def _instantaneous_contrast(self, epsilon_per_report: float) -> float:
        return solve_contrast(self._composed_level, epsilon_per_report)

    def _composed_channel(self, randomizer: InstantaneousRandomizer) -> PCKV:
        channel = type(self)(self.d, self.epsilon, **self.params)
        channel.client_a, channel.client_b, channel.p = self._composed(randomizer.contrast)
        channel.dummy_deficit = self._dummy_deficit(randomizer.contrast)
        channel._accept()
        return channel

    # --------------------------------------------------------------- statistics
    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"n1": (self.d,), "n2": (self.d,)}

    def expected_stats(self, users: KVData) -> Stats:
        """E[n1[j]] = sum_u (W_u B + (1 - W_u) B0)/2 + sum over holders u of j of
        w_u (A/2 (1 + (2p-1) v_u) - B/2), w_u = 1/max(|S_u|, ell), W_u the user's chance of
        sampling a real key; E[n2] likewise with -(2p-1); E[n] = sum_u W_u alpha +
        (1 - W_u) alpha0. A, B (B0) are the joint chances that the sampled (another)
        coordinate is non-zero *and* the report is accepted, alpha (alpha0) the chance of
        acceptance, for a device that sampled a real key (a dummy); without a refusal
        region they are a, b, b and 1. Exact, for any population. The sum over holders
        splits into (A - B)/2 sum w_u +- A (2p-1)/2 sum w_u v_u: two weighted counts per key."""
        w, dummy = slot_weights(users, self.ell)
        acc = self.accepted
        a, b, p = acc.alpha * acc.a, acc.alpha * acc.b, self.p
        b0 = acc.dummy_alpha * acc.dummy_b
        real = 1.0 - dummy
        base = float(np.sum(real * b + dummy * b0)) / 2.0
        sampled = np.bincount(users.keys, weights=w, minlength=self.d)
        valued = np.bincount(users.keys, weights=w * users.values, minlength=self.d)
        common = base + (a - b) / 2 * sampled
        lift = a * (2 * p - 1) / 2 * valued
        n1, n2 = common + lift, common - lift
        n = float(np.sum(real * acc.alpha + dummy * acc.dummy_alpha))
        return Stats.expected(self, {"n1": n1, "n2": n2, "n": np.array([n])})

    def padded_share(self, stats: Stats) -> PaddedShare:
        """The share of reports whose device sampled a dummy slot, estimated from ``stats``
        with its standard error (:mod:`~kvldp.common.mechanisms.pckv_padded`)."""
        arrays = stats.arrays
        real = float(arrays["n1"].sum() + arrays["n2"].sum())
        return padded_share(float(arrays["n"][0]), real, self.d, self.ell, self.a, self.b, self.unary)

    # --------------------------------------------------------------- privacy
    @abc.abstractmethod
    def _audit_outputs(self, m: int) -> FloatArray:
        """Pr[output | sampled item] (Z, 2m + 1) for outputs about a sub-domain of m keys;
        items are (k, +1), (k, -1) for k < m, then "a dummy"."""

    @abc.abstractmethod
    def _n_audit_outputs(self, m: int) -> int: ...

    def _audit_size_ok(self, n_inputs: int, n_outputs: int) -> bool:
        return n_inputs * n_outputs <= MAX_AUDIT_ENTRIES and n_inputs**2 * n_outputs <= MAX_AUDIT_WORK

    def exhaustive_feasible(self) -> bool:
        return self.d <= 20 and self._audit_size_ok(3**self.d, self._n_audit_outputs(self.d))

    def audit_model(self, exhaustive: bool) -> OutputModel:
        """Exact Pr[output | discrete user] (values +-1; see :mod:`kvldp.common.guarantees.privacy_audit`).

        Exhaustive: all 3^d users and every output. Reduced: users over the sub-domain of
        the first m = min(d, 2 ell) keys holding at most ell pairs. That loses nothing:

        * a set with more than ell keys samples uniformly among them, so for any output z
          its probability is an average of the per-key probabilities, which the ell-subset
          of its most (least) likely keys for z matches or exceeds (undercuts) — the
          ell-subset samples each of its keys with probability 1/ell and no dummy; the max
          over z of max_S Pr[z|S] / min_S' Pr[z|S'] is therefore reached by sets of at most
          ell keys;
        * two such sets touch at most 2 ell keys, and the mechanism is symmetric under
          relabelling the real keys, so some worst pair lies in the sub-domain;
        * for users inside the sub-domain, what the report says about the other keys has
          the same law for every user (they are never sampled) and cancels in every ratio
          (PCKV-UE: the coordinates outside; PCKV-GRR: all outside keys merged into one
          output). Dummy coordinates are not part of a report at all.
        """
        m = self.d if exhaustive else min(self.d, 2 * self.ell)
        # sizes are counted before anything is enumerated (m > 40 is hopeless anyway)
        if m > 40 or not self._audit_size_ok(
            3**m if exhaustive else _count_sets(m, self.ell), self._n_audit_outputs(m)
        ):
            raise AuditTooLarge(
                f"exact {'exhaustive' if exhaustive else 'reduced'} audit of {self.name} with d={self.d}, "
                f"ell={self.ell} enumerates users over {m} keys: too large (Theorems 2/3 still apply)"
            )
        users, labels = discrete_users(m, max_size=None if exhaustive else self.ell)
        w_pair, w_dummy = slot_weights(users, self.ell)
        rows = np.repeat(np.arange(users.n_users), users.sizes)
        weights = np.zeros((users.n_users, 2 * m + 1))
        weights[rows, 2 * users.keys + (users.values < 0)] = w_pair
        weights[:, 2 * m] = w_dummy
        probs = np.asarray(weights @ self._audit_outputs(m).T, dtype=np.float64)
        return DenseModel(probs, labels, self._audit_layout(m))

    @abc.abstractmethod
    def _audit_layout(self, m: int) -> Layout:
        """How the outputs of :meth:`_audit_outputs` relate to the randomized output."""


@register
class PCKVUE(PCKV):
    """PCKV-UE (docs/mechanisms.md, *PCKV-UE*): the sampled pair as a ternary vector; reports the real coordinates."""

    name = "pckv_ue"
    summary = "PCKV-UE: padding-and-sampling + unary encoding of the sampled key-value pair (Gu et al.)"
    unary = True

    def _probabilities(self) -> tuple[float, float, float]:
        return ue_probabilities(self.eps1, self.eps2)

    def _analysed_epsilon(self) -> float:
        return theorem2_epsilon(self.eps1, self.eps2)

    def randomized_output(self) -> TernaryOutput:
        return TernaryOutput("pos", "neg", self.d)

    def _level(self, a: float, b: float, p: float, deficit: float) -> float:
        return ue_level(a, b, p, self.ell, self.d)

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        return (Field("pos", "bits", 0, self.d), Field("neg", "bits", 0, self.d))

    def _validate_extra(self, batch: ReportBatch) -> list[tuple[NDArray[np.bool_], str]]:
        overlap = np.any((batch["pos"] & batch["neg"]) != 0, axis=1)
        return [(overlap, "pos and neg share a bit (a key cannot be both +1 and -1)")]

    def _accepted(self) -> PCKVAccepted:
        rule, accepted = self._plausibility()
        return accepted if rule.active else super()._accepted()

    def _plausibility(self) -> tuple[RefusalRule, PCKVAccepted]:
        return pckv_ue_rule(
            self.d, self.client_a, self.client_b, self.p, self.ell, type(self).false_refusal_bound
        )

    def plausibility_rule(self) -> RefusalRule:
        """Refuses reports with too many non-zero keys (docs/plausibility.md, *PCKV-UE*)."""
        return self._plausibility()[0]

    def plausibility_bias_bound(self) -> tuple[float, float]:
        """(relative, additive): the unbiased frequency on the accepted reports' expected
        statistics is within f relative + additive of f (users with at most ell keys).

        The estimators use a real-key device's accepted law; a dummy-sampling device is
        accepted with a slightly different chance (alpha0) and sets another coordinate with
        a slightly different one (b0), which the statistics cannot separate
        (docs/plausibility.md, *Estimators*)."""
        acc = self.accepted
        relative = abs(1.0 - acc.alpha / acc.dummy_alpha)
        additive = self.ell * abs(acc.dummy_b - acc.b) / (acc.a - acc.b)
        return relative, additive

    def report_statistic(self, batch: ReportBatch) -> NDArray[np.int64]:
        """The number of non-zero keys, set bits of ``pos`` plus ``neg`` (at most d)."""
        return np.asarray(np.minimum(set_bits(batch["pos"]) + set_bits(batch["neg"]), self.d), dtype=np.int64)

    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        """Algorithm 2 on the real coordinates. The sampled coordinate is v* w.p. a p, -v*
        w.p. a(1-p), else 0; every other coordinate independently +-1 w.p. b/2 each, drawn
        sparsely (Bernoulli(b) positions, fair signs) in blocks of users."""
        n, d = users.n_users, self.d
        keys, vstar = pad_and_sample(users, self.ell, rng)
        u = rng.random(n)
        a, b = self.client_a, self.client_b
        y = np.where(u < a * self.p, vstar, np.where(u < a, -vstar, 0)).astype(np.int8)
        nbytes = (d + 7) // 8
        pos = np.zeros((n, nbytes), dtype=np.uint8)
        neg = np.zeros((n, nbytes), dtype=np.uint8)
        block = max(1, UE_BLOCK_CELLS // d)
        for start in range(0, n, block):
            rows = min(block, n - start)
            hits = bernoulli_positions(rows * d, b, rng)
            up = rng.random(hits.size) < 0.5
            pos_bits = np.zeros((rows, d), dtype=bool)
            neg_bits = np.zeros((rows, d), dtype=bool)
            pos_bits.flat[hits[up]] = True
            neg_bits.flat[hits[~up]] = True
            # the sampled real coordinate replaces its non-sampled draw (independent cells)
            r = np.flatnonzero(keys[start : start + rows] < d)
            k = keys[start + r]
            pos_bits[r, k] = y[start + r] > 0
            neg_bits[r, k] = y[start + r] < 0
            pos[start : start + rows] = pack_bits(pos_bits)
            neg[start : start + rows] = pack_bits(neg_bits)
        return {"pos": pos, "neg": neg}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        arrays["n1"] += bit_column_sums(batch["pos"], self.d)
        arrays["n2"] += bit_column_sums(batch["neg"], self.d)

    # --------------------------------------------------------------- privacy
    def _n_audit_outputs(self, m: int) -> int:
        return int(3**m)

    def _audit_layout(self, m: int) -> Layout:
        return PatternLayout(blocks=1, coords=m, size=3)

    def _audit_outputs(self, m: int) -> FloatArray:
        """Every ternary pattern of the m coordinates: a product over coordinates of
        b/2 (+-1) or 1-b (0), with the sampled coordinate's factor replaced."""
        a, b, p = self.client_a, self.client_b, self.p
        y = np.array(list(itertools.product((1, -1, 0), repeat=m)), dtype=np.int64).reshape(-1, m)
        q = np.where(y == 0, 1 - b, b / 2)
        base = np.prod(q, axis=1)
        comp = np.empty((y.shape[0], 2 * m + 1))
        for sign, offset in ((1, 0), (-1, 1)):
            r = np.where(y == sign, a * p, np.where(y == -sign, a * (1 - p), 1 - a))
            comp[:, offset : 2 * m : 2] = base[:, None] / q * r
        comp[:, 2 * m] = base
        return comp


@register
class PCKVGRR(PCKV):
    """PCKV-GRR (docs/mechanisms.md, *PCKV-GRR*): GRR over the d' padded keys with the value kept w.p.
    p; reports one pair."""

    name = "pckv_grr"
    summary = "PCKV-GRR: padding-and-sampling + GRR over the padded key-value pairs (Gu et al.)"
    unary = False

    def _probabilities(self) -> tuple[float, float, float]:
        return grr_probabilities(self.eps1, self.eps2, self.d_prime)

    def _analysed_epsilon(self) -> float:
        return theorem3_epsilon(self.eps1, self.eps2, self.ell)

    def randomized_output(self) -> SymbolOutput:
        """The pair (k, v) as one of 2d + 1 symbols: 2k for (k, +1), 2k + 1 for (k, -1), 2d for
        the dummy (d, 0)."""
        return SymbolOutput(("k", "v"), 2 * self.d + 1, self._pair_symbols, self._pair_fields)

    def _pair_symbols(self, batch: ReportBatch) -> IntArray:
        return np.asarray(2 * batch["k"].astype(np.int64) + (batch["v"] < 0), dtype=np.int64)

    def _pair_fields(self, symbols: IntArray) -> ReportBatch:
        k, negative = np.divmod(symbols, 2)
        return {"k": k, "v": np.where(k == self.d, 0, 1 - 2 * negative).astype(np.int64)}

    def _level(self, a: float, b: float, p: float, deficit: float) -> float:
        return grr_level(a, b, p, self.ell, self.d, deficit)

    def _dummy_deficit(self, contrast: float) -> float:
        """The dummy symbol stands for the 2 ell (dummy key, sign) symbols of the family but
        receives q1 once: (2 ell - 1) q1 less."""
        return (2 * self.ell - 1) * (1.0 - contrast) / self.randomized_output().size

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        """``k`` in [0, d] (d: a dummy key was output) and ``v`` in {-1, 0, +1} (0 only with k = d)."""
        return (Field("k", "uint", 0, self.d + 1), Field("v", "int", -1, 2))

    def _validate_extra(self, batch: ReportBatch) -> list[tuple[NDArray[np.bool_], str]]:
        dummy = batch["k"] == self.d
        zero = batch["v"] == 0
        return [
            (dummy & ~zero, f"k = {self.d} (dummy) must carry v = 0"),
            (~dummy & zero, "v = 0 is reserved for the dummy key"),
        ]

    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        """Algorithm 3: w.p. a the sampled key with v* kept w.p. p; otherwise another key,
        t uniform in [0, d'-1) shifted past the sampled one, with a fair sign. Dummy
        outputs become (d, 0)."""
        n = users.n_users
        keys, vstar = pad_and_sample(users, self.ell, rng)
        keep = rng.random(n) < self.client_a
        t = rng.integers(0, self.d_prime - 1, size=n)
        other = t + (t >= keys)
        fair = np.where(rng.random(n) < 0.5, 1, -1)
        out_k = np.where(keep, keys, other)
        out_v = np.where(keep, flip(vstar, self.p, rng), fair)
        dummy = out_k >= self.d
        return {
            "k": np.where(dummy, self.d, out_k).astype(np.int64),
            "v": np.where(dummy, 0, out_v).astype(np.int64),
        }

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        codes = batch["k"].astype(np.int64) * 3 + (batch["v"].astype(np.int64) + 1)
        counts = np.bincount(codes, minlength=3 * (self.d + 1)).reshape(self.d + 1, 3)
        arrays["n1"] += counts[: self.d, 2]
        arrays["n2"] += counts[: self.d, 0]

    # --------------------------------------------------------------- privacy
    def _n_audit_outputs(self, m: int) -> int:
        return 2 * m + 1 + (1 if self.d > m else 0)

    def _audit_outputs(self, m: int) -> FloatArray:
        """Outputs (k, +1), (k, -1) for k < m, "a real key outside the sub-domain" (when d > m,
        probability (d - m) b for every item) and "a dummy" (a + (ell-1) b after sampling a
        dummy, ell b otherwise, both less the dummy deficit)."""
        a, b, p, ell = self.client_a, self.client_b, self.p, self.ell
        comp = np.full((2 * m, 2 * m + 1), b / 2)
        idx = np.arange(2 * m)
        comp[idx, idx] = a * p
        comp[idx, idx ^ 1] = a * (1 - p)
        extra = [np.append(np.full(2 * m, (self.d - m) * b), (self.d - m) * b)] if self.d > m else []
        dummy = np.append(np.full(2 * m, ell * b), a + (ell - 1) * b) - self.dummy_deficit
        return np.vstack([comp, *extra, dummy])

    def _audit_layout(self, m: int) -> Layout:
        """Each (k, sign) output is one symbol, the outside keys' 2(d - m), the dummy one."""
        outside = [2.0 * (self.d - m)] if self.d > m else []
        return SymbolLayout(np.array([1.0] * (2 * m) + outside + [1.0]))
