"""Empirical-Bayes shrinkage of per-key estimates toward a prior fitted across the keys.

Reference: docs/mechanisms.md, *Empirical Bayes shrinkage* (its fit, standard errors and
the means' priors, each with the measurements that decided it).

An estimator gives every key an estimate x_k with a (first-order) sampling variance s_k^2.
When keys are many and their true values t_k spread around a common centre, the
normal-normal model t_k ~ N(mu, tau^2), x_k | t_k ~ N(t_k, s_k^2) says how much of each
x_k to believe: the posterior mean

    x~_k = mu + (1 - B_k)(x_k - mu),    B_k = s_k^2 / (s_k^2 + tau^2),

which moves a precise estimate (s_k << tau) by almost nothing and a key with little
information (s_k >> tau, rare keys, small epsilon) almost all the way to mu. (mu, tau^2)
are fitted from the keys themselves (the moment equations of Morris 1983, solved by
fixed-point iteration): mu is the precision-weighted mean, tau^2 the excess of the
weighted spread over the sampling variances, 0 when there is none. Summed over keys the
squared error is at most that of the x_k whatever the t_k are (James-Stein's result for
equal variances, d >= 3), and much lower when the keys' values are alike. The centre
may also be a line in a covariate every key has (mu_k = a + b z_k, Fay and Herriot
1979): the means of key-value data often move with the keys' frequency, and a single
centre would then drag the rare keys toward the frequent ones.

Standard errors. The shrunk estimate's error is (1 - B_k)(x_k - t_k) - B_k(t_k - mu): its
variance is (1 - B_k)^2 s_k^2 + B_k^2 tau^2, which is the posterior variance
(1 - B_k) s_k^2 when tau^2 is the true spread. The spread is itself estimated, and where
the keys carry little information it is poorly determined (at epsilon = 0.1 the fit
cannot tell tau^2 = 0 from the true 1/3): an interval built on the fitted tau^2 would
then claim the keys all sit at mu. So the standard error takes tau^2 at the upper end of
what the keys allow, tau^2 + 2 sd[tau^2] (Var[tau^2] = 2 / sum w^2, w = 1/(s_k^2 + tau^2)),
capped at the largest variance a quantity in its range can have, and adds the
uncertainty of mu (B_k^2 / sum w) and, to first order, of B_k through tau^2
((dB_k/dtau^2)^2 Var[tau^2] (x_k - mu)^2, after Kass and Steffey 1989). The point
estimate keeps the fitted tau^2, which minimises the squared error. A key with no
information (s_k = inf, or no estimate at all) gets mu with the standard error of that
upper spread: honest on average over keys, which is what a prior can promise; a single
key whose value is far from the others is pulled toward them by B_k (x_k - mu), and its
interval is honest only in that average sense, the price of shrinkage.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvldp.common.primitives import FloatArray

#: fixed-point iterations of the moment equations (they converge in a handful)
MAX_ITER = 200
#: relative change of tau^2 at which the fit stops
TOL = 1e-10
#: keys the prior's spread must be fitted on to count as identified
MIN_FIT_KEYS = 10
#: a covariate's line is used only where its slope is this many squared standard errors
#: from 0 (|t| >= 3); else the keys cannot tell it from a flat centre and one centre is fitted
SLOPE_T2 = 9.0
#: a mean's prior is fitted on keys whose mean has sd <= 1/4 only: there clipping into
#: [-1, 1] rarely binds and the estimate is close to normal
MEAN_FIT_VARIANCE = 1.0 / 16.0


@dataclass(frozen=True)
class Shrunk:
    """Posterior means and variances per key, and the fitted prior.

    ``prior_mean`` is the prior's centre averaged over the keys (its intercept plus slope
    times the mean covariate when a covariate is used), ``prior_slope`` its slope in the
    covariate (0 without one)."""

    value: FloatArray
    variance: FloatArray
    prior_mean: float
    prior_variance: float
    prior_slope: float = 0.0


@dataclass(frozen=True)
class Prior:
    """A fitted prior t_k ~ N(z_k . coef, tau^2), with the covariance of ``coef``."""

    coef: FloatArray
    tau2: float
    coef_cov: FloatArray


def _design(count: int, covariate: FloatArray | None) -> FloatArray:
    """Rows (1,) or (1, z_k): the prior's centre is an intercept, or a line in z."""
    ones = np.ones((count, 1))
    if covariate is None:
        return ones
    return np.hstack([ones, np.asarray(covariate, dtype=np.float64).reshape(count, 1)])


