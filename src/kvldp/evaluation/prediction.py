"""Predicted accuracy of a mechanism on a population, without simulating it.

The prediction is exact in expectation and analytic in spread: the mechanism's
``expected_stats`` (the statistics the population produces on average, computed from
the probability model) go through the estimator once; the estimate's deviation from the
truth is the estimator's bias — PCKV's padding bias when devices hold more keys than
``ell``, PrivKV's pull of the mean toward 0 — and its standard errors are the analytic
variances at that point (docs/mechanisms.md, *Predicted errors*; delta method for ratios). MSE = variance + bias^2,
per key. Means are clipped into [-1, 1] by every estimator, so the mean's squared
error is that of a clipped normal, E[(clip(X, -1, 1) - m)^2] with X ~ N(E m^, Var m^):
where the delta-method variance is large (few holders per key) the clipped error stays
bounded, as the estimates do. An estimator that leaves a mean not estimable (its holders
not significantly above none) answers with probability P(estimable), from the normal
approximation of the holders' estimate, and its NaN is scored as 0: the key's squared
error is P times the clipped-normal one plus (1 - P) m^2. The same numbers serve ``kvldp advise`` and the "theory" rows of
``kvldp evaluate --experiment``.

A nonlinear estimator whose error is not a function of the first-order variances alone
(``eb``, which fits a prior across the keys and so depends on how the keys differ; EM,
whose answers on rare keys are bounded) is predicted by :func:`predict_by_draws`: the
estimator itself runs on draws of the sufficient statistics from the model behind the
analytic variances, and its errors are averaged: the same model as the analytic path,
with the estimator's own nonlinearity kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.clipped_normal import normal_cdf
from kvldp.common.estimation.estimate import Z95
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.keysampled import KeySampledMechanism
from kvldp.common.mechanisms.pckv_estimate import PCKVEstimation
from kvldp.common.primitives import FloatArray

#: draws of the statistics behind a draw-based prediction (its Monte-Carlo error is
#: about 1/sqrt(2 DRAWS) = 5% of the predicted MSE per key, less on the average over keys)
DRAWS = 200


@dataclass(frozen=True)
class Prediction:
    """Per-key predicted squared errors (NaN where a mean is undefined)."""

    mse_frequency: FloatArray
    mse_mean: FloatArray
    bias_frequency: FloatArray
    bias_mean: FloatArray

    def average(self, keys: np.ndarray | None = None) -> tuple[float, float]:
        """(MSE_f, MSE_m) averaged over ``keys`` (all keys by default)."""
        f = self.mse_frequency if keys is None else self.mse_frequency[keys]
        m = self.mse_mean if keys is None else self.mse_mean[keys]
        mean_m = float(np.nanmean(m)) if np.any(np.isfinite(m)) else float("nan")
        return float(np.nanmean(f)), mean_m


def predict(
    mechanism: Mechanism, users: KVData, estimator: str = "unbiased", scale_users: float = 1.0
) -> Prediction:
    """Predicted per-key MSE of ``estimator`` on ``users``.

    ``scale_users`` > 1 predicts for a population that many times larger with the same
    composition: the variances are first order in 1/n, the bias does not depend on n.
    """
    true_f, true_m = users.truth()
    expected = mechanism.expected_stats(users)
    est = mechanism.estimate(expected, estimator)
    bias_f = est.frequency - true_f
    var_f = est.frequency_stderr**2 / scale_users
    if mechanism.collects_values:
        point, sigma = est.mean, est.mean_stderr / math.sqrt(scale_users)
        estimable = np.isfinite(est.mean).astype(np.float64)
        if isinstance(mechanism, (PCKVEstimation, KeySampledMechanism)) and (
            estimator in mechanism.not_estimable_nan
        ):
            point, estimable, sigma = _estimable_mean(mechanism, expected, est.mean, scale_users)
        # a mean left not estimable is scored as 0, as ``kvldp evaluate`` scores it
        with np.errstate(invalid="ignore"):
            answered = clipped_normal_mse(point, sigma, true_m)
        mse_m = np.where(estimable > 0, estimable * answered, 0.0) + (1.0 - estimable) * true_m**2
        bias_m = estimable * (point - true_m) - (1.0 - estimable) * true_m
    else:
        bias_m = np.full_like(true_f, np.nan)
        mse_m = bias_m.copy()
    return Prediction(
        mse_frequency=var_f + bias_f**2,
        mse_mean=mse_m,
        bias_frequency=bias_f,
        bias_mean=bias_m,
    )


def _estimable_mean(
    mechanism: PCKVEstimation | KeySampledMechanism, expected: Stats, mean: FloatArray, scale_users: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(answered mean, P(estimable), its spread) per key of an estimator whose mean is NaN
    where it is not estimable.

    The key's mean is estimable where its denominator D (the estimated holders) is
    significantly above 0, D > Z95 sd(D); with D normal around its expectation,
    P(estimable) = Phi(E[D]/sd(D) - Z95), sd(D) shrinking as 1/sqrt(scale_users). The
    answered mean is the estimator's at the expected statistics, or the linear ratio
    where the expectation itself is not estimable; its spread is the first-order one.
    """
    linear, z, sd_m = mechanism.first_order_mean(expected)
    root = math.sqrt(scale_users)
    estimable = np.nan_to_num(normal_cdf(z * root - Z95), nan=0.0)
    return np.where(np.isfinite(mean), mean, linear), estimable, sd_m / root


