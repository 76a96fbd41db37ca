"""PrivKVM: PrivKV iterated over c rounds, with virtual iterations (spec §5, reconstructed).

The original PrivKV paper (Ye et al., S&P 2019) could not be retrieved; this follows the
reconstruction of the spec from the PCKV authors' code [X1] and [X6], and is flagged as
such in every estimate's diagnostics.

Protocol (budget_mode ``default``): round 1 spends eps/2 on the key bit; every round
spends eps/(2c) on the value; later rounds spend nothing on the key (the key bit is a
fair coin). Before round r >= 2 the server publishes m^(r-1) and non-holders perturb
that value instead of a uniform fake, which removes PrivKV's shrinkage geometrically.
``per_round_equal`` is the alternative reading eps1 = eps2 = eps/(2c) in every round.
Round r costs a device ``round_epsilon(r)``; the c rounds together cost exactly eps.

Every report carries its round ``r`` and ``md``, the digest of the means it perturbed
with (:func:`means_digest`), so a server can tell a report built on other means. Live, the
aggregator closes a round by its policy (``round_min_reports`` reports and
``round_period`` elapsed) and publishes the next means on a control topic (see
:mod:`kvldp.common.control`); ``collect`` runs the same rounds in-process on one population,
each round on the means computed from the rounds before it. With ``adaptive`` the rounds
stop early by PrivKVM+'s rule (spec §5, reconstructed): after the first round r whose
means moved by at most ``a0`` on average, mean_k |m^(r) - m^(r-1)| <= a0.

Statistics: counts[r, j, s]. Estimators:

* ``paper`` — the reconstructed PrivKVM: f from round 1, mean m^(c) by the PrivKV
  calibration of the last round; with ``virtual`` > 0 (one real round only) the virtual
  iterations m^(t+1) = m^(1) + (1 - w)(m^(t) - m^(0)) in closed form (PCKV's "1r5v").
* ``unbiased`` — f from round 1 (unbiased) and, for the mean, one unbiased estimate of
  f*m per round, E[(M1 - M-1)/M] = (2p2 - 1)[p1 f m + (1 - p1)(1 - f) m_pub], combined with
  inverse-variance weights, divided by f.
* ``em`` — the MLE pooling all rounds: per key a 3-state model whose round-r likelihood
  has the published mean as the non-holders' fake value (warm-startable).
* ``normsub`` — round-1 states projected onto the simplex for f; the unbiased mean.
* ``virtual`` — virtual iterations on round-1 data alone (``virtual`` of them, 5 when
  the parameter is 0): PCKV's "1r5v" reading of whatever round 1 collected.

Rounds may have different participants (a device that joins late reports only in the
rounds that remain): each round's estimate uses that round's own report count, which
is right when every round's participants are a sample of the same population taken
independently of their data. f comes from round 1 alone.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from kvldp.common.audit import OutputModel, ProductModel, discrete_users
from kvldp.common.em import em_counts, parse_em_options
from kvldp.common.estimate import Estimate
from kvldp.common.kvdata import KVData
from kvldp.common.mechanisms.base import COLLECT_CHUNK, IntArray, Mechanism
from kvldp.common.mechanisms.keysampled import (
    ABSENT,
    F_ROW,
    NEG,
    POS,
    mean_from_states,
    mean_gradient,
    sampled_count_covariance,
    states_of,
)
from kvldp.common.mechanisms.privkv import lpp_perturb, lpp_transition
from kvldp.common.mechanisms.registry import register
from kvldp.common.params import InvalidParameter, Param
from kvldp.common.primitives import FloatArray, rr_keep
from kvldp.common.privacy import InvalidPrivacy, parse_duration
from kvldp.common.schema import Field, Report, ReportBatch, concat, row
from kvldp.common.simplex import project_simplex
from kvldp.common.stats import Stats
from kvldp.common.variance import delta_variance, stderr

RECONSTRUCTED = "PrivKVM is reconstructed (spec §5): the original paper was not retrievable"
#: virtual iterations of the ``virtual`` estimator when the parameter is 0 (PCKV's "1r5v")
DEFAULT_VIRTUAL = 5


def means_digest(round_index: int, means: FloatArray) -> int:
    """uint32 binding a round to the means published before it (the reports' ``md``)."""
    h = hashlib.sha256(b"kvldp-privkvm-means")
    h.update(int(round_index).to_bytes(2, "little"))
    h.update(np.ascontiguousarray(means, dtype="<f8").tobytes())
    return int.from_bytes(h.digest()[:4], "big")


def _is_duration(text: object) -> bool:
    try:
        parse_duration(text, "round_period")
    except InvalidPrivacy:
        return False
    return True


def calibrated_mean(counts: FloatArray, p2: float, previous: FloatArray) -> FloatArray:
    """PrivKV calibration of one round (D0 Alg.2), clipped into [-1, 1]; keeps ``previous``
    for keys without key-bit-1 reports ([X1])."""
    m1, m_1 = counts[..., POS], counts[..., NEG]
    big_n = m1 + m_1
    n1 = np.clip(((p2 - 1) * big_n + m1) / (2 * p2 - 1), 0, big_n)
    n2 = np.clip(((p2 - 1) * big_n + m_1) / (2 * p2 - 1), 0, big_n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(big_n > 0, np.clip((n1 - n2) / big_n, -1.0, 1.0), previous)


def virtual_iterations(f: FloatArray, first: FloatArray, p1: float, iterations: int) -> FloatArray:
    """m^(1 + iterations) of the virtual iterations (spec §5, reconstructed), in closed form.

    The collector replays the round with fake mean m^(t): m^(t+1) = m^(1) + (1 - w)(m^(t) - m^(0)),
    m^(0) = 0, w = f p1 / (f p1 + (1 - f)(1 - p1)), whose fixed point is m* = m^(1) / w:
    m^(1+v) = m* + (1 - w)^v (m^(1) - m*), clipped into [-1, 1]; keys with w = 0 keep m^(1).
    """
    fc = np.clip(f, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = fc * p1 / (fc * p1 + (1 - fc) * (1 - p1))
        star = first / w
        iterated = star + (1 - w) ** iterations * (first - star)
    return np.asarray(np.where(w > 0, np.clip(iterated, -1.0, 1.0), first), dtype=np.float64)


@register
class PrivKVM(Mechanism):
    name = "privkvm"
    summary = "PrivKVM: c rounds of PrivKV with published means (reconstructed, spec §5)"
    estimator_names = ("unbiased", "paper", "em", "normsub", "virtual")
    params_spec = (
        Param(
            "rounds",
            int,
            10,
            "real rounds c (D0 uses 10, D2 3, PCKV's comparison 1)",
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
        c = self.rounds
        self.eps_value = self.epsilon / (2 * c)
        if self.params["budget_mode"] == "default":
            self.eps_key = np.array([self.epsilon / 2] + [0.0] * (c - 1))
        else:
            self.eps_key = np.full(c, self.epsilon / (2 * c))
        self.p1 = np.array([rr_keep(e) for e in self.eps_key])
        self.p2 = rr_keep(self.eps_value)

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        return (
            Field("r", "uint", 0, self.rounds),
            Field("md", "uint", 0, 2**32),
            Field("j", "uint", 0, self.d),
            Field("s", "uint", 0, 3),
        )

    def round_epsilon(self, round_index: int) -> float:
        """What a device spends on its report in round ``round_index`` (0-based), by
        sequential composition: key budget of the round plus eps/(2c) on the value."""
        return float(self.eps_key[round_index]) + self.eps_value

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

    def _perturb_many(self, users: KVData, rng: np.random.Generator) -> ReportBatch:
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

    # --------------------------------------------------------------- rounds
    def next_means(self, counts: FloatArray, round_index: int, previous: FloatArray) -> FloatArray:
        """m^(r+1), published when round ``round_index`` closes: the PrivKV calibration of
        that round's counts (keys without key-bit-1 reports keep ``previous``)."""
        return calibrated_mean(np.asarray(counts[round_index], dtype=np.float64), self.p2, previous)

    def stops_after(self, round_index: int, counts: FloatArray) -> bool:
        """Whether no round follows ``round_index``: it was the last, or the adaptive rule
        says the means have settled (mean_k |m^(r) - m^(r-1)| <= a0)."""
        if round_index + 1 >= self.rounds:
            return True
        if not self.adaptive:
            return False
        means = self.published_means(counts)
        return bool(np.mean(np.abs(means[round_index + 1] - means[round_index])) <= self.a0)

    def through_round(self, stats: Stats, rounds: int) -> Stats:
        """The statistics of the first ``rounds`` rounds only (later rounds zeroed)."""
        counts = stats.arrays["counts"].copy()
        counts[rounds:] = 0
        return Stats(self, {"counts": counts, "n": np.array([int(counts.sum())], dtype=np.int64)})

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

    def published_means(self, counts: FloatArray) -> FloatArray:
        """m^(0..c): m^(0) = 0 and m^(r) from round r's counts (the server's recursion)."""
        means = np.zeros((self.rounds + 1, self.d))
        for r in range(self.rounds):
            means[r + 1] = self.next_means(counts, r, means[r])
        return means

    def round_transitions(self, published: FloatArray) -> FloatArray:
        """P_r[z | x] per round and key: (c, d, 3, 3), fake value = the published mean."""
        return np.stack(
            [lpp_transition(float(self.p1[r]), self.p2, published[r]) for r in range(self.rounds)]
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

    # --------------------------------------------------------------- estimation
    def _round1_states(self, counts: FloatArray) -> FloatArray:
        m = counts[0].sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            pi = np.where(m > 0, counts[0] / m, np.nan)
        return np.asarray(pi @ np.linalg.inv(lpp_transition(float(self.p1[0]), self.p2)).T, dtype=np.float64)

    def _paper_mean(self, counts: FloatArray) -> FloatArray:
        means = self.published_means(counts)
        final: FloatArray = means[self.rounds]
        if not self.virtual:
            return final
        return virtual_iterations(self._frequency(counts), final, float(self.p1[0]), self.virtual)

    def _virtual_mean(self, counts: FloatArray) -> FloatArray:
        """Virtual iterations on round 1 alone (whatever later rounds collected)."""
        first = calibrated_mean(counts[0].astype(np.float64), self.p2, np.zeros(self.d))
        iterations = self.virtual or DEFAULT_VIRTUAL
        return virtual_iterations(self._frequency(counts), first, float(self.p1[0]), iterations)

    def _frequency(self, counts: FloatArray) -> FloatArray:
        theta = self._round1_states(counts)
        return theta[:, NEG] + theta[:, POS]

    def _unbiased_mean(self, counts: FloatArray, published: FloatArray) -> FloatArray:
        """Inverse-variance combination of the per-round unbiased estimates of f*m, divided by f.
        ``published`` are the means announced before each round (fixed, public)."""
        f = self._frequency(counts)
        est = np.zeros(self.d)
        weight = np.zeros(self.d)
        for r in range(self.rounds):
            m = counts[r].sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                diff = (counts[r, :, POS] - counts[r, :, NEG]) / m
                keyed = (counts[r, :, POS] + counts[r, :, NEG]) / m
                p1 = float(self.p1[r])
                scale = (2 * self.p2 - 1) * p1
                d_r = (diff / (2 * self.p2 - 1) - (1 - p1) * (1 - f) * published[r]) / p1
                var_r = np.maximum(keyed - diff**2, 1e-12) / (m * scale**2)
            ok = (m > 0) & np.isfinite(d_r)
            w_r = np.where(ok, 1.0 / var_r, 0.0)
            est += np.where(ok, w_r * d_r, 0.0)
            weight += w_r
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = est / weight / f
        return np.where((weight > 0) & (f > 0), np.clip(mean, -1.0, 1.0), np.nan)

    def _paper_mean_variance(
        self,
        counts: FloatArray,
        theta: FloatArray,
        cov: FloatArray,
        flat: FloatArray,
        unflat: Callable[[FloatArray], FloatArray],
    ) -> FloatArray:
        """Delta-method variance of the reconstructed PrivKVM mean.

        With virtual iterations everything comes from round 1. Otherwise m^(r) is the
        calibration of round r alone, whose expectation moves with the mean published
        before it: E[m^(r) | m^(r-1)] ~ w_r m + (1 - w_r) m^(r-1), w_r = f p1/(f p1 + (1-f)(1-p1)).
        So V_r = Var(m^(r) | m^(r-1)) + (1 - w_r)^2 V_(r-1), from V_1 with m^(0) = 0 fixed.
        """
        if self.virtual:
            return delta_variance(lambda x: self._paper_mean(unflat(x)), flat, cov)
        f = np.clip(theta[:, NEG] + theta[:, POS], 0.0, 1.0)
        total = np.zeros(self.d)
        for r in range(self.rounds):
            block = slice(3 * r, 3 * r + 3)

            def calibrated(x: FloatArray) -> FloatArray:
                return calibrated_mean(x, self.p2, np.zeros(x.shape[0]))

            cond = delta_variance(calibrated, flat[:, block], cov[:, block, block])
            p1 = float(self.p1[r])
            with np.errstate(divide="ignore", invalid="ignore"):
                w = f * p1 / (f * p1 + (1 - f) * (1 - p1))
            total = cond + (1 - w) ** 2 * total
        return total

    def _covariance(self, counts: FloatArray, theta: FloatArray) -> FloatArray:
        """Block-diagonal covariance of all rounds' counts per key: (d, 3c, 3c). Each round
        has its own participants (one report each), so its own user count."""
        published = self.published_means(counts)
        trans = self.round_transitions(published)
        cov = np.zeros((self.d, 3 * self.rounds, 3 * self.rounds))
        for r in range(self.rounds):
            participants = int(counts[r].sum())
            if participants:
                block = sampled_count_covariance(trans[r], theta, counts[r].sum(axis=1), participants)
                cov[:, 3 * r : 3 * r + 3, 3 * r : 3 * r + 3] = block
        return cov

    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        counts = stats.arrays["counts"].astype(np.float64)
        theta1 = self._round1_states(counts)
        projected = project_simplex(theta1)
        plugin = np.where(np.isfinite(projected), projected, 1.0 / 3.0)
        diag: dict[str, Any] = {"reconstruction": RECONSTRUCTED}
        if estimator == "em":
            return self._em(stats, counts, options, diag)
        if options:
            raise TypeError(f"estimator {estimator} takes no options, got {sorted(options)}")
        flat = counts.transpose(1, 0, 2).reshape(self.d, -1)

        def unflat(x: FloatArray) -> FloatArray:
            return np.asarray(x.reshape(self.d, self.rounds, 3).transpose(1, 0, 2), dtype=np.float64)

        freq = theta1[:, NEG] + theta1[:, POS]
        if estimator == "normsub":
            freq = projected[:, NEG] + projected[:, POS]
        cov = self._covariance(counts, plugin)
        var_f = delta_variance(lambda x: self._frequency(unflat(x)), flat, cov)
        if estimator == "paper":
            mean = self._paper_mean(counts)
            var_m = self._paper_mean_variance(counts, plugin, cov, flat, unflat)
        elif estimator == "virtual":
            mean = self._virtual_mean(counts)
            var_m = delta_variance(lambda x: self._virtual_mean(unflat(x)), flat, cov)
        else:
            # the published means were fixed before each round: hold them fixed (conditionally
            # on them every round's estimate is unbiased, so they add no variance)
            published = self.published_means(counts)
            mean = self._unbiased_mean(counts, published)
            var_m = delta_variance(lambda x: self._unbiased_mean(unflat(x), published), flat, cov)
        none = counts[0].sum(axis=1) <= 0
        diag["undefined_means"] = int(np.sum(np.isnan(mean)))
        return Estimate(
            mechanism=self.name,
            estimator=estimator,
            frequency=np.where(none, np.nan, freq),
            frequency_stderr=np.where(none, np.nan, stderr(var_f)),
            mean=mean,
            mean_stderr=np.where(np.isnan(mean), np.nan, stderr(var_m)),
            n_reports=stats.n_reports,
            diagnostics=diag,
        )

    def _em(
        self, stats: Stats, counts: FloatArray, options: dict[str, Any], diag: dict[str, Any]
    ) -> Estimate:
        opts = parse_em_options(options, (self.d, 3))
        trans = self.round_transitions(self.published_means(counts))  # (c, d, 3, 3)
        stacked_p = trans.transpose(1, 0, 2, 3).reshape(self.d, 3 * self.rounds, 3)
        stacked_c = counts.transpose(1, 0, 2).reshape(self.d, 3 * self.rounds)
        res = em_counts(stacked_p, stacked_c, theta0=opts.theta0, tol=opts.tol, max_iter=opts.max_iter)
        theta = np.where(res.empty[:, None], np.nan, res.theta)
        # asymptotic (Fisher) covariance in the free coordinates (theta_0, theta_2)
        safe = np.where(np.isfinite(theta), theta, 1.0 / 3.0)
        b = stacked_p[:, :, [NEG, POS]] - stacked_p[:, :, [ABSENT]]
        pi = np.maximum(np.einsum("gjk,gk->gj", stacked_p, safe), 1e-300)
        reports = np.repeat(counts.sum(axis=2).T, 3, axis=1)  # M_r for each stacked output
        fisher = np.einsum("gjk,gj,gjl->gkl", b, reports / pi, b)
        cov_free = np.linalg.pinv(fisher)
        grad_f = F_ROW[[NEG, POS]]
        grad_m = mean_gradient(safe)[:, [NEG, POS]]
        var_f = np.einsum("k,gkl,l->g", grad_f, cov_free, grad_f)
        var_m = np.einsum("gk,gkl,gl->g", grad_m, cov_free, grad_m)
        mean = mean_from_states(theta)
        diag.update(
            em_iterations=int(res.iterations.max(initial=0)),
            em_unconverged_keys=int(np.sum(~res.converged & ~res.empty)),
            em_warm_start=opts.theta0 is not None,
            undefined_means=int(np.sum(np.isnan(mean))),
        )
        return Estimate(
            mechanism=self.name,
            estimator="em",
            frequency=theta[:, NEG] + theta[:, POS],
            frequency_stderr=np.where(res.empty, np.nan, stderr(var_f)),
            mean=mean,
            mean_stderr=np.where(np.isnan(mean), np.nan, stderr(var_m)),
            n_reports=stats.n_reports,
            latent=theta,
            diagnostics=diag,
        )

    # --------------------------------------------------------------- privacy
    def claimed_epsilon(self) -> float:
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
