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

Batches. Every function takes one estimate (d keys) or a batch of estimates (..., d),
such as the draws behind a predicted error, and fits and shrinks each row on its own
keys, as if it were alone: one estimate is the batch of one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvldp.common.primitives import FloatArray

BoolArray = NDArray[np.bool_]

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
#: singular values of the least-squares systems (2 x 2) treated as 0, relative to the largest:
#: ``lstsq``'s default cutoff, eps times the system's size
LSTSQ_RCOND = 2 * float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class Shrunk:
    """Posterior means and variances per key, and the fitted priors, of one estimate (d,)
    or of a batch of estimates (..., d), each shrunk toward its own prior.

    The priors' fields have the batch's shape (() for one estimate): ``prior_mean`` is the
    prior's centre averaged over the keys (its intercept plus slope times the mean
    covariate when a covariate is used), ``prior_slope`` its slope in the covariate (0
    without one)."""

    value: FloatArray
    variance: FloatArray
    prior_mean: FloatArray
    prior_variance: FloatArray
    prior_slope: FloatArray


@dataclass(frozen=True)
class Prior:
    """Fitted priors t_k ~ N(coef[0] + coef[1] z_k, tau^2), one per row of a batch: ``coef``
    (..., 2) with its covariance ``coef_cov`` (..., 2, 2), ``tau2`` (...). A prior fitted
    without the line has slope 0, and no uncertainty in it."""

    coef: FloatArray
    tau2: FloatArray
    coef_cov: FloatArray


def _rows(x: FloatArray, like: FloatArray) -> FloatArray:
    """``x`` broadcast to the batch ``like`` (..., d) and flattened to rows (R, d)."""
    return np.broadcast_to(np.asarray(x, dtype=np.float64), like.shape).reshape(-1, like.shape[-1])


def fit_regression_prior(x: FloatArray, var: FloatArray, covariate: FloatArray | None = None) -> Prior:
    """The normal prior N(coef[0] + coef[1] z, tau^2) of each row of ``x`` (d,) or (..., d),
    from the row's keys with a finite estimate, variance and covariate.

    Solves the moment equations (Morris 1983, with a regression centre as in Fay and
    Herriot 1979): coef by weighted least squares with w = 1/(s^2 + tau^2), and
    tau^2 = sum w^2 (r^2 - s^2) / sum w^2 >= 0 for the residuals r = x - z . coef. Where
    the keys do not identify the line (one value of z) coef is the minimum-norm solution,
    as ``lstsq`` gives it. With too few usable keys for the line (fewer than its
    parameters + 1) the centre is a plain mean; without any, 0; with fewer than two there
    is no spread (tau^2 = 0). Each row is fitted on its own keys, to its own fixed point,
    exactly as if it were fitted alone.
    """
    x = np.asarray(x, dtype=np.float64)
    xs, vs = _rows(x, x), _rows(var, x)
    ok = np.isfinite(xs) & np.isfinite(vs)
    z = np.zeros_like(xs) if covariate is None else _rows(covariate, x)
    ok &= np.isfinite(z)
    count = ok.sum(axis=1)
    # a row without the line has its covariate column at 0: its fit is a plain mean, slope 0
    line = count > 2 if covariate is not None else np.zeros(count.shape, dtype=bool)
    xs, vs = np.where(ok, xs, 0.0), np.where(ok, np.maximum(vs, 0.0), 0.0)
    design = np.stack([np.ones_like(xs), np.where(ok & line[:, None], z, 0.0)], axis=-1)
    coef = np.zeros((xs.shape[0], 2))
    coef[count == 1, 0] = xs[count == 1].sum(axis=1)  # the one usable estimate
    tau2 = np.zeros(xs.shape[0])
    cov = np.zeros((xs.shape[0], 2, 2))
    fit = np.flatnonzero(count >= 2)
    if fit.size:
        coef[fit], tau2[fit], cov[fit] = _moment_fit(xs[fit], vs[fit], design[fit], ok[fit])
    shape = x.shape[:-1]
    return Prior(coef.reshape(*shape, 2), tau2.reshape(shape), cov.reshape(*shape, 2, 2))


