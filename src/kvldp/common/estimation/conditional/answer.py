"""Estimated answers of conditional queries: f(k|C) and m(k|C) with calibrated error bars.

A mechanism implements :class:`CellSumOracle` (estimated counts of groups of product
sets with their covariance matrix *within* each group); :func:`answer_queries` turns
those counts into f(k|C) = F^{a'}_{b'} / F^a_b and m(k|C) = (S+ - S-) / (S+ + S-).
A full covariance (not "disjoint sets are independent") keeps the ratio algebra valid
for mechanisms whose cell estimates are correlated, such as Hadamard coefficients
(docs/mechanisms.md, *Answering a conditional query*). The sets come from
:meth:`ConditionalQuery.sets` of :mod:`~kvldp.common.estimation.conditional.query`.

Error bars come from the *inference basis*, the ``unbiased`` estimator's cell sums,
whatever estimator gives the point (docs/mechanisms.md, *Calibration of standard
errors*): a frequency over the known n has the clipped interval of its raw value, every
other ratio Fieller's interval (:mod:`kvldp.common.estimation.intervals`), the mean's with Disc's
variance of the holders' values inside it. A ratio whose denominator is not
significantly nonzero is *not estimable* (NaN, with the reason in the diagnostics): the
data cannot tell the users it divides by from nobody. The standard error of a frequency
is the one its interval implies (the analytic one for a raw unbiased frequency); a mean's
is the reach of its interval from the point, which stays near the clipped point's RMSE
where the range cuts the interval on one side; a projected mean's adds the square of its
distance from the basis mean, an estimate of its bias.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.stats import Stats
from kvldp.common.estimation.conditional.cells import ProductSet
from kvldp.common.estimation.conditional.query import ConditionalQuery
from kvldp.common.estimation.estimate import Z95
from kvldp.common.estimation.intervals import clipped_interval, fieller_interval, interval_stderr
from kvldp.common.primitives import FloatArray


@dataclass(frozen=True)
class CellSums:
    """Estimated numbers of users in a group of product sets, ``estimates`` (K,), and the
    covariance matrix of those estimates (K, K) given the users' joint states."""

    estimates: FloatArray
    covariance: FloatArray


class CellSumOracle(Protocol):
    """What a joint-state mechanism implements to answer conditional queries."""

    def cell_sums(
        self, stats: Stats, groups: Sequence[Sequence[ProductSet]], estimator: str
    ) -> list[CellSums]:
        """For each group of product sets, the estimated number of users whose joint state
        lies in each set and the covariance of these estimates within the group.

        Every oracle has an ``unbiased`` estimator whose sums are unbiased: they are the
        inference basis of every estimator's error bars.

        Counts are of joint *state codes* after the device's Disc; the covariance is given
        those states (Disc's own randomness is accounted for by :func:`answer_queries`).
        Asking for a whole group at once lets a mechanism calibrate its statistics once
        and supply covariances between overlapping or correlated sets.
        """
        ...


