"""Calibration of exported standard errors: do the error bars mean what they say?

One population is perturbed, folded and estimated ``repeats`` times (the mechanism's
randomness re-drawn each time, the population fixed, as in :mod:`kvldp.evaluation.scoring`),
and every (collection, key) pair whose truth is defined is checked against the interval
the estimate exports: the ``[low, high]`` bounds of :class:`~kvldp.common.estimation.estimate.Estimate`
(estimate ± 1.96 standard errors unless the estimator says otherwise). Per quantity
(frequency, mean) the result holds

* ``coverage``: the share of pairs whose interval holds the truth (nominal 0.95);
* ``ratio``: the median over keys of (mean exported standard error) / (RMSE of the
  estimate over the collections), 1 when the bars are as wide as the errors;
* ``answered``: the share of pairs with a finite estimate; ``with_stderr``: the share
  of answered pairs that carry a finite standard error.

Coverage is a proportion over ``repeats × keys`` pairs, so its Monte Carlo standard
error is about sqrt(0.95 · 0.05 / pairs) (more when the keys of one collection err
together); the ratio's, about 1 / sqrt(2 · repeats) per key before the median.
Reference: docs/mechanisms.md, *Calibration of standard errors*.

A composed channel (``Mechanism.composed``: a memoized report randomized again at every
send; docs/mechanisms.md, *Instantaneous randomization*) is calibrated the same way: its
collections are the device's reports randomized again, estimated as the composed channel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.primitives import FloatArray
from kvldp.progress import Progress

#: the nominal coverage of the exported intervals
NOMINAL = 0.95


@dataclass(frozen=True)
class QuantityCalibration:
    """How well one quantity's (frequency's or mean's) error bars match its errors."""

    coverage: float
    ratio: float
    answered: float
    with_stderr: float
    pairs: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "coverage": self.coverage,
            "ratio": self.ratio,
            "answered": self.answered,
            "with_stderr": self.with_stderr,
            "pairs": self.pairs,
        }


@dataclass(frozen=True)
class Calibration:
    """The calibration of one mechanism × estimator on one population."""

    mechanism: str
    estimator: str
    epsilon: float
    repeats: int
    frequency: QuantityCalibration
    mean: QuantityCalibration | None
    #: the memoized report's epsilon of a composed channel (``epsilon`` is then its per-report
    #: eps1); None for a mechanism's own reports
    state_epsilon: float | None = None


def summarise(
    estimates: FloatArray, stderrs: FloatArray, lows: FloatArray, highs: FloatArray, truth: FloatArray
) -> QuantityCalibration:
    """Calibration of (repeats, d) estimates, standard errors and interval bounds against
    the (d,) truth; keys whose truth is undefined (NaN) are left out."""
    defined = np.isfinite(truth)
    est, se, lo, hi, t = (
        estimates[:, defined],
        stderrs[:, defined],
        lows[:, defined],
        highs[:, defined],
        truth[defined],
    )
    pairs = int(est.size)
    answered = np.isfinite(est)
    bounded = answered & np.isfinite(lo) & np.isfinite(hi)
    covered = bounded & (lo <= t[None, :]) & (t[None, :] <= hi)
    has_se = answered & np.isfinite(se)
    with np.errstate(invalid="ignore"):
        err2 = np.where(answered, (est - t[None, :]) ** 2, np.nan)
    keys = np.all(has_se, axis=0)
    ratio = float("nan")
    if keys.any():
        rmse = np.sqrt(np.mean(err2[:, keys], axis=0))
        mean_se = np.mean(se[:, keys], axis=0)
        ok = rmse > 0
        if ok.any():
            ratio = float(np.median(mean_se[ok] / rmse[ok]))
    return QuantityCalibration(
        coverage=float(covered.sum() / max(int(bounded.sum()), 1)) if bounded.any() else float("nan"),
        ratio=ratio,
        answered=float(answered.mean()) if pairs else float("nan"),
        with_stderr=float(has_se.sum() / max(int(answered.sum()), 1)) if answered.any() else float("nan"),
        pairs=pairs,
    )


def calibrate(
    mechanism: Mechanism,
    estimator: str,
    users: KVData,
    repeats: int,
    seed: int,
    show_progress: bool = False,
) -> Calibration:
    """Run ``repeats`` collections of ``users`` and measure the calibration of ``estimator``."""
    if repeats < 2:
        raise ValueError("calibration needs at least 2 collections")
    true_f, true_m = users.truth()
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA1]))
    columns: dict[str, list[FloatArray]] = {
        k: [] for k in ("f", "fse", "flo", "fhi", "m", "mse", "mlo", "mhi")
    }
    with Progress(repeats, f"{mechanism.name}/{estimator}") as bar:
        bar.enabled = bar.enabled and show_progress
        for _ in range(repeats):
            est: Estimate = mechanism.estimate(mechanism.collect(users, rng), estimator)
            f_lo, f_hi = est.frequency_interval
            m_lo, m_hi = est.mean_interval
            for key, value in (
                ("f", est.frequency),
                ("fse", est.frequency_stderr),
                ("flo", f_lo),
                ("fhi", f_hi),
                ("m", est.mean),
                ("mse", est.mean_stderr),
                ("mlo", m_lo),
                ("mhi", m_hi),
            ):
                columns[key].append(np.asarray(value, dtype=np.float64))
            bar.advance()
    arr = {k: np.stack(v) for k, v in columns.items()}
    freq = summarise(arr["f"], arr["fse"], arr["flo"], arr["fhi"], true_f)
    mean = (
        summarise(arr["m"], arr["mse"], arr["mlo"], arr["mhi"], true_m) if mechanism.collects_values else None
    )
    state = None if mechanism.composition is None else mechanism.composition.device.epsilon
    return Calibration(mechanism.name, estimator, mechanism.epsilon, repeats, freq, mean, state)


#: the ε grid of the calibration table
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
#: keys of the reference populations (joint-state mechanisms, limited to few keys, use 8)
REFERENCE_KEYS = 50
SMALL_DOMAIN_KEYS = 8


def reference_population(mechanism_name: str, max_keys: int | None, collects_values: bool) -> tuple[str, int]:
    """(dataset, keys) a mechanism is calibrated on: PCKV's one-pair Gaussian population for
    the item oracles and PCKV (one item per device is their setting, and ell = 1 then
    truncates nothing), Horigome's several-keys-per-device Gaussian population for the
    rest, with 8 keys where the mechanism's domain is small."""
    one_item = not collects_values or mechanism_name.startswith("pckv")
    keys = REFERENCE_KEYS if max_keys is None or max_keys >= REFERENCE_KEYS else SMALL_DOMAIN_KEYS
    return ("gaussian_pckv" if one_item else "gaussian"), keys