def _moment_fit(
    xs: FloatArray, vs: FloatArray, design: FloatArray, ok: BoolArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(coef, tau^2, Cov coef) of each row by the fixed point of :func:`fit_regression_prior`,
    for rows with at least two usable keys ``ok`` (the others 0 in ``xs`` and ``vs``)."""
    count = ok.sum(axis=1)
    centre = xs.sum(axis=1) / count
    spread = np.where(ok, (xs - centre[:, None]) ** 2, 0.0).sum(axis=1) / count
    tau2 = np.maximum(spread - vs.sum(axis=1) / count, 0.0)
    exact = np.any(ok & (vs <= 0), axis=1)
    coef = np.zeros((xs.shape[0], 2))
    rows = np.arange(xs.shape[0])
    for _ in range(MAX_ITER):
        if rows.size == 0:
            break
        x, v, zs, before = xs[rows], vs[rows], design[rows], tau2[rows]
        w = _weights(v, before, exact[rows], ok[rows])
        info, rhs = _normal_equations(zs, w, x)
        c = (np.linalg.pinv(info, rcond=LSTSQ_RCOND) @ rhs[:, :, None])[:, :, 0]
        resid = x - np.einsum("rki,ri->rk", zs, c)
        w2 = w**2
        new = np.maximum(np.sum(w2 * (resid**2 - v), axis=1) / np.sum(w2, axis=1), 0.0)
        coef[rows], tau2[rows] = c, new
        rows = rows[~(np.abs(new - before) <= TOL * np.maximum(new, 1e-300))]
    info, _ = _normal_equations(design, _weights(vs, tau2, exact, ok), xs)
    return coef, tau2, np.asarray(np.linalg.pinv(info), dtype=np.float64)


def _weights(vs: FloatArray, tau2: FloatArray, exact: BoolArray, ok: BoolArray) -> FloatArray:
    """w = 1/(s^2 + tau^2) on the usable keys ``ok`` (0 on the others); equal weights in a
    row with no spread (tau^2 = 0) where some key is ``exact`` (s^2 = 0)."""
    total = vs + tau2[:, None]
    inverse = (tau2 > 0) | ~exact
    w = np.divide(1.0, total, out=np.ones_like(total), where=ok & inverse[:, None])
    return np.where(ok, w, 0.0)


def _normal_equations(design: FloatArray, w: FloatArray, x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Z^T W Z (R, 2, 2) and Z^T W x (R, 2) of weighted least squares, per row."""
    weighted = design * w[:, :, None]
    return np.swapaxes(weighted, 1, 2) @ design, np.einsum("rki,rk->ri", weighted, x)


def fit_prior(x: FloatArray, var: FloatArray) -> tuple[float, float]:
    """(mu, tau^2) of the normal prior N(mu, tau^2) of one estimate: :func:`fit_regression_prior` without a covariate."""
    prior = fit_regression_prior(x, var)
    return float(prior.coef[0]), float(prior.tau2)


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

    ``x`` is one estimate (d,) or a batch of estimates (..., d), the other arguments of
    its shape: each row is shrunk toward its own prior, exactly as if it were shrunk alone.

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
    xs, vs = _rows(x, x), _rows(var, x)
    fit = np.ones(xs.shape, dtype=bool) if fit_below is None else vs <= fit_below
    identified = np.sum(fit & np.isfinite(xs) & np.isfinite(vs), axis=1) >= MIN_FIT_KEYS
    fit_x = np.where(identified[:, None] & ~fit, np.nan, xs)
    prior, line, z = _shrinkage_prior(fit_x, vs, None if covariate is None else _rows(covariate, x))
    coef, tau2, coef_cov = prior.coef, prior.tau2, prior.coef_cov
    design = np.stack([np.ones_like(z), z], axis=-1)
    mu = np.clip(np.einsum("rki,ri->rk", design, coef), lo, hi)
    var_mu = np.einsum("rki,rij,rkj->rk", design, coef_cov, design)
    informed = np.isfinite(xs) & np.isfinite(vs)
    s2 = np.where(informed, np.maximum(vs, 0.0), np.inf)
    total = s2 + tau2[:, None]
    weighted = informed & (total > 0)
    w = np.divide(1.0, total, out=np.zeros_like(total), where=weighted)
    sum_w2 = np.sum(w**2, axis=1)
    var_tau2 = np.divide(2.0, sum_w2, out=np.zeros_like(sum_w2), where=w.sum(axis=1) > 0)
    # B = s^2/(s^2 + tau^2): 1 without information, 0 for an exact estimate
    big_b = np.where(informed, np.divide(s2, total, out=np.zeros_like(total), where=weighted), 1.0)
    slope = -np.divide(s2, total**2, out=np.zeros_like(total), where=weighted)
    dev = np.where(informed, xs - mu, 0.0)
    value = mu + (1.0 - big_b) * dev
    # the error of value is (1-B)(x - t) - B(t - mu): its variance, with B as used and the
    # prior's spread at the upper end of what the keys allow (tau^2 + 2 sd, at most the
    # variance a quantity in [lo, hi] can have), so an unidentified spread is not taken as 0
    widest = np.maximum((hi - mu) * (mu - lo), 0.0)
    upper = np.minimum((tau2 + 2.0 * np.sqrt(var_tau2))[:, None], widest)
    tau2_hi = np.where(identified[:, None], upper, widest)
    own = vs if error_var is None else _rows(error_var, x)
    informed_s2 = np.where(informed, np.maximum(own, 0.0), 0.0)
    variance = (
        (1.0 - big_b) ** 2 * informed_s2
        + big_b**2 * (tau2_hi + var_mu)
        + slope**2 * var_tau2[:, None] * dev**2
    )
    n_informed = informed.sum(axis=1)
    centre = np.where(
        n_informed > 0,
        np.where(informed, mu, 0.0).sum(axis=1) / np.maximum(n_informed, 1),
        np.mean(mu, axis=1),
    )
    shape = x.shape[:-1]
    return Shrunk(
        np.clip(value, lo, hi).reshape(x.shape),
        variance.reshape(x.shape),
        centre.reshape(shape),
        tau2.reshape(shape),
        np.where(line, coef[:, 1], 0.0).reshape(shape),
    )


def _shrinkage_prior(
    fit_x: FloatArray, vs: FloatArray, z: FloatArray | None
) -> tuple[Prior, BoolArray, FloatArray]:
    """The prior of each row (R, d) of :func:`shrink`, fitted on the keys of ``fit_x`` that
    are not NaN: with covariates ``z`` (R, d), a line in them where the keys identify its
    slope (``SLOPE_T2``), else one centre. Returns the prior, which rows use the line, and
    the covariate the centre of every key takes (0 in a row without the line; a key without
    a covariate sits at the fitted keys' mean covariate)."""
    if z is None:
        return fit_regression_prior(fit_x, vs), np.zeros(fit_x.shape[0], dtype=bool), np.zeros_like(fit_x)
    prior = fit_regression_prior(fit_x, vs, z)
    line = prior.coef[:, 1] ** 2 > SLOPE_T2 * prior.coef_cov[:, 1, 1]
    # no line the keys can tell from a flat centre: one centre, as without z
    flat = np.flatnonzero(~line)
    if flat.size:
        plain = fit_regression_prior(fit_x[flat], vs[flat])
        prior.coef[flat], prior.tau2[flat], prior.coef_cov[flat] = plain.coef, plain.tau2, plain.coef_cov
    used = np.isfinite(z) & np.isfinite(fit_x) & np.isfinite(vs)
    n_used = used.sum(axis=1)
    z_mean = np.divide(
        np.where(used, z, 0.0).sum(axis=1), n_used, out=np.zeros(n_used.shape), where=n_used > 0
    )
    return prior, line, np.where(line[:, None], np.where(np.isfinite(z), z, z_mean[:, None]), 0.0)


def shrink_means(
    mean: FloatArray,
    em_frequency: FloatArray,
    frequency: Shrunk,
    floor: float | FloatArray,
    variances: Callable[[FloatArray, FloatArray], tuple[FloatArray, FloatArray]],
) -> Shrunk:
    """Per-key means shrunk toward a prior centred on a line in the shrunk ``frequency``.

    ``mean`` is one estimate's (d,) or a batch's (..., d), each shrunk on its own.
    ``variances(f, m)`` gives a mechanism's (Var f^, Var m^) per key at frequency f and
    mean m, of that shape. The weights take Var m^ at stable values, not at each key's noisy estimate:
    at the keys' RMS mean (the m^2 term of Var m^ at a noisy m^ near +-1 doubles it and
    over-shrinks exactly the keys far from the others) and at the EM frequency each mean
    was divided by, or the shrunk one where lower, at least ``floor`` (an
    over-estimated frequency would claim a precision the key does not have). Each key's
    own mean enters its standard error only. An undefined (NaN) mean enters as "no
    information" and leaves as the prior's centre with the prior's standard error.
    """
    defined = ~np.isnan(mean)
    f_eval = np.maximum(np.minimum(np.nan_to_num(em_frequency, nan=0.0), frequency.value), floor)
    _, var_m = variances(f_eval, np.broadcast_to(rms_mean(mean), mean.shape).copy())
    _, own_m = variances(f_eval, np.nan_to_num(mean, nan=0.0))
    return shrink(
        mean, np.where(defined, var_m, np.inf), -1.0, 1.0, own_m, MEAN_FIT_VARIANCE, frequency.value
    )


def rms_mean(mean: FloatArray) -> FloatArray:
    """The RMS of the defined (not NaN) means of each estimate (..., d), 0 where none is:
    shape (..., 1)."""
    defined = ~np.isnan(mean)
    count = defined.sum(axis=-1, keepdims=True)
    square = np.where(defined, mean, 0.0) ** 2
    total = square.sum(axis=-1, keepdims=True)
    return np.asarray(
        np.sqrt(np.divide(total, count, out=np.zeros(count.shape), where=count > 0)), dtype=np.float64
    )


def prior_diagnostics(frequency: Shrunk, mean: Shrunk) -> dict[str, object]:
    """One estimate's fitted priors as its diagnostics: (centre, spread) of each, the means' slope."""
    return {
        "prior_frequency": (float(frequency.prior_mean), math.sqrt(frequency.prior_variance)),
        "prior_mean": (float(mean.prior_mean), math.sqrt(mean.prior_variance)),
        "prior_mean_slope": float(mean.prior_slope),
    }