def fit_regression_prior(x: FloatArray, var: FloatArray, covariate: FloatArray | None = None) -> Prior:
    """The normal prior N(z . coef, tau^2) from the keys with a finite estimate and variance.

    Solves the moment equations (Morris 1983, with a regression centre as in Fay and
    Herriot 1979): coef by weighted least squares with w = 1/(s^2 + tau^2), and
    tau^2 = sum w^2 (r^2 - s^2) / sum w^2 >= 0 for the residuals r = x - z . coef. With
    too few usable keys for the line (fewer than its parameters + 1) the centre is a
    plain mean; without any, 0; with fewer than two there is no spread (tau^2 = 0).
    """
    x = np.asarray(x, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    design = _design(x.shape[0], covariate)
    ok = np.isfinite(x) & np.isfinite(var) & np.all(np.isfinite(design), axis=1)
    xs, vs, zs = x[ok], np.maximum(var[ok], 0.0), design[ok]
    if xs.size <= zs.shape[1]:
        zs = zs[:, :1]
    width = zs.shape[1]
    if xs.size == 0:
        return _padded(Prior(np.zeros(1), 0.0, np.zeros((1, 1))), design.shape[1])
    if xs.size < 2:
        return _padded(Prior(np.array([xs.mean()]), 0.0, np.zeros((1, 1))), design.shape[1])
    tau2 = max(float(np.var(xs) - np.mean(vs)), 0.0)
    coef = np.zeros(width)
    info = np.eye(width)
    for _ in range(MAX_ITER):
        w = 1.0 / (vs + tau2) if tau2 > 0 or np.all(vs > 0) else np.ones_like(vs)
        info = zs.T @ (w[:, None] * zs)
        coef = np.linalg.lstsq(info, zs.T @ (w * xs), rcond=None)[0]
        resid = xs - zs @ coef
        new = max(float(np.sum(w**2 * (resid**2 - vs)) / np.sum(w**2)), 0.0)
        if abs(new - tau2) <= TOL * max(new, 1e-300):
            tau2 = new
            break
        tau2 = new
    w = 1.0 / (vs + tau2) if tau2 > 0 or np.all(vs > 0) else np.ones_like(vs)
    info = zs.T @ (w[:, None] * zs)
    return _padded(Prior(coef, tau2, np.linalg.pinv(info)), design.shape[1])


def _padded(prior: Prior, width: int) -> Prior:
    """The prior with a zero slope (and no uncertainty in it) where only a mean was fitted."""
    have = prior.coef.shape[0]
    if have == width:
        return prior
    coef = np.zeros(width)
    coef[:have] = prior.coef
    cov = np.zeros((width, width))
    cov[:have, :have] = prior.coef_cov
    return Prior(coef, prior.tau2, cov)


def fit_prior(x: FloatArray, var: FloatArray) -> tuple[float, float]:
    """(mu, tau^2) of the normal prior N(mu, tau^2): :func:`fit_regression_prior` without a covariate."""
    prior = fit_regression_prior(x, var)
    return float(prior.coef[0]), prior.tau2


def shrink(
    x: FloatArray,
    var: FloatArray,
    lo: float,
    hi: float,
    error_var: FloatArray | None = None,
    fit_below: float | None = None,
    covariate: FloatArray | None = None,
) -> Shrunk:
    """Shrink ``x`` (variances ``var``) toward the fitted prior; results clipped into [lo, hi].

    ``var`` sets the weights and must not carry the key's own noise (a variance evaluated at
    the noisy estimate makes the noisiest keys look precise or hopeless at random);
    ``error_var``, when given, is the best per-key value of Var[x_k] and enters the standard
    errors only, so they follow each key's own error while the weights stay stable.

    ``fit_below``: fit the prior on the keys with ``var`` at most this only. An estimate
    that was clipped into its range (a mean near +-1 with a large variance) is not
    normal: its spread across keys is smaller than tau^2 + s^2, so fitting on it would
    find no spread at all. With fewer than MIN_FIT_KEYS such keys the prior is fitted on
    all keys, but its spread counts as not identified and the standard errors take the largest variance a quantity in [lo, hi]
    with the fitted centre can have, (hi - mu)(mu - lo) (Bhatia-Davis).

    ``covariate``: the prior's centre is a line in it, fitted across the keys (a
    Fay-Herriot prior), instead of one value. Where the keys' values move with something
    every key has, such as their frequency, a common centre would pull the keys at one
    end toward those at the other; the line pulls each key toward keys like it. The line
    is used only where the keys identify its slope (|t| >= 3, ``SLOPE_T2``), and its
    centres are kept in [lo, hi]: at small epsilon only the most frequent keys are
    precise enough to fit on, and a slope fitted on their narrow range of frequencies,
    carried to the rare keys, gave centres far outside the means' range (Sun et al.'s
    Gaussian data at epsilon = 0.4: slope -2.7 where the true one is 0, and 3x the MSE
    of one centre). A key with a NaN covariate gets the centre at the fitted keys' mean
    covariate.

    A NaN estimate or an infinite variance means "no information": the key gets the prior
    mean and the prior's standard error. Clipping into the parameter's range can only
    bring an estimate closer to the truth, so the variances are not changed by it.
    """
    x = np.asarray(x, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    fit = np.ones(x.shape, dtype=bool) if fit_below is None else np.asarray(var) <= fit_below
    identified = int(np.sum(fit & np.isfinite(x) & np.isfinite(var))) >= MIN_FIT_KEYS
    fit_x = np.where(fit, x, np.nan) if identified else x
    z = None if covariate is None else np.asarray(covariate, dtype=np.float64)
    prior = fit_regression_prior(fit_x, var, z)
    if z is not None and not prior.coef[1] ** 2 > SLOPE_T2 * prior.coef_cov[1, 1]:
        z = None  # no line the keys can tell from a flat centre: one centre, as without z
        prior = fit_regression_prior(fit_x, var)
    tau2 = prior.tau2
    design = _design(x.shape[0], z)
    if z is not None:  # keys without a covariate sit at the fitted keys' mean covariate
        used = np.isfinite(z) & np.isfinite(fit_x) & np.isfinite(var)
        design[~np.isfinite(z), 1] = float(z[used].mean())
    mu = np.clip(design @ prior.coef, lo, hi)
    var_mu = np.einsum("ki,ij,kj->k", design, prior.coef_cov, design)
    informed = np.isfinite(x) & np.isfinite(var)
    s2 = np.where(informed, np.maximum(var, 0.0), np.inf)
    total = s2 + tau2
    weighted = informed & (total > 0)
    w = np.divide(1.0, total, out=np.zeros_like(total), where=weighted)
    sum_w = float(w.sum())
    var_tau2 = 2.0 / float(np.sum(w**2)) if sum_w > 0 else 0.0
    # B = s^2/(s^2 + tau^2): 1 without information, 0 for an exact estimate
    big_b = np.where(informed, np.divide(s2, total, out=np.zeros_like(total), where=weighted), 1.0)
    slope = -np.divide(s2, total**2, out=np.zeros_like(total), where=weighted)
    dev = np.where(informed, x - mu, 0.0)
    value = mu + (1.0 - big_b) * dev
    # the error of value is (1-B)(x - t) - B(t - mu): its variance, with B as used and the
    # prior's spread at the upper end of what the keys allow (tau^2 + 2 sd, at most the
    # variance a quantity in [lo, hi] can have), so an unidentified spread is not taken as 0
    widest = np.maximum((hi - mu) * (mu - lo), 0.0)
    tau2_hi = np.minimum(tau2 + 2.0 * math.sqrt(var_tau2), widest) if identified else widest
    own = var if error_var is None else np.asarray(error_var, dtype=np.float64)
    informed_s2 = np.where(informed, np.maximum(own, 0.0), 0.0)
    variance = (1.0 - big_b) ** 2 * informed_s2 + big_b**2 * (tau2_hi + var_mu) + slope**2 * var_tau2 * dev**2
    centre = float(np.mean(mu[informed])) if informed.any() else float(np.mean(mu))
    line = float(prior.coef[1]) if z is not None else 0.0
    return Shrunk(np.clip(value, lo, hi), variance, centre, tau2, line)


def shrink_means(
    mean: FloatArray,
    em_frequency: FloatArray,
    frequency: Shrunk,
    floor: float | FloatArray,
    variances: Callable[[FloatArray, FloatArray], tuple[FloatArray, FloatArray]],
) -> Shrunk:
    """Per-key means shrunk toward a prior centred on a line in the shrunk ``frequency``.

    ``variances(f, m)`` gives a mechanism's (Var f^, Var m^) per key at frequency f and
    mean m. The weights take Var m^ at stable values, not at each key's noisy estimate:
    at the keys' RMS mean (the m^2 term of Var m^ at a noisy m^ near +-1 doubles it and
    over-shrinks exactly the keys far from the others) and at the EM frequency each mean
    was divided by, or the shrunk one where lower, at least ``floor`` (an
    over-estimated frequency would claim a precision the key does not have). Each key's
    own mean enters its standard error only. An undefined (NaN) mean enters as "no
    information" and leaves as the prior's centre with the prior's standard error.
    """
    defined = ~np.isnan(mean)
    rms = float(np.sqrt(np.mean(mean[defined] ** 2))) if defined.any() else 0.0
    f_eval = np.maximum(np.minimum(np.nan_to_num(em_frequency, nan=0.0), frequency.value), floor)
    _, var_m = variances(f_eval, np.full(mean.shape, rms))
    _, own_m = variances(f_eval, np.nan_to_num(mean, nan=0.0))
    return shrink(
        mean, np.where(defined, var_m, np.inf), -1.0, 1.0, own_m, MEAN_FIT_VARIANCE, frequency.value
    )


def prior_diagnostics(frequency: Shrunk, mean: Shrunk) -> dict[str, object]:
    """The fitted priors as an estimate's diagnostics: (centre, spread) of each, the means' slope."""
    return {
        "prior_frequency": (frequency.prior_mean, math.sqrt(frequency.prior_variance)),
        "prior_mean": (mean.prior_mean, math.sqrt(mean.prior_variance)),
        "prior_mean_slope": mean.prior_slope,
    }