def predict_by_draws(
    mechanism: Mechanism,
    users: KVData,
    estimators: Sequence[str],
    scale_users: float = 1.0,
    draws: int = DRAWS,
    seed: int = 0,
) -> dict[str, Prediction]:
    """Per-key MSE of each of ``estimators`` by running it on ``draws`` draws of the
    mechanism's statistics.

    PCKV's counts come from :func:`_pckv_draws`, a key-sampled mechanism's from
    :func:`_key_sampled_draws`; the counts are drawn as the integers they are, so rare
    keys' small counts keep their nonlinearity. The estimators run on all draws at once
    (``estimate_many``: what ``estimate`` answers on each draw; a key-sampled mechanism's
    for ``em`` and ``eb``), every estimator on the draws it would have alone with the same
    seed, and what they share (EM's fit) is computed once. A mean an estimator leaves
    undefined is scored as 0, as ``kvldp evaluate`` scores it.
    """
    true_f, true_m = users.truth()
    rng = np.random.default_rng(seed)
    if isinstance(mechanism, PCKVEstimation):
        n, arrays = _pckv_draws(mechanism, users, scale_users, draws, rng)
    elif isinstance(mechanism, KeySampledMechanism):
        n, arrays = _key_sampled_draws(mechanism, users, scale_users, draws, rng)
    else:
        raise TypeError(f"{mechanism.name}: no draw model for its statistics")
    predictions: dict[str, Prediction] = {}
    for estimator, (freq, mean) in mechanism.estimate_many(n, arrays, estimators).items():
        err_f = freq - true_f
        err_m = np.nan_to_num(mean, nan=0.0) - true_m
        predictions[estimator] = Prediction(
            mse_frequency=np.mean(err_f**2, axis=0),
            mse_mean=np.mean(err_m**2, axis=0),
            bias_frequency=np.mean(err_f, axis=0),
            bias_mean=np.mean(err_m, axis=0),
        )
    return predictions


