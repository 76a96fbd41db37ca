"""PrivKVM's estimators, from the statistics counts[r, j, s] of all rounds (docs/mechanisms.md,
*PrivKVM estimators*).

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

The published means every estimator needs are those of the round protocol,
:class:`~kvldp.common.mechanisms.privkvm_rounds.PrivKVMRounds`, which
:class:`PrivKVMEstimators` extends; :class:`~kvldp.common.mechanisms.privkvm.PrivKVM`
extends it in turn with the client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kvldp.common.em import em_counts, parse_em_options
from kvldp.common.estimate import Estimate
from kvldp.common.mechanisms.keysampled import (
    ABSENT,
    F_ROW,
    NEG,
    POS,
    mean_from_states,
    mean_gradient,
    sampled_count_covariance,
)
from kvldp.common.mechanisms.privkv import lpp_transition
from kvldp.common.mechanisms.privkvm_rounds import PrivKVMRounds, calibrated_mean
from kvldp.common.primitives import FloatArray
from kvldp.common.simplex import project_simplex
from kvldp.common.stats import Stats
from kvldp.common.variance import delta_variance, stderr

RECONSTRUCTED = (
    "PrivKVM is reconstructed (docs/mechanisms.md, *PrivKVM*): the original paper's algorithm "
    "text was not available"
)
#: virtual iterations of the ``virtual`` estimator when the parameter is 0 (PCKV's "1r5v")
DEFAULT_VIRTUAL = 5


def virtual_iterations(f: FloatArray, first: FloatArray, p1: float, iterations: int) -> FloatArray:
    """m^(1 + iterations) of the virtual iterations (docs/mechanisms.md, *Virtual iterations*), in
    closed form.

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


class PrivKVMEstimators(PrivKVMRounds):
    """The estimators of a PrivKVM configuration (see the module docstring); ``virtual``
    comes from the parameters (``PrivKVM._setup``)."""

    virtual: int

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
