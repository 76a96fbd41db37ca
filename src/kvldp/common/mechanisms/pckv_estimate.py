"""PCKV's estimators and their standard errors, shared by PCKV-UE and PCKV-GRR.

Both protocols produce the same statistics with the same per-key law (see
:mod:`~kvldp.common.mechanisms.pckv`), so one model serves both: the transition P[z | x]
of ``em``, the count matrix A of Algorithm 4 and the exact covariance of (n1[j], n2[j]).
:class:`PCKVEstimation` holds that model and the estimators that invert it;
:class:`~kvldp.common.mechanisms.pckv.PCKV` derives from it and supplies (a, b, p, ell).
Reference: docs/mechanisms.md, *PCKV estimators* and *PCKV variances*.

Intervals and standard errors (docs/mechanisms.md, *PCKV intervals*): every estimator
builds its 95% intervals on one inference basis (:meth:`PCKVEstimation.inference_basis`),
the raw frequency f^ = ell((n1+n2)/n - b)/(a-b) with its analytic standard error
(interval clipped into [0, 1]) and, for the mean, Fieller's interval for N/D with
N = (n1 - n2)/(a(2p-1)), D = (n1 + n2 - nb)/(a-b) = N_j. A key whose D is not
significantly above 0 (its holders indistinguishable from none) has no estimable mean:
NaN, counted in ``not_estimable_means``. The frequency's standard error is the analytic
one for the raw f^ and the RMSE of a clipped normal (:mod:`~kvldp.common.estimation.clipped_normal`)
for the corrected, EM and projected ones; the mean's is the Fieller interval's
half-width over Z95.

Estimators (``estimator_names``):

* ``unbiased``: the raw f^ (exactly unbiased, may leave [0, 1]); the mean by Algorithm 4
  (f corrected into [1/n, 1] internally, n1^, n2^ = A^-1(...) clipped into
  [count_floor, N_j], lower bound first) where estimable.
* ``paper``: Algorithm 4 as published, the authors' code line for line: f corrected into
  [1/n, 1] and the mean of every key. Where the mean is not estimable the printed value
  is the clipping's artefact (0 with count_floor = 1): it has no standard error and no
  interval, and ``means_without_information`` counts it.
* ``em``: per-key composite EM on (n1, n2, n - n1 - n2) with the 3x3 P of :meth:`transition`;
  f = ell(theta+ + theta-), m = (theta+ - theta-)/(theta+ + theta-) where estimable;
  warm-startable.
* ``normsub``: the per-item sampled shares (n1^/n, n2^/n of every real key plus the
  remaining mass as one "rest" item) projected onto the simplex; the mean where
  estimable (N/D clipped into [-1, 1] where the projection left the key no share).
* ``eb``: empirical Bayes on top of the EM fit (:mod:`~kvldp.common.estimation.shrinkage`): the
  unbiased frequencies and the EM means (of keys with at least one estimated holder),
  each with its analytic variance, are shrunk toward a normal prior fitted across the
  keys, so a key with little information gets (close to) the population's centre with
  the prior's spread as its standard error, and every key has a mean.

Why EM lost to Algorithm 4 on means. The per-key likelihood is correctly specified: a
user's symbol at key j depends only on whether it sampled j and with which v*, and the
padding, the dummies and the uniform sampling among the padded set only set how many
users are in each of the three states, which is what theta estimates (at ell = 1 the
coupling "one sampled slot per user" only adds sum_j theta_j <= 1, inactive when keys are
many). Where its maximiser is interior it equals the linear inversion, so EM and
Algorithm 4 agree on every key with enough holders. They part on keys whose linear
holder estimate is below one user (rare keys, small epsilon) but whose +1 count alone
exceeds the background (n1^ > 0 > n2^): the maximiser sits on the face theta- = 0 with
thousands of fitted holders, and the plug-in mean (theta+ - theta-)/(theta+ + theta-) is
exactly +1 whatever the data say about the sign split, a boundary artefact of a ratio, not
information. Algorithm 4 prints 0 there. With means spread over [-1, 1] the +-1 answer
costs 1 + m^2 in squared error against m^2 for 0, which is the whole 5-23% loss
measured at epsilon = 1 on the same reports (``tests/test_pckv_estimate.py``). Such keys
are never estimable, so EM gives them no mean.

Batches: :meth:`PCKVEstimation.estimate_many` runs estimators on many snapshots at
once (the draws behind a predicted error), with no loop over them: the arithmetic is
per key, EM's keys are independent groups of one solver call, and the projections and
priors are per snapshot; estimators asked for together share EM's fit, Algorithm 4 and
the basis. :meth:`~PCKVEstimation.estimate` is the same code on one snapshot and one
estimator, plus standard errors and diagnostics.

Standard errors are analytic: the exact covariance of (n1[j], n2[j]) given a two-type
population (n f holders sampling j with weight 1/ell and sharing the value m, as in
PCKV's Theorem 4; n(1-f) non-holders), evaluated at the estimate, pushed through the
estimator (linear for f, delta method for the mean ratio: :meth:`variances`, which
``eb``'s weights and the advisor use). It yields

    Var[f^] = ell^2 b(1-b)/(n(a-b)^2) + ell f (1 - 2b - (a-b)/ell)/(n(a-b))
            = Theorem 4 as transcribed + (ell - 1) f / n.

The transcription drops the (ell - 1) f / n term, which is zero at ell = 1 only; the
Monte-Carlo test at ell = 3 (``tests/test_pckv_estimate.py``) rejects the transcribed value and
accepts this one. For the mean the same term cancels: the delta method on this
covariance equals Theorem 4's Var[m^] expression for every ell. It is a first-order
value; Algorithm 4's clipping makes the true variance smaller when |m| is near 1.

Assumption (stated in every estimate's diagnostics): each user holds at most ell keys.
A user holding more is sampled with weight 1/|S| < 1/ell per key, so its keys are
under-counted by the factor ell/|S| (the expected statistics model this exactly; the
estimators cannot undo it). No error is raised: the data model allows such users.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.stats import Stats
from kvldp.common.estimation.clipped_normal import clipped_rmse
from kvldp.common.estimation.em import EMOptions, em_counts, parse_em_options
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.estimation.intervals import clipped_interval, fieller_interval, interval_stderr
from kvldp.common.estimation.shrinkage import Shrunk, prior_diagnostics, shrink, shrink_means
from kvldp.common.estimation.simplex import project_simplex
from kvldp.common.estimation.variance import ratio_variance, stderr
from kvldp.common.mechanisms.base import Mechanism, UnknownEstimator
from kvldp.common.primitives import FloatArray

ASSUMES = "every user holds at most ell keys"


@dataclass(frozen=True)
class InferenceBasis:
    """The unbiased linear statistics of one snapshot and the 95% intervals built on them.

    ``raw`` is the baseline frequency with its analytic standard error and
    [``frequency_low``, ``frequency_high``] its interval clipped into [0, 1]; the mean's
    Fieller interval is [``mean_low``, ``mean_high``] where ``estimable`` (the key's
    holders significantly more than none), NaN elsewhere; ``ratio`` is N/D clipped into
    [-1, 1].
    """

    raw: FloatArray
    raw_stderr: FloatArray
    frequency_low: FloatArray
    frequency_high: FloatArray
    mean_low: FloatArray
    mean_high: FloatArray
    estimable: NDArray[np.bool_]
    ratio: FloatArray

    def diagnostics(self, mean: FloatArray) -> dict[str, int]:
        """Counts of the keys without a mean: ``undefined_means`` (NaN), of which
        ``not_estimable_means`` for want of significant holders, and the
        ``means_without_information`` an estimator answers all the same (``paper``'s
        artefact, ``eb``'s prior centre)."""
        undefined = np.isnan(mean)
        return {
            "undefined_means": int(np.sum(undefined)),
            "not_estimable_means": int(np.sum(undefined & ~self.estimable)),
            "means_without_information": int(np.sum(~undefined & ~self.estimable)),
        }


@dataclass(frozen=True)
class _Point:
    """An estimator's answers on one snapshot (d,) or a batch of snapshots (..., d): the
    basis of their intervals (None without reports), EM's latent shares (``em``, ``eb``)
    and the fitted priors of frequencies and means (``eb``)."""

    frequency: FloatArray
    mean: FloatArray
    basis: InferenceBasis | None
    latent: FloatArray | None
    priors: tuple[Shrunk, Shrunk] | None


class PCKVEstimation(Mechanism):
    """PCKV's statistical model and estimators, given the probabilities (a, b, p) and ell.

    The configuration (``ell``, ``count_floor``, ``a``, ``b``, ``p``) is set by the
    subclass's ``_setup``.
    """

    estimator_names: ClassVar[tuple[str, ...]] = ("unbiased", "paper", "em", "normsub", "eb")
    #: the estimators whose mean is NaN where it is not estimable (``paper`` prints its
    #: artefact, ``eb`` the prior's centre)
    not_estimable_nan: ClassVar[frozenset[str]] = frozenset({"unbiased", "em", "normsub"})

    ell: int
    count_floor: float
    a: float
    b: float
    p: float

    # --------------------------------------------------------------- model
    def transition(self) -> FloatArray:
        """Per-key P[z | x]: z in (+1, -1, 0) rows; x in (sampled with v* = +1,
        sampled with v* = -1, did not sample the key) columns. Columns sum to one."""
        a, b, p = self.a, self.b, self.p
        return np.array(
            [[a * p, a * (1 - p), b / 2], [a * (1 - p), a * p, b / 2], [1 - a, 1 - a, 1 - b]],
            dtype=np.float64,
        )

    def count_matrix(self) -> FloatArray:
        """A of Algorithm 4: E[(n1, n2) - n b/2] = A (N+, N-), N+- = users who sampled (j, +-1)."""
        a, b, p = self.a, self.b, self.p
        return np.array([[a * p - b / 2, a * (1 - p) - b / 2], [a * (1 - p) - b / 2, a * p - b / 2]])

    def linear_counts(self, n: float, n1: FloatArray, n2: FloatArray) -> tuple[FloatArray, FloatArray]:
        """A^-1 [n1 - nb/2; n2 - nb/2] in closed form (det A = a(2p-1)(a-b)), unclipped."""
        a, b, p = self.a, self.b, self.p
        x1, x2 = n1 - n * b / 2, n2 - n * b / 2
        diag, off = a * p - b / 2, a * (1 - p) - b / 2
        det = a * (2 * p - 1) * (a - b)
        return (diag * x1 - off * x2) / det, (diag * x2 - off * x1) / det

    def holder_probabilities(self, m: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(q+, q-) per key: a holder's chance of the symbol +1 and -1 at its key j.

        q+ = w a/2 (1 + (2p-1) m) + (1 - w) b/2 and q- with m -> -m, w = 1/ell its chance of
        sampling j (the holders share the value m, as in Theorem 4); a non-holder's is b/2
        for each.
        """
        w = 1.0 / self.ell
        half_b = self.b / 2.0
        t = (2 * self.p - 1) * m
        qp = w * self.a / 2 * (1 + t) + (1 - w) * half_b
        qm = w * self.a / 2 * (1 - t) + (1 - w) * half_b
        return np.asarray(qp, dtype=np.float64), np.asarray(qm, dtype=np.float64)

    def count_covariance(self, n: float, f: FloatArray, m: FloatArray) -> FloatArray:
        """Exact Cov of (n1[j], n2[j]) given the population: (..., d, 2, 2) for f, m (..., d).

        Users are independent; the n f holders of key j have the symbol probabilities of
        :meth:`holder_probabilities`, the others b/2 each. Each user adds diag(q) - q q^T.
        """
        half_b = self.b / 2.0
        qp, qm = self.holder_probabilities(m)

        def single(x: FloatArray | float, y: FloatArray | float) -> FloatArray:
            x_, y_ = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
            return np.stack(
                [np.stack([x_ * (1 - x_), -x_ * y_], -1), np.stack([-x_ * y_, y_ * (1 - y_)], -1)], -2
            )

        holders = (n * f)[..., None, None]
        return np.asarray((n - holders) * single(half_b, half_b) + holders * single(qp, qm), dtype=np.float64)

    # --------------------------------------------------------------- estimation
    def estimate_many(
        self, n: float, arrays: Mapping[str, FloatArray], estimators: Sequence[str]
    ) -> dict[str, tuple[FloatArray, FloatArray]]:
        """Frequencies and means (R, d) of each of ``estimators`` on R snapshots of n reports
        each, their ``n1`` and ``n2`` stacked along a leading axis in ``arrays`` (R, d):
        what :meth:`estimate` answers on each (it is this with one snapshot, plus standard
        errors and diagnostics), in one pass over all of them (every estimator is
        elementwise or per snapshot, EM's keys independent). What estimators share is
        computed once: EM's fit serves ``em`` and ``eb``."""
        for estimator in estimators:
            if estimator not in self.estimator_names:
                raise UnknownEstimator(
                    f"{self.name} has no estimator {estimator!r} (available: {', '.join(self.estimator_names)})"
                )
        n1, n2 = (np.asarray(arrays[k], dtype=np.float64) for k in ("n1", "n2"))
        points = self._points(n, n1, n2, estimators, parse_em_options({}, (self.d, 3)), {})
        return {e: (point.frequency, point.mean) for e, point in points.items()}

    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        n = float(stats.arrays["n"][0])
        n1 = stats.arrays["n1"].astype(np.float64)
        n2 = stats.arrays["n2"].astype(np.float64)
        diag: dict[str, Any] = {"assumes": ASSUMES}
        if estimator not in ("em", "eb") and options:
            raise TypeError(f"estimator {estimator} takes no options, got {sorted(options)}")
        point = self._points(n, n1, n2, (estimator,), parse_em_options(options, (self.d, 3)), diag)[estimator]
        if point.basis is None:
            nan = np.full(self.d, np.nan)
            diag.update(undefined_means=self.d, not_estimable_means=0, no_reports=True)
            return Estimate(self.name, estimator, nan, nan, nan, nan, stats.n_reports, point.latent, diag)
        basis = point.basis
        freq, mean = point.frequency, point.mean
        if point.priors is not None:
            # no per-key standard error: see _shrunk
            diag.update(prior_diagnostics(*point.priors))
            freq_se = mean_se = np.full(self.d, np.nan)
        elif estimator == "unbiased":
            freq_se, mean_se = basis.raw_stderr, interval_stderr(basis.mean_low, basis.mean_high)
        else:
            freq_se = clipped_rmse(np.clip(basis.raw, 0.0, 1.0), basis.raw_stderr, 0.0, 1.0)
            mean_se = interval_stderr(basis.mean_low, basis.mean_high)
        diag.update(basis.diagnostics(mean))
        return Estimate(
            mechanism=self.name,
            estimator=estimator,
            frequency=freq,
            frequency_stderr=freq_se,
            mean=mean,
            mean_stderr=np.where(np.isnan(mean), np.nan, mean_se),
            n_reports=stats.n_reports,
            latent=point.latent,
            diagnostics=diag,
            frequency_bounds=(basis.frequency_low, basis.frequency_high),
            mean_bounds=(basis.mean_low, basis.mean_high),
        )

    def _points(
        self,
        n: float,
        n1: FloatArray,
        n2: FloatArray,
        estimators: Sequence[str],
        opts: EMOptions,
        diag: dict[str, Any],
    ) -> dict[str, _Point]:
        """Each of ``estimators``' frequencies and means on the counts n1, n2 of one snapshot
        (d,) or of a batch of snapshots (..., d) of n reports each, and the basis of their
        intervals; EM (for ``em`` and ``eb``), Algorithm 4 and the basis are computed once
        for all of them. ``diag`` receives the diagnostics of EM and Algorithm 4 (over
        every snapshot of a batch)."""
        em_freq = em_mean = latent = None
        if "em" in estimators or "eb" in estimators:
            em_freq, em_mean, latent = self._em(n, n1, n2, opts, diag)
        fitted = {e: latent if e in ("em", "eb") else None for e in estimators}
        if n <= 0:
            nan = np.full(np.shape(n1), np.nan)
            return {e: _Point(nan, nan.copy(), None, fitted[e], None) for e in estimators}
        paper_freq, paper_mean = self.algorithm4(n, n1, n2, diag)
        basis = self.inference_basis(n, n1, n2, paper_mean)
        points: dict[str, _Point] = {}
        for estimator in estimators:
            priors = None
            if estimator == "eb":
                assert em_freq is not None and em_mean is not None
                # the EM means of every key with at least one estimated holder: shrinkage weighs
                # the weak ones itself (a mean below one holder is EM's boundary artefact)
                unheld = basis.raw < 1.0 / n
                priors = self._shrunk(n, basis, em_freq, np.where(unheld, np.nan, em_mean))
                freq, mean = priors[0].value, priors[1].value
            elif estimator == "unbiased":
                freq, mean = basis.raw, self._answered(paper_mean, basis)
            elif estimator == "paper":
                freq, mean = paper_freq, paper_mean
            elif estimator == "em":
                assert em_freq is not None and em_mean is not None
                freq, mean = em_freq, self._answered(em_mean, basis)
            else:
                freq, mean = self._normsub(n, n1, n2)
                mean = self._answered(mean, basis)
            points[estimator] = _Point(freq, mean, basis, fitted[estimator], priors)
        return points

    def inference_basis(self, n: float, n1: FloatArray, n2: FloatArray, mean: FloatArray) -> InferenceBasis:
        """The unbiased linear statistics every estimator's intervals are built on.

        The raw frequency with its analytic standard error, and the mean as the ratio of
        N = (n1 - n2)/(a(2p - 1)) over D = (n1 + n2 - n b)/(a - b) (E[N] = m N_j,
        E[D] = N_j = n f/ell), whose covariance is the exact count covariance at the raw
        frequency clipped into [0, 1] and ``mean`` (Algorithm 4's, which lies in [-1, 1]).
        """
        a, b, p = self.a, self.b, self.p
        raw = self.baseline_frequency(n, n1, n2)
        f = np.clip(raw, 0.0, 1.0)
        cov = self.count_covariance(n, f, np.clip(mean, -1.0, 1.0))
        v11, v22, v12 = cov[..., 0, 0], cov[..., 1, 1], cov[..., 0, 1]
        var_sum, var_diff, cov_sd = v11 + v22 + 2 * v12, v11 + v22 - 2 * v12, v11 - v22
        gain = a * (2 * p - 1)
        raw_se = stderr((self.ell / (n * (a - b))) ** 2 * var_sum)
        f_lo, f_hi = clipped_interval(raw, raw_se)
        num, den = (n1 - n2) / gain, (n1 + n2 - n * b) / (a - b)
        m_lo, m_hi, bounded = fieller_interval(
            num, den, var_diff / gain**2, var_sum / (a - b) ** 2, cov_sd / (gain * (a - b))
        )
        # significantly fewer than no holders contradicts the model: no mean either
        estimable = bounded & (den > 0)
        m_lo, m_hi = np.where(estimable, m_lo, np.nan), np.where(estimable, m_hi, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.clip(num / den, -1.0, 1.0)
        return InferenceBasis(raw, raw_se, f_lo, f_hi, m_lo, m_hi, estimable, ratio)

    def first_order_mean(self, stats: Stats) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(mean, D / sd(D), sd(mean)) per key of the linear estimate at ``stats``.

        The mean is the ratio N/D of the basis, whether or not it is estimable; D = N_j,
        whose significance decides estimability (:meth:`inference_basis`); sd(mean) is the
        delta method's of :meth:`variances`, unclipped (the interval-implied standard error
        is smaller where [-1, 1] binds, which a clipped-normal prediction counts already).
        """
        n = float(stats.arrays["n"][0])
        n1 = stats.arrays["n1"].astype(np.float64)
        n2 = stats.arrays["n2"].astype(np.float64)
        basis = self.inference_basis(n, n1, n2, np.zeros(self.d))
        mean = np.nan_to_num(basis.ratio, nan=0.0)
        var_f, var_m = self.variances(n, basis.raw, mean)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = basis.raw / stderr(var_f)
        return mean, z, stderr(var_m)

    def _answered(self, mean: FloatArray, basis: InferenceBasis) -> FloatArray:
        """An estimator's mean where the key's mean is estimable (NaN elsewhere); where the
        estimator itself has none (a share projected to 0), the basis ratio N/D in [-1, 1]."""
        return np.where(basis.estimable, np.where(np.isnan(mean), basis.ratio, mean), np.nan)

    def baseline_frequency(self, n: float, n1: FloatArray, n2: FloatArray) -> FloatArray:
        """f^ = ell((n1 + n2)/n - b)/(a - b): exactly unbiased when every user holds <= ell keys."""
        return np.asarray(self.ell * ((n1 + n2) / n - self.b) / (self.a - self.b), dtype=np.float64)

    def algorithm4(
        self, n: float, n1: FloatArray, n2: FloatArray, diag: dict[str, Any] | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """PCKV Algorithm 4 as published: (frequency corrected into [1/n, 1], mean).

        n1^, n2^ = A^-1(...) are clipped into [count_floor, N_j] with N_j = n f_j / ell,
        lower bound first so that the upper bound wins when N_j < count_floor; then
        m = (n1^ - n2^)/N_j, which lies in [-1, 1]. Every key gets a mean: where the
        correction raised f to 1/n it is the clipping's artefact (exactly 0 with
        count_floor = 1), as in the authors' code.
        """
        raw = self.baseline_frequency(n, n1, n2)
        f = np.clip(raw, 1.0 / n, 1.0)
        big_n = n * f / self.ell
        c1, c2 = self.linear_counts(n, n1, n2)
        k1 = np.minimum(np.maximum(c1, self.count_floor), big_n)
        k2 = np.minimum(np.maximum(c2, self.count_floor), big_n)
        if diag is not None:
            diag["frequency_corrected"] = int(np.sum(f != raw))
            diag["counts_clipped"] = int(np.sum((k1 != c1) | (k2 != c2)))
        return f, (k1 - k2) / big_n

    def _normsub(self, n: float, n1: FloatArray, n2: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Shares of (j, +1), (j, -1) for every real key plus the rest, projected onto the
        simplex (per snapshot of a batch)."""
        c1, c2 = self.linear_counts(n, n1, n2)
        shares = np.stack([c1, c2], axis=-1).reshape(-1, 2 * self.d) / n
        items = np.concatenate([shares, 1.0 - shares.sum(axis=1, keepdims=True)], axis=1)
        proj = project_simplex(items)[:, :-1].reshape(*np.shape(n1), 2)
        return self._from_shares(proj[..., 0], proj[..., 1])

    def _from_shares(self, up: FloatArray, down: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(f, m) from the shares of users who sampled (j, +1) and (j, -1); m is NaN at share 0."""
        total = up + down
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(total > 0, (up - down) / total, np.nan)
        return self.ell * total, mean

    def _em(
        self, n: float, n1: FloatArray, n2: FloatArray, opts: EMOptions, diag: dict[str, Any]
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """EM's (frequency, mean, theta) per key, of one snapshot or of every snapshot of a
        batch in one :func:`~kvldp.common.estimation.em.em_counts` call (its keys are independent
        groups); ``opts.theta0`` is per key of the flattened batch."""
        counts = np.stack([n1, n2, n - n1 - n2], axis=-1)
        res = em_counts(
            self.transition(), counts.reshape(-1, 3), theta0=opts.theta0, tol=opts.tol, max_iter=opts.max_iter
        )
        theta = np.where(res.empty[:, None], np.nan, res.theta).reshape(counts.shape)
        diag["em_iterations"] = int(res.iterations.max(initial=0))
        diag["em_unconverged_keys"] = int(np.sum(~res.converged & ~res.empty))
        diag["em_warm_start"] = opts.theta0 is not None
        freq, mean = self._from_shares(theta[..., 0], theta[..., 1])
        return freq, mean, theta

    def _shrunk(
        self, n: float, basis: InferenceBasis, freq_em: FloatArray, mean: FloatArray
    ) -> tuple[Shrunk, Shrunk]:
        """``eb``: the unbiased frequencies and the EM means shrunk toward fitted priors, per
        snapshot of a batch.

        The normal-normal model wants each key's sampling variance without its own noise in
        it, so the frequencies' variances are evaluated at the raw estimate clipped into
        [0, 1]; the means are shrunk by :func:`~kvldp.common.estimation.shrinkage.shrink_means`
        (stable weights, a prior centred on a line in the shrunk frequency where the keys
        identify one: where means move with frequency, as in Horigome et al.'s populations,
        one centre fitted on the precise, frequent keys drags every rare key toward them).
        No per-key standard error: a shrunk estimate's error depends on how far the key's
        truth lies from the prior, which its data cannot tell from noise (the conservative
        variance of :func:`~kvldp.common.estimation.shrinkage.shrink` was 2-4x the RMSE); the
        intervals are the basis's (docs/mechanisms.md, *Calibration of standard errors*).
        """
        var_raw, _ = self.variances(n, basis.raw, np.zeros_like(basis.raw))
        f = shrink(basis.raw, var_raw, 0.0, 1.0)
        m = shrink_means(mean, freq_em, f, 1.0 / n, lambda fr, mu: self.variances(n, fr, mu))
        return f, m

    def variances(self, n: float, freq: FloatArray, mean: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Analytic (Var f^, Var m^) per key for n users at frequency ``freq`` and mean ``mean``.

        Estimators evaluate it at their own estimate (f clipped into [0, 1], m into [-1, 1],
        NaN as 0). f^ is linear in n1 + n2; the mean is the ratio (n1 - n2)/(a(2p-1)) over
        (n1 + n2 - n b)/(a - b) = N_j, linearised at (m N_j, N_j) with N_j = n f/ell, f taken
        at least 1/n as in Algorithm 4. For ``em`` (square P, so the MLE is the linear
        solution when interior) and ``normsub`` the same first-order map applies.
        """
        if n <= 0:
            nan = np.full(np.shape(freq), np.nan)
            return nan, nan.copy()
        a, b, p, ell = self.a, self.b, self.p, self.ell
        f = np.clip(np.nan_to_num(freq, nan=0.0), 0.0, 1.0)
        m = np.clip(np.nan_to_num(mean, nan=0.0), -1.0, 1.0)
        cov = self.count_covariance(n, f, m)
        v11, v22, v12 = cov[..., 0, 0], cov[..., 1, 1], cov[..., 0, 1]
        var_sum, var_diff, cov_sd = v11 + v22 + 2 * v12, v11 + v22 - 2 * v12, v11 - v22
        var_f = (ell / (n * (a - b))) ** 2 * var_sum
        big_n = n * np.maximum(f, 1.0 / n) / ell
        gain = a * (2 * p - 1)
        var_m = ratio_variance(
            m * big_n, big_n, var_diff / gain**2, var_sum / (a - b) ** 2, cov_sd / (gain * (a - b))
        )
        return var_f, var_m
