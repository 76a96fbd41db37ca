"""PCKV's estimators and their standard errors, shared by PCKV-UE and PCKV-GRR.

Both protocols produce the same statistics with the same per-key law (see
:mod:`~kvldp.common.mechanisms.pckv`), so one model serves both: the transition P[z | x]
of §9.4, the count matrix A of Algorithm 4 and the exact covariance of (n1[j], n2[j]).
:class:`PCKVEstimation` holds that model and the estimators that invert it;
:class:`~kvldp.common.mechanisms.pckv.PCKV` derives from it and supplies (a, b, p, ell).

Estimators (``estimator_names``):

* ``unbiased``: f = ell((n1+n2)/n - b)/(a-b), raw and exactly unbiased (may leave [0, 1]);
  mean by Algorithm 4 (f corrected into [1/n, 1] internally, n1^, n2^ = A^-1(...) clipped
  into [count_floor, N_j], lower bound first). Where the correction had to raise f to 1/n
  the mean carries no information (Algorithm 4 would print a clipping artefact, 0): NaN.
* ``paper``: Algorithm 4 as published; the reported frequency is the corrected one too.
* ``em``: per-key composite EM on (n1, n2, n - n1 - n2) with the 3x3 P of §9.4;
  f = ell(theta+ + theta-), m = (theta+ - theta-)/(theta+ + theta-); warm-startable.
* ``normsub``: the per-item sampled shares (n1^/n, n2^/n of every real key plus the
  remaining mass as one "rest" item) projected onto the simplex.

Standard errors are analytic: the exact covariance of (n1[j], n2[j]) given a two-type
population (n f holders sampling j with weight 1/ell and sharing the value m, as in
PCKV's Theorem 4; n(1-f) non-holders), evaluated at the estimate, pushed through the
estimator (linear for f, delta method for the mean ratio). It yields

    Var[f^] = ell^2 b(1-b)/(n(a-b)^2) + ell f (1 - 2b - (a-b)/ell)/(n(a-b))
            = Theorem 4 as transcribed (spec §9.4) + (ell - 1) f / n.

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

from typing import Any, ClassVar

import numpy as np

from kvldp.common.em import em_counts, parse_em_options
from kvldp.common.estimate import Estimate
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.primitives import FloatArray
from kvldp.common.simplex import project_simplex
from kvldp.common.stats import Stats
from kvldp.common.variance import ratio_variance, stderr

ASSUMES = "every user holds at most ell keys"


class PCKVEstimation(Mechanism):
    """PCKV's statistical model and estimators, given the probabilities (a, b, p) and ell.

    The configuration (``ell``, ``count_floor``, ``a``, ``b``, ``p``) is set by the
    subclass's ``_setup``.
    """

    estimator_names: ClassVar[tuple[str, ...]] = ("unbiased", "paper", "em", "normsub")

    ell: int
    count_floor: float
    a: float
    b: float
    p: float

    # --------------------------------------------------------------- model
    def transition(self) -> FloatArray:
        """Per-key P[z | x] of §9.4: z in (+1, -1, 0) rows; x in (sampled with v* = +1,
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

    def count_covariance(self, n: float, f: FloatArray, m: FloatArray) -> FloatArray:
        """Exact Cov of (n1[j], n2[j]) given the population: (d, 2, 2).

        Users are independent; a user's symbol at key j is +1 with probability
        q+ = w a/2 (1 + (2p-1) m) + (1 - w) b/2 and -1 with q- (m -> -m), w its probability of
        sampling j: 1/ell for the n f holders (who share the value m, as in Theorem 4), 0 for
        the others. Each user adds diag(q) - q q^T.
        """
        w = 1.0 / self.ell
        half_b = self.b / 2.0
        t = (2 * self.p - 1) * m
        qp = w * self.a / 2 * (1 + t) + (1 - w) * half_b
        qm = w * self.a / 2 * (1 - t) + (1 - w) * half_b

        def single(x: FloatArray | float, y: FloatArray | float) -> FloatArray:
            x_, y_ = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
            return np.stack(
                [np.stack([x_ * (1 - x_), -x_ * y_], -1), np.stack([-x_ * y_, y_ * (1 - y_)], -1)], -2
            )

        holders = (n * f)[:, None, None]
        return np.asarray((n - holders) * single(half_b, half_b) + holders * single(qp, qm), dtype=np.float64)

    # --------------------------------------------------------------- estimation
    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        n = float(stats.arrays["n"][0])
        n1 = stats.arrays["n1"].astype(np.float64)
        n2 = stats.arrays["n2"].astype(np.float64)
        diag: dict[str, Any] = {"assumes": ASSUMES}
        latent: FloatArray | None = None
        if estimator == "em":
            freq, mean, latent = self._em(n, n1, n2, options, diag)
        else:
            if options:
                raise TypeError(f"estimator {estimator} takes no options, got {sorted(options)}")
            if n <= 0:
                freq = mean = np.full(self.d, np.nan)
            elif estimator == "normsub":
                freq, mean = self._normsub(n, n1, n2)
            else:
                corrected, mean = self.algorithm4(n, n1, n2, diag)
                freq = self.baseline_frequency(n, n1, n2) if estimator == "unbiased" else corrected
        var_f, var_m = self.variances(n, freq, mean)
        diag["undefined_means"] = int(np.sum(np.isnan(mean)))
        if n <= 0:
            diag["no_reports"] = True
        return Estimate(
            mechanism=self.name,
            estimator=estimator,
            frequency=freq,
            frequency_stderr=stderr(var_f),
            mean=mean,
            mean_stderr=np.where(np.isnan(mean), np.nan, stderr(var_m)),
            n_reports=stats.n_reports,
            latent=latent,
            diagnostics=diag,
        )

    def baseline_frequency(self, n: float, n1: FloatArray, n2: FloatArray) -> FloatArray:
        """f^ = ell((n1 + n2)/n - b)/(a - b): exactly unbiased when every user holds <= ell keys."""
        return np.asarray(self.ell * ((n1 + n2) / n - self.b) / (self.a - self.b), dtype=np.float64)

    def algorithm4(
        self, n: float, n1: FloatArray, n2: FloatArray, diag: dict[str, Any] | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """PCKV Algorithm 4: (frequency corrected into [1/n, 1], mean).

        n1^, n2^ = A^-1(...) are clipped into [count_floor, N_j] with N_j = n f_j / ell,
        lower bound first so that the upper bound wins when N_j < count_floor; then
        m = (n1^ - n2^)/N_j, which lies in [-1, 1].

        Where the correction raises f to 1/n (fewer than 1/ell estimated holders, the
        baseline ratio's denominator is below one user) the published algorithm's mean is an
        artefact of the clipping — exactly 0 with count_floor = 1 — so it is reported as
        undefined (NaN, counted in the diagnostics); mapping NaN to 0 reproduces [X1].
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
        return f, np.where(raw < 1.0 / n, np.nan, (k1 - k2) / big_n)

    def _normsub(self, n: float, n1: FloatArray, n2: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Shares of (j, +1), (j, -1) for every real key plus the rest, projected onto the simplex."""
        c1, c2 = self.linear_counts(n, n1, n2)
        shares = np.stack([c1, c2], axis=1).ravel() / n
        proj = project_simplex(np.append(shares, 1.0 - shares.sum()))[:-1].reshape(self.d, 2)
        return self._from_shares(proj[:, 0], proj[:, 1])

    def _from_shares(self, up: FloatArray, down: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(f, m) from the shares of users who sampled (j, +1) and (j, -1); m is NaN at share 0."""
        total = up + down
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(total > 0, (up - down) / total, np.nan)
        return self.ell * total, mean

    def _em(
        self, n: float, n1: FloatArray, n2: FloatArray, options: dict[str, Any], diag: dict[str, Any]
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        opts = parse_em_options(options, (self.d, 3))
        counts = np.stack([n1, n2, n - n1 - n2], axis=1)
        res = em_counts(self.transition(), counts, theta0=opts.theta0, tol=opts.tol, max_iter=opts.max_iter)
        theta = np.where(res.empty[:, None], np.nan, res.theta)
        diag["em_iterations"] = int(res.iterations.max(initial=0))
        diag["em_unconverged_keys"] = int(np.sum(~res.converged & ~res.empty))
        diag["em_warm_start"] = opts.theta0 is not None
        freq, mean = self._from_shares(theta[:, 0], theta[:, 1])
        return freq, mean, theta

    def variances(self, n: float, freq: FloatArray, mean: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Analytic (Var f^, Var m^) per key for n users at frequency ``freq`` and mean ``mean``.

        Estimators evaluate it at their own estimate (f clipped into [0, 1], m into [-1, 1],
        NaN as 0). f^ is linear in n1 + n2; the mean is the ratio (n1 - n2)/(a(2p-1)) over
        (n1 + n2 - n b)/(a - b) = N_j, linearised at (m N_j, N_j) with N_j = n f/ell, f taken
        at least 1/n as in Algorithm 4. For ``em`` (square P, so the MLE is the linear
        solution when interior) and ``normsub`` the same first-order map applies.
        """
        if n <= 0:
            nan = np.full(self.d, np.nan)
            return nan, nan.copy()
        a, b, p, ell = self.a, self.b, self.p, self.ell
        f = np.clip(np.nan_to_num(freq, nan=0.0), 0.0, 1.0)
        m = np.clip(np.nan_to_num(mean, nan=0.0), -1.0, 1.0)
        cov = self.count_covariance(n, f, m)
        v11, v22, v12 = cov[:, 0, 0], cov[:, 1, 1], cov[:, 0, 1]
        var_sum, var_diff, cov_sd = v11 + v22 + 2 * v12, v11 + v22 - 2 * v12, v11 - v22
        var_f = (ell / (n * (a - b))) ** 2 * var_sum
        big_n = n * np.maximum(f, 1.0 / n) / ell
        gain = a * (2 * p - 1)
        var_m = ratio_variance(
            m * big_n, big_n, var_diff / gain**2, var_sum / (a - b) ** 2, cov_sd / (gain * (a - b))
        )
        return var_f, var_m
