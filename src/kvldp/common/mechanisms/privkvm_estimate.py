"""PrivKVM's estimators, from the statistics counts[r, j, s] of all rounds (docs/mechanisms.md,
*PrivKVM estimators*).

* ``paper`` — the reconstructed PrivKVM: f from round 1, mean m^(c) by the PrivKV
  calibration of the last round; with ``virtual`` > 0 (one real round only) the virtual
  iterations m^(t+1) = m^(1) + (1 - w)(m^(t) - m^(0)) in closed form (PCKV's "1r5v").
* ``unbiased`` — f from round 1 (unbiased) and, for the mean, the ratio N/f of the
  inference basis (:mod:`~kvldp.common.mechanisms.privkvm_inference`), clipped into [-1, 1].
* ``em`` — the MLE pooling all rounds: per key a 3-state model whose round-r likelihood
  has the published mean as the non-holders' fake value (warm-startable).
* ``normsub`` — round-1 states projected onto the simplex for f; the unbiased mean.
* ``virtual`` — virtual iterations on round-1 data alone (``virtual`` of them, 5 when
  the parameter is 0): PCKV's "1r5v" reading of whatever round 1 collected.

Every estimator exports the 95% intervals of the inference basis (the raw frequency's,
clipped into [0, 1], and the mean's Fieller interval) and a standard error of its own
point estimate: the analytic one for the unbiased frequency; the interval's half-width
over Z95 for a point that only clipping moves off the basis (``unbiased``'s mean,
``em``); the RMSE of a parametric bootstrap
(:mod:`~kvldp.common.mechanisms.privkvm_bootstrap`) for the points that iterate, project
or are biased by design (``paper``'s and ``virtual``'s means, ``normsub``'s frequency).
A mean whose Fieller set is unbounded is not estimable: NaN in every estimator, counted
in ``diagnostics["not_estimable_means"]``.

Rounds may have different participants (a device that joins late reports only in the
rounds that remain): each round's estimate uses that round's own report count, which
is right when every round's participants are a sample of the same population taken
independently of their data. f comes from round 1 alone.

The published means every estimator needs are those of the round protocol,
:class:`~kvldp.common.mechanisms.privkvm_rounds.PrivKVMRounds`; its inference basis is
:class:`~kvldp.common.mechanisms.privkvm_inference.PrivKVMInference`, which
:class:`PrivKVMEstimators` extends; :class:`~kvldp.common.mechanisms.privkvm.PrivKVM`
extends it in turn with the client.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvldp.common.data.stats import Stats
from kvldp.common.estimation.em import em_counts, parse_em_options
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.estimation.simplex import project_simplex
from kvldp.common.mechanisms.keysampled import NEG, POS, mean_from_states
from kvldp.common.mechanisms.privkvm_bootstrap import bootstrap_rmse, replay_rounds
from kvldp.common.mechanisms.privkvm_inference import Basis, PrivKVMInference
from kvldp.common.mechanisms.privkvm_rounds import calibrated_mean
from kvldp.common.primitives import FloatArray

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


class PrivKVMEstimators(PrivKVMInference):
    """The estimators of a PrivKVM configuration (see the module docstring); ``virtual``
    comes from the parameters (``PrivKVM._setup``)."""

    virtual: int

    def _paper_mean(self, counts: FloatArray) -> FloatArray:
        means = self.published_means(counts)
        final: FloatArray = means[self.rounds]
        if not self.virtual:
            return final
        return virtual_iterations(self._frequency(counts), final, float(self.p1[0]), self.virtual)

    def _virtual_mean(self, counts: FloatArray) -> FloatArray:
        """Virtual iterations on round 1 alone (whatever later rounds collected)."""
        first = calibrated_mean(counts[0].astype(np.float64), self.p2, np.zeros(counts.shape[1]))
        iterations = self.virtual or DEFAULT_VIRTUAL
        return virtual_iterations(self._frequency(counts), first, float(self.p1[0]), iterations)

    def _clipped_frequency(self, counts: FloatArray) -> FloatArray:
        return np.asarray(np.clip(self._frequency(counts), 0.0, 1.0), dtype=np.float64)

    def _normsub_frequency(self, counts: FloatArray) -> FloatArray:
        projected = project_simplex(self._round1_states(counts))
        return np.asarray(projected[:, NEG] + projected[:, POS], dtype=np.float64)

    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        counts = stats.arrays["counts"].astype(np.float64)
        if estimator != "em" and options:
            raise TypeError(f"estimator {estimator} takes no options, got {sorted(options)}")
        projected = project_simplex(self._round1_states(counts))
        plugin = np.where(np.isfinite(projected), projected, 1.0 / 3.0)
        flat = counts.transpose(1, 0, 2).reshape(self.d, -1)

        def unflat(x: FloatArray) -> FloatArray:
            return np.asarray(x.reshape(self.d, self.rounds, 3).transpose(1, 0, 2), dtype=np.float64)

        basis = self._basis(counts, flat, unflat, self._covariance(counts, plugin))
        diag: dict[str, Any] = {
            "reconstruction": RECONSTRUCTED,
            "not_estimable_means": int(np.sum(basis.not_estimable)),
        }
        if estimator == "em":
            return self._em(stats, counts, options, diag, basis)
        replayed = self._replay(basis, counts)
        freq, freq_se, mean = basis.frequency, basis.frequency_stderr, basis.mean
        point = {"paper": self._paper_mean, "virtual": self._virtual_mean}.get(estimator, self._ratio_mean)
        if estimator in ("paper", "virtual"):
            mean = np.where(np.isnan(basis.mean), np.nan, point(counts))
        mean_se = bootstrap_rmse(point, replayed, basis.mean)
        if estimator == "normsub":
            freq = self._normsub_frequency(counts)
            freq_se = bootstrap_rmse(self._normsub_frequency, replayed, np.clip(basis.frequency, 0.0, 1.0))
        return self._result(stats, estimator, basis, diag, freq, freq_se, mean, mean_se)

    def _replay(self, basis: Basis, counts: FloatArray) -> FloatArray:
        """The rounds replayed at the basis's frequencies (clipped into [0, 1]) and means."""
        f = np.clip(np.nan_to_num(basis.frequency), 0.0, 1.0)
        return replay_rounds(self, f, np.nan_to_num(basis.mean), counts)

    def _result(
        self,
        stats: Stats,
        estimator: str,
        basis: Basis,
        diag: dict[str, Any],
        freq: FloatArray,
        freq_se: FloatArray,
        mean: FloatArray,
        mean_se: FloatArray,
        latent: FloatArray | None = None,
    ) -> Estimate:
        """The estimate with the basis's intervals; undefined where round 1 has no reports."""
        none = ~np.isfinite(basis.frequency)
        diag["undefined_means"] = int(np.sum(np.isnan(mean)))
        return Estimate(
            mechanism=self.name,
            estimator=estimator,
            frequency=np.where(none, np.nan, freq),
            frequency_stderr=np.where(none, np.nan, freq_se),
            mean=mean,
            mean_stderr=np.where(np.isnan(mean), np.nan, mean_se),
            n_reports=stats.n_reports,
            latent=latent,
            diagnostics=diag,
            frequency_bounds=basis.frequency_bounds,
            mean_bounds=basis.mean_bounds,
        )

    def _em(
        self, stats: Stats, counts: FloatArray, options: dict[str, Any], diag: dict[str, Any], basis: Basis
    ) -> Estimate:
        """The pooled MLE; its errors are the basis intervals' (the MLE is the efficient
        estimate the basis approximates, kept inside the range)."""
        opts = parse_em_options(options, (self.d, 3))
        trans = self.round_transitions(self.published_means(counts))  # (c, d, 3, 3)
        stacked_p = trans.transpose(1, 0, 2, 3).reshape(self.d, 3 * self.rounds, 3)
        stacked_c = counts.transpose(1, 0, 2).reshape(self.d, 3 * self.rounds)
        res = em_counts(stacked_p, stacked_c, theta0=opts.theta0, tol=opts.tol, max_iter=opts.max_iter)
        replayed = self._replay(basis, counts)
        theta = np.where(res.empty[:, None], np.nan, res.theta)
        diag.update(
            em_iterations=int(res.iterations.max(initial=0)),
            em_unconverged_keys=int(np.sum(~res.converged & ~res.empty)),
            em_warm_start=opts.theta0 is not None,
        )
        return self._result(
            stats,
            "em",
            basis,
            diag,
            np.where(res.empty, np.nan, theta[:, NEG] + theta[:, POS]),
            bootstrap_rmse(self._clipped_frequency, replayed, np.clip(basis.frequency, 0.0, 1.0)),
            np.where(np.isnan(basis.mean), np.nan, mean_from_states(theta)),
            bootstrap_rmse(self._ratio_mean, replayed, basis.mean),
            latent=theta,
        )