@dataclass(frozen=True)
class ConditionalEstimate:
    """f(k|C) and m(k|C) with standard errors; the four counts are kept for diagnostics:
    ``numerator`` F^{a'}_{b'}, ``denominator`` F^a_b (n for an empty C), ``positive`` S+
    and ``negative`` S-. A NaN answer is explained in ``diagnostics``. The bounds are the
    95% intervals (NaN where the answer is); the standard errors are the point
    estimates' (see the module docstring)."""

    query: ConditionalQuery
    estimator: str
    frequency: float
    frequency_stderr: float
    mean: float
    mean_stderr: float
    numerator: float
    denominator: float
    positive: float
    negative: float
    n_reports: int
    diagnostics: Mapping[str, Any] = field(default_factory=dict)
    frequency_interval: tuple[float, float] = (math.nan, math.nan)
    mean_interval: tuple[float, float] = (math.nan, math.nan)

    def to_dict(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """JSON-ready form; NaN becomes None."""

        def num(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        alpha, beta = self.query.condition.encoding()
        return {
            "query": self.query.format(names),
            "target": self.query.target,
            "alpha": alpha,
            "beta": beta,
            "estimator": self.estimator,
            "n_reports": self.n_reports,
            "frequency": num(self.frequency),
            "frequency_stderr": num(self.frequency_stderr),
            "mean": num(self.mean),
            "mean_stderr": num(self.mean_stderr),
            "numerator": num(self.numerator),
            "denominator": num(self.denominator),
            "positive": num(self.positive),
            "negative": num(self.negative),
            "diagnostics": dict(self.diagnostics),
        }


class _Columns:
    """The group sums of many queries as columns: (Q,) counts and their covariances.

    Group rows are numerator, S+, S-, then the denominator (absent for an empty condition,
    whose denominator is the known n with no variance)."""

    def __init__(self, sums: Sequence[CellSums], empty: NDArray[np.bool_], n: float) -> None:
        def entry(i: int, j: int, default: float) -> FloatArray:
            return np.array(
                [
                    default if e and 3 in (i, j) else float(s.covariance[i, j])
                    for s, e in zip(sums, empty, strict=True)
                ]
            )

        def value(i: int, default: float) -> FloatArray:
            return np.array(
                [default if e and i == 3 else float(s.estimates[i]) for s, e in zip(sums, empty, strict=True)]
            )

        self.num, self.pos, self.neg, self.den = (value(i, n) for i in range(4))
        self.v_num, self.v_den, self.c_num_den = entry(0, 0, 0.0), entry(3, 3, 0.0), entry(0, 3, 0.0)
        self.v_pos, self.v_neg, self.c_pos_neg = entry(1, 1, 0.0), entry(2, 2, 0.0), entry(1, 2, 0.0)


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / den, np.nan)


def _answers(
    queries: Sequence[ConditionalQuery],
    point: Sequence[CellSums],
    basis: Sequence[CellSums],
    n: float,
    estimator: str,
    n_reports: int,
    clip_frequency: bool,
) -> list[ConditionalEstimate]:
    empty = np.array([q.condition.is_empty for q in queries], dtype=bool)
    p, b = _Columns(point, empty, n), _Columns(basis, empty, n)

    # frequency: the raw value over the known n has a clipped interval; a ratio of two
    # estimated counts Fieller's, which also says whether the denominator is significant
    with np.errstate(invalid="ignore"):
        f_se_raw = np.sqrt(np.maximum(b.v_num, 0.0)) / n if n > 0 else np.full(len(queries), np.nan)
    f_lo, f_hi = clipped_interval(_ratio(b.num, b.den), f_se_raw)
    c_lo, c_hi, c_ok = fieller_interval(b.num, b.den, b.v_num, b.v_den, b.c_num_den, 0.0, 1.0)
    # an insignificant denominator leaves Fieller's set unbounded: the whole range [0, 1]
    bounded = empty | (c_ok & (b.den > 0))
    f_lo = np.where(empty, f_lo, np.where(bounded, c_lo, 0.0))
    f_hi = np.where(empty, f_hi, np.where(bounded, c_hi, 1.0))
    raw_f = _fallback(_ratio(p.num, p.den), _ratio(b.num, b.den))
    f_ok = np.isfinite(raw_f)
    frequency = np.where(f_ok, np.clip(raw_f, 0.0, 1.0) if clip_frequency else raw_f, np.nan)

    # mean: N = S+ - S-, D = S+ + S-; Disc adds the sum over holders of 1 - v^2, which is
    # H (1 - m^2) when they share the value m: exactly H more in Var N and H less in Var D
    holders = np.clip(b.pos + b.neg, 0.0, max(n, 0.0))
    m_lo, m_hi, m_ok = fieller_interval(
        b.pos - b.neg,
        b.pos + b.neg,
        b.v_pos + b.v_neg - 2.0 * b.c_pos_neg + holders,
        b.v_pos + b.v_neg + 2.0 * b.c_pos_neg - holders,
        b.v_pos - b.v_neg,
    )
    m_ok &= b.pos + b.neg > 0
    raw_m = _fallback(_ratio(p.pos - p.neg, p.pos + p.neg), _ratio(b.pos - b.neg, b.pos + b.neg))
    mean = np.where(m_ok, np.clip(raw_m, -1.0, 1.0), np.nan)

    # the basis mean's standard error; a projected mean's MSE adds its estimated squared
    # bias, its distance from the basis mean (the projection pulls S+ and S- alike)
    basis_m = np.clip(_ratio(b.pos - b.neg, b.pos + b.neg), -1.0, 1.0)
    m_se = _reach(basis_m, m_lo, m_hi)
    if estimator != "unbiased":  # a projected point may leave the basis interval: widen it
        f_lo, f_hi = np.fmin(f_lo, frequency), np.fmax(f_hi, frequency)
        m_lo, m_hi = np.fmin(m_lo, mean), np.fmax(m_hi, mean)
        m_se = np.hypot(m_se, mean - basis_m)
    f_lo, f_hi = np.where(f_ok, f_lo, np.nan), np.where(f_ok, f_hi, np.nan)
    f_se = np.where(
        empty & (estimator == "unbiased") & (not clip_frequency), f_se_raw, interval_stderr(f_lo, f_hi)
    )
    return [
        ConditionalEstimate(
            query=q,
            estimator=estimator,
            frequency=float(frequency[i]),
            frequency_stderr=float(f_se[i]) if f_ok[i] else math.nan,
            mean=float(mean[i]),
            mean_stderr=float(m_se[i]) if m_ok[i] else math.nan,
            numerator=float(p.num[i]),
            denominator=float(p.den[i]),
            positive=float(p.pos[i]),
            negative=float(p.neg[i]),
            n_reports=n_reports,
            diagnostics=_diagnostics(
                float(raw_f[i]), float(frequency[i]), bool(bounded[i]), float(raw_m[i]), float(mean[i])
            ),
            frequency_interval=(float(f_lo[i]), float(f_hi[i])),
            mean_interval=(float(m_lo[i]), float(m_hi[i])),
        )
        for i, q in enumerate(queries)
    ]


def _reach(point: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """The standard error of a clipped ratio: the distance from the point to the farther
    end of its interval, over Z95. Where the range cuts one side of the interval, the
    point can still err as far as the other side reaches; a symmetric interval gives its
    half-width over Z95."""
    return np.asarray(np.maximum(point - lo, hi - point) / Z95, dtype=np.float64)


def _fallback(point: FloatArray, basis: FloatArray) -> FloatArray:
    """The point estimator's ratio, else (its denominator projected to 0) the basis ratio."""
    return np.where(np.isfinite(point), point, basis)


def _diagnostics(raw_f: float, frequency: float, bounded: bool, raw_m: float, mean: float) -> dict[str, Any]:
    """Why an answer is NaN (undefined, not estimable), clipped or has the widest interval."""
    diag: dict[str, Any] = {}
    if math.isnan(frequency):
        diag["frequency_undefined"] = "estimated number of users meeting the condition is <= 0"
    else:
        diag["frequency_clipped"] = frequency != raw_f
        if not bounded:
            diag["frequency_interval_unbounded"] = (
                "the estimated number of users meeting the condition is not significantly above 0: "
                "the interval is [0, 1]"
            )
    if math.isnan(mean):
        diag["mean_undefined"] = (
            "not estimable: the estimated number of holders of the target key is not significantly above 0"
        )
    else:
        diag["mean_clipped"] = mean != raw_m
    return diag


def answer_queries(
    oracle: CellSumOracle,
    stats: Stats,
    queries: Sequence[ConditionalQuery],
    estimator: str = "unbiased",
    clip_frequency: bool = True,
) -> list[ConditionalEstimate]:
    """Answer conditional queries from one statistics snapshot (docs/mechanisms.md, *Answering a conditional query*).

    One oracle call serves all queries (two for an estimator other than ``unbiased``, whose
    sums are the error bars' basis). ``clip_frequency=False`` keeps the raw frequency,
    which is what per-key estimates report; means are always clipped.
    """
    n = float(stats.arrays["n"][0])
    groups = [q.sets().group() for q in queries]
    point = oracle.cell_sums(stats, groups, estimator)
    basis = point if estimator == "unbiased" else oracle.cell_sums(stats, groups, "unbiased")
    return _answers(queries, point, basis, n, estimator, stats.n_reports, clip_frequency)
