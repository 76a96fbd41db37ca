"""IOH: Indexing One-Hot over the joint state of all d keys, for conditional analysis.

Client (Sun et al. 2019, Alg. 6; docs/mechanisms.md, *IOH*): every key gets its state code s_i (1 if absent, Disc applied
independently to each held value: 0 for -1, 2 for +1); the joint state is the base-3
index I = sum_i 3^(d-i) s_i with key 1 (wire key 0) the most significant digit; the
device one-hot encodes I into 3^d bits and reports each bit through symmetric
randomized response at eps/2 (SUE: p = e^(eps/2) / (e^(eps/2) + 1), q = 1 - p). Two
one-hot vectors differ in exactly two bits, so the report is eps-LDP and the bound is
tight. The report is ``{a: bin}``, the bits LSB-first in ceil(3^d / 8) bytes.

Statistics: C[i] = number of reports with bit i set (3^d int64) plus n. A fold
unpacks the bits of a block of reports and adds their column sums.

Estimation: the calibrated vector A_hat = (C - n q) / (p - q) estimates, without bias,
the number of users in every joint state; any count over a product set of states is a
sum of its cells, which is how :meth:`IOH.cell_sums` implements the
:class:`~kvldp.common.estimation.conditional.CellSumOracle` of :mod:`kvldp.common.estimation.conditional`. Bits are
perturbed independently, so the variance of a cell-set sum is exact:
|T| n q(1-q)/(p-q)^2 + A(T)(1-p-q)/(p-q), the second term vanishing for SUE. The two
estimators are ``unbiased`` (A_hat) and ``normsub`` (A_hat projected onto
{x >= 0, sum x = n} before every ratio). Per-key estimates are the unconditional
queries: f_k = F^{e_k}_{e_k} / n and m_k = (S+ - S-) / (S+ + S-).

Plausibility (docs/plausibility.md): a report with more set bits than any joint state
makes plausible is refused; every state is some input's certain state, so every device
keeps its report with the same probability and the calibration uses the accepted
reports' p' = Pr[own bit set | accepted] and q' = Pr[other bit set | accepted]. The
variances keep the independent-bit formulas (conditioning on acceptance, an event of
probability at least 1 - 1e-6, moves them by a relative O(1e-6)).

There is no EM: the posterior of a report's joint state depends on its whole bit
vector, so the E-step needs every report's bits and C is not a sufficient statistic;
it would be O(n 3^d) per iteration on stored reports, outside the streaming
aggregator. Reports grow as 3^d bits, so d is limited to 10 (7.4 KB per report).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvldp.common.channel.instantaneous import BitsOutput
from kvldp.common.channel.output_model import OutputModel, ProductModel, discrete_users
from kvldp.common.channel.plausibility import RefusalRule, set_bits
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.conditional import (
    CellSums,
    ConditionalEstimate,
    ConditionalQuery,
    InvalidQuery,
    ProductSet,
    answer_queries,
    expected_joint_counts,
    joint_index,
    joint_state_probabilities,
    joint_states,
)
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.estimation.simplex import project_simplex
from kvldp.common.mechanisms.base import IntArray, Mechanism
from kvldp.common.mechanisms.registry import register
from kvldp.common.mechanisms.unary_plausibility import OneHotAccepted, one_hot_rule
from kvldp.common.primitives import FloatArray, bit_column_sums, one_hot_bits, rr_keep
from kvldp.common.spec.params import InvalidParameter

#: largest number of keys IOH accepts (3^10 = 59049-bit reports, 7.4 KB; docs/mechanisms.md, *IOH*)
MAX_D = 10


class JointStateMechanism(Mechanism):
    """A mechanism whose statistics estimate counts of users' joint key states.

    Subclasses implement the client, the statistics and :meth:`cell_sums` (the
    :class:`~kvldp.common.estimation.conditional.CellSumOracle` protocol); per-key estimates and
    conditional queries then come from :mod:`kvldp.common.estimation.conditional`, identically for every
    such mechanism.
    """

    @abc.abstractmethod
    def cell_sums(
        self, stats: Stats, groups: Sequence[Sequence[ProductSet]], estimator: str
    ) -> list[CellSums]:
        """Estimated users per product set with their within-group covariance (see protocol)."""

    def conditional_many(
        self, stats: Stats, queries: Sequence[ConditionalQuery], estimator: str = "unbiased"
    ) -> list[ConditionalEstimate]:
        """f(k|C) and m(k|C) with standard errors for each query, from one snapshot."""
        for query in queries:
            if query.d != self.d:
                raise InvalidQuery(f"query over {query.d} keys asked of {self!r}")
        return answer_queries(self, stats, queries, estimator)

    def conditional(
        self, stats: Stats, query: ConditionalQuery, estimator: str = "unbiased"
    ) -> ConditionalEstimate:
        """f(k|C) and m(k|C) for one query (build it with :func:`kvldp.common.estimation.conditional.parse_query`)."""
        return self.conditional_many(stats, [query], estimator)[0]

    @cached_property
    def _key_queries(self) -> tuple[ConditionalQuery, ...]:
        """The unconditional query of every key: the per-key estimates."""
        return tuple(ConditionalQuery.build(self.d, key) for key in range(self.d))

    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        if options:
            raise TypeError(f"estimator {estimator} takes no options, got {sorted(options)}")
        # the per-key frequency stays raw, as every other mechanism's unbiased frequency
        answers = answer_queries(self, stats, self._key_queries, estimator, clip_frequency=False)
        frequency = np.array([a.frequency for a in answers])
        mean = np.array([a.mean for a in answers])
        f_bounds = np.array([a.frequency_interval for a in answers]).reshape(-1, 2)
        m_bounds = np.array([a.mean_interval for a in answers]).reshape(-1, 2)
        f_se = np.array([a.frequency_stderr for a in answers])
        m_se = np.array([a.mean_stderr for a in answers])
        if estimator == "normsub":
            # no per-key standard error: the linear approximation of the projection of
            # 3^d cells overstates its error 1.1-1.7x, normal draws around the projected
            # cells understate it 1.3-3x; the intervals are the unbiased cells'
            f_se = np.full(self.d, np.nan)
            m_se = f_se.copy()
        return Estimate(
            mechanism=self.name,
            estimator=estimator,
            frequency=frequency,
            frequency_stderr=f_se,
            mean=mean,
            mean_stderr=m_se,
            n_reports=stats.n_reports,
            diagnostics={
                "undefined_frequencies": int(np.sum(np.isnan(frequency))),
                "undefined_means": int(np.sum(np.isnan(mean))),
                # every report speaks of every key: with reports, a NaN mean is not estimable
                "not_estimable_means": int(np.sum(np.isnan(mean))) if stats.n_reports > 0 else 0,
            },
            frequency_bounds=(f_bounds[:, 0], f_bounds[:, 1]),
            mean_bounds=(m_bounds[:, 0], m_bounds[:, 1]),
        )


@register
class IOH(JointStateMechanism):
    """Indexing one-hot: the one-hot of a user's joint state over all d keys, every bit by
    randomized response at eps/2."""

    name = "ioh"
    summary = "IOH: one-hot of the joint state of all keys (3^d bits), per-bit RR at eps/2 (Sun et al. 2019)"

    max_keys = MAX_D
    max_keys_advice = (
        f"reports are 3^d bits (3^{MAX_D} bits = {(3**MAX_D + 7) // 8} bytes); collect fewer keys per "
        "collection, or use the Hadamard-based joint-state mechanism of a later release (O(log) bits)"
    )

    def _setup(self) -> None:
        self.n_cells = 3**self.d
        self.p, self.q = self.ue_probabilities(self.epsilon)
        rule, accepted = self._plausibility()
        self.accepted = accepted if rule.active else OneHotAccepted(1.0, self.p, self.q, 1.0)
        # Var of one calibrated cell: n * noise + A_i * signal (docs/mechanisms.md, *IOH*)
        self.noise = self.q * (1.0 - self.q) / (self.p - self.q) ** 2
        self.signal = (1.0 - self.p - self.q) / (self.p - self.q)

    def _plausibility(self) -> tuple[RefusalRule, OneHotAccepted]:
        return one_hot_rule(self.n_cells, self.p, self.q, 0, type(self).false_refusal_bound)

    def plausibility_rule(self) -> RefusalRule:
        """Refuses reports with too many set bits (docs/plausibility.md, *IOH*)."""
        return self._plausibility()[0]

    def report_statistic(self, batch: ReportBatch) -> NDArray[np.int64]:
        """The number of set bits (at most 3^d)."""
        return np.asarray(np.minimum(set_bits(batch["a"]), self.n_cells), dtype=np.int64)

    def ue_probabilities(self, epsilon: float) -> tuple[float, float]:
        """(p, q) of the unary encoding at ``epsilon``: Sun et al. 2019's SUE at epsilon/2 per bit
        (the one thing an OUE variant changes)."""
        p = rr_keep(epsilon / 2.0)
        return p, 1.0 - p

    def randomized_output(self) -> BitsOutput:
        return BitsOutput("a", self.n_cells, packed=True)

    def _contrast(self, epsilon: float) -> float:
        p, q = self.ue_probabilities(epsilon)
        return p - q

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        return (Field("a", "bits", 0, self.n_cells),)

    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        index = joint_index(joint_states(users, rng))
        return {"a": one_hot_bits(index, self.n_cells, self.p, self.q, rng)}

    # --------------------------------------------------------------- statistics
    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"C": (self.n_cells,)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        arrays["C"] += bit_column_sums(batch["a"], self.n_cells)

    def expected_stats(self, users: KVData) -> Stats:
        """E[n] = alpha n and E[C] = alpha (n q' + (p' - q') E[A]), E[A] the expected one-hot
        sum under Disc, alpha the chance a report is accepted (1 without a refusal region)."""
        if users.d != self.d:
            raise InvalidParameter(f"{self.name} is configured for d={self.d} keys, the data has d={users.d}")
        acc = self.accepted
        n = acc.alpha * float(users.n_users)
        expected = n * acc.q + (acc.p - acc.q) * acc.alpha * expected_joint_counts(users)
        return Stats.expected(self, {"C": expected, "n": np.array([n])})

    # --------------------------------------------------------------- estimation
    def calibrated(self, stats: Stats) -> FloatArray:
        """A_hat = (C - n q') / (p' - q'): unbiased number of users in each joint state."""
        self.check_stats(stats, "unbiased")
        n = float(stats.arrays["n"][0])
        p, q = self.accepted.p, self.accepted.q
        return (stats.arrays["C"].astype(np.float64) - n * q) / (p - q)

    def cell_vector(self, stats: Stats, estimator: str) -> FloatArray:
        """The cell counts an estimator sums: A_hat, or its projection onto the simplex of
        total n (Norm-Sub, consistent: no negative cell, cells sum to n)."""
        self.check_stats(stats, estimator)
        cells = self.calibrated(stats)
        return project_simplex(cells, total=float(stats.arrays["n"][0])) if estimator == "normsub" else cells

    def cell_set_variance(self, n: float, size: int, count: float) -> float:
        """Exact Var of a sum of ``size`` calibrated cells holding ``count`` users."""
        return size * n * self.noise + count * self.signal

    def cell_sums(
        self, stats: Stats, groups: Sequence[Sequence[ProductSet]], estimator: str
    ) -> list[CellSums]:
        """Sums of :meth:`cell_vector` over each set, and their covariances.

        Cells are perturbed independently, so Cov(sum_T1, sum_T2) is the variance of the
        sum over T1 ∩ T2 (again a product set): nested sets share their inner cells'
        noise and disjoint sets are independent. The population term uses the Norm-Sub
        cells as plug-in (exact for SUE, where it vanishes). For ``normsub`` the same
        covariance serves as the linear approximation of the projected estimate.
        """
        cells = self.cell_vector(stats, estimator)
        n = float(stats.arrays["n"][0])
        # plug-in of the population term; the projection is skipped when SUE makes the term vanish
        plugin = cells if estimator == "normsub" or self.signal == 0.0 else project_simplex(cells, total=n)
        out: list[CellSums] = []
        for group in groups:
            sets = list(group)
            for s in sets:
                if s.d != self.d:
                    raise InvalidQuery(f"product set over {s.d} keys asked of {self!r}")
            estimates = np.array([cells[s.cells()].sum() for s in sets])
            cov = np.zeros((len(sets), len(sets)))
            for a in range(len(sets)):
                for b in range(a, len(sets)):
                    common = sets[a].intersection(sets[b])
                    if common is not None:
                        inner = common.cells()
                        count = float(plugin[inner].sum())
                        cov[a, b] = cov[b, a] = self.cell_set_variance(n, inner.size, count)
            out.append(CellSums(estimates, cov))
        return out

    # --------------------------------------------------------------- privacy
    def exhaustive_feasible(self) -> bool:
        """The exhaustive model has 3^d inputs x 3^d bits (2 x 27^d ratios); d <= 3 already
        covers every kind of index pair, and beyond it the reduced model (checked equal to
        the exhaustive one for d <= 3 by the tests) is exact and costs O(1)."""
        return self.d <= 3

    def audit_model(self, exhaustive: bool) -> OutputModel:
        """Independent bits: Pr[bit c = 1 | user] = q + (p - q) Pr[joint state = c].

        Reduced model: the two users with joint states 0 and 1 (every key <1,-1>; the same
        with the last key absent) and only bits 0 and 1. For one-hot UE the likelihood
        ratio of indices I != I' depends on the output only through bits I and I' (every
        other bit has law Bernoulli(q) under both), and the mechanism is symmetric under
        any permutation of the cells, so every pair of distinct indices has the same worst
        ratio as (0, 1); users with fractional values are mixtures of indices and never
        exceed it (see :mod:`kvldp.common.guarantees.privacy_audit`).
        """
        if exhaustive:
            users, labels = discrete_users(self.d)
            in_state = joint_state_probabilities(users)
        else:
            in_state = np.eye(2)
            all_negative = [f"{k}:-1" for k in range(self.d)]
            labels = ("{" + ", ".join(all_negative) + "}", "{" + ", ".join(all_negative[:-1]) + "}")
        one = self.q + (self.p - self.q) * in_state
        factors = np.stack([1.0 - one, one], axis=-1)[:, :, None, :]
        return ProductModel(np.asarray(factors, dtype=np.float64), tuple(labels))