def _pckv_draws(
    mechanism: PCKVEstimation, users: KVData, scale_users: float, draws: int, rng: np.random.Generator
) -> tuple[float, dict[str, FloatArray]]:
    """n and PCKV's counts (n1[j], n2[j]), each (draws, d), of ``scale_users`` times
    ``users``, drawn from the two-type model behind the analytic variances
    (:meth:`PCKVEstimation.count_covariance`), at the linear estimate of the expected
    counts (which reproduces their expectation): n f_j holders with the symbol
    probabilities of :meth:`PCKVEstimation.holder_probabilities` at the ratio N/D of the expected counts,
    the other users at b/2 each, multinomial per group. The ratio, not the ``unbiased``
    mean: that is NaN where the mean is not estimable, and drawing those keys at mean 0
    would hide their true means from the estimator under test. Keys are drawn
    independently (their covariance is of order 1/d of the variances)."""
    expected = mechanism.expected_stats(users)
    n = round(float(expected.arrays["n"][0]) * scale_users)
    n_expected = float(expected.arrays["n"][0])
    n1, n2 = (expected.arrays[k].astype(np.float64) for k in ("n1", "n2"))
    frequency = mechanism.baseline_frequency(n_expected, n1, n2)
    holders = np.rint(n * np.clip(frequency, 0.0, 1.0)).astype(np.int64)
    up, down = mechanism.linear_counts(n_expected, n1, n2)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (up - down) / (up + down)
    qp, qm = mechanism.holder_probabilities(np.clip(np.nan_to_num(ratio, nan=0.0), -1.0, 1.0))
    half_b = mechanism.b / 2.0
    held = np.stack([qp, qm, 1.0 - qp - qm], axis=1)
    rest = np.array([half_b, half_b, 1.0 - 2 * half_b])
    counts = np.asarray(
        rng.multinomial(holders, held, size=(draws, mechanism.d))
        + rng.multinomial(n - holders, rest, size=(draws, mechanism.d)),
        dtype=np.float64,
    )
    return float(n), {"n1": counts[..., 0], "n2": counts[..., 1]}


def _key_sampled_draws(
    mechanism: KeySampledMechanism, users: KVData, scale_users: float, draws: int, rng: np.random.Generator
) -> tuple[float, dict[str, FloatArray]]:
    """n and a key-sampled mechanism's counts[j], (draws, d, J), of ``scale_users`` times
    ``users``: key j's expected number of reports M_j, each reporter's symbol drawn from
    the key's expected symbol distribution P theta_j (multinomial per key). This is the model of
    :func:`~kvldp.common.mechanisms.keysampled.sampled_count_covariance` without its
    finite-population correction, a share M_j/n (1/d for one sampled key) of the
    population term. Keys are drawn independently."""
    expected = mechanism.expected_stats(users)
    mean_counts = expected.arrays["counts"].astype(np.float64) * scale_users
    n = round(float(expected.arrays["n"][0]) * scale_users)
    reports = np.rint(mean_counts.sum(axis=1)).astype(np.int64)
    totals = mean_counts.sum(axis=1, keepdims=True)
    uniform = np.full_like(mean_counts, 1.0 / mean_counts.shape[1])
    shares = np.divide(mean_counts, totals, out=uniform, where=totals > 0)
    counts = np.asarray(rng.multinomial(reports, shares, size=(draws, mechanism.d)), dtype=np.float64)
    return float(n), {"counts": counts}


def clipped_normal_mse(mu: FloatArray, sigma: FloatArray, target: FloatArray) -> FloatArray:
    """E[(clip(X, -1, 1) - target)^2] for X ~ N(mu, sigma^2), elementwise (NaN stays NaN)."""
    out = np.full(np.shape(mu), np.nan)
    for i, (m, s, t) in enumerate(zip(mu, sigma, target, strict=True)):
        if not (math.isfinite(m) and math.isfinite(s) and math.isfinite(t)):
            continue
        if s <= 0:
            out[i] = (min(max(m, -1.0), 1.0) - t) ** 2
            continue
        a, b = (-1.0 - m) / s, (1.0 - m) / s
        cdf_a, cdf_b = _phi_cdf(a), _phi_cdf(b)
        pdf_a, pdf_b = _phi(a), _phi(b)
        delta = m - t
        inside = (
            delta**2 * (cdf_b - cdf_a)
            + 2 * delta * s * (pdf_a - pdf_b)
            + s**2 * (cdf_b - cdf_a + a * pdf_a - b * pdf_b)
        )
        out[i] = cdf_a * (-1.0 - t) ** 2 + (1.0 - cdf_b) * (1.0 - t) ** 2 + inside
    return out


def _phi(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _phi_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2)))
