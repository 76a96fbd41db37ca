"""Estimated answers of conditional queries: f(k|C) and m(k|C) with standard errors.

A mechanism implements :class:`CellSumOracle` (estimated counts of groups of product
sets with their covariance matrix *within* each group); :func:`answer_queries` turns
those counts into f(k|C) = F^{a'}_{b'} / F^a_b and m(k|C) = (S+ - S-) / (S+ + S-) with
delta-method standard errors and kvldp's corrections (NaN for a denominator <= 0,
clipping, the known n for an empty condition). A full covariance (not "disjoint sets are
independent") keeps the ratio algebra valid for mechanisms whose cell estimates are
correlated, such as Hadamard coefficients (docs/mechanisms.md, *Answering a conditional
query*). The sets come from
:meth:`ConditionalQuery.sets` of :mod:`~kvldp.common.conditional.query`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kvldp.common.conditional.cells import ProductSet
from kvldp.common.conditional.query import ConditionalQuery
from kvldp.common.primitives import FloatArray
from kvldp.common.stats import Stats


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
    and ``negative`` S-. A NaN answer is explained in ``diagnostics``."""

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


def _answer(
    query: ConditionalQuery, sums: CellSums, n: float, estimator: str, n_reports: int, clip_frequency: bool
) -> ConditionalEstimate:
    est = np.asarray(sums.estimates, dtype=np.float64)
    cov = np.asarray(sums.covariance, dtype=np.float64)
    num, pos, neg = float(est[0]), float(est[1]), float(est[2])
    if query.condition.is_empty:
        den, var_den, cov_nd = n, 0.0, 0.0
    else:
        den, var_den, cov_nd = float(est[3]), float(cov[3, 3]), float(cov[0, 3])
    diag: dict[str, Any] = {}

    # f = Num / Den by the delta method with the Num-Den covariance; for IOH the sets are
    # nested, so this is [V_num (1-r)^2 + r^2 V_rest] / Den^2 (docs/mechanisms.md, *IOH*).
    if den > 0:
        raw_f = num / den
        var_f = (float(cov[0, 0]) - 2.0 * raw_f * cov_nd + raw_f * raw_f * var_den) / (den * den)
        frequency = min(max(raw_f, 0.0), 1.0) if clip_frequency else raw_f
        f_se = math.sqrt(max(var_f, 0.0))
        diag["frequency_clipped"] = frequency != raw_f
    else:
        frequency = f_se = math.nan
        diag["frequency_undefined"] = "estimated number of users meeting the condition is <= 0"

    # m = (S+ - S-) / (S+ + S-): gradient (2 S-, -2 S+) / H^2 against the (S+, S-) covariance,
    # plus Disc's variance of the holders' values, at most (1 - m^2) / H (attained when the
    # holders share one value, the assumption PCKV's Theorem 4 and keysampled also make).
    holders = pos + neg
    if holders > 0:
        raw_m = (pos - neg) / holders
        mean = min(max(raw_m, -1.0), 1.0)
        grad = np.array([2.0 * neg, -2.0 * pos]) / (holders * holders)
        var_m = float(grad @ cov[1:3, 1:3] @ grad) + (1.0 - mean * mean) / holders
        m_se = math.sqrt(max(var_m, 0.0))
        diag["mean_clipped"] = mean != raw_m
    else:
        mean = m_se = math.nan
        diag["mean_undefined"] = "estimated number of holders of the target key is <= 0"
    return ConditionalEstimate(
        query=query,
        estimator=estimator,
        frequency=frequency,
        frequency_stderr=f_se,
        mean=mean,
        mean_stderr=m_se,
        numerator=num,
        denominator=den,
        positive=pos,
        negative=neg,
        n_reports=n_reports,
        diagnostics=diag,
    )


def answer_queries(
    oracle: CellSumOracle,
    stats: Stats,
    queries: Sequence[ConditionalQuery],
    estimator: str = "unbiased",
    clip_frequency: bool = True,
) -> list[ConditionalEstimate]:
    """Answer conditional queries from one statistics snapshot (docs/mechanisms.md, *Answering a conditional query*).

    One oracle call serves all queries. ``clip_frequency=False`` keeps the raw (unbiased)
    frequency, which is what per-key estimates report; means are always clipped.
    """
    n = float(stats.arrays["n"][0])
    sums = oracle.cell_sums(stats, [q.sets().group() for q in queries], estimator)
    return [
        _answer(q, s, n, estimator, stats.n_reports, clip_frequency)
        for q, s in zip(queries, sums, strict=True)
    ]
