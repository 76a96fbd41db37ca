"""Unbiased per-key state shares of every key-value mechanism, with their standard errors.

The population-level poisoning tests (:mod:`kvldp.common.untrusted.poisoning`) ask whether a
snapshot's statistics could come from *some* genuine population. Every key-value
mechanism's statistics carry an exactly unbiased linear estimate of how many reports
stand for each state of each key: a holder of <k, -1>, a holder of <k, +1> (after
Disc) and, where the mechanism reports it, a device without k. For every genuine
population these counts are >= 0, whatever its frequencies and means; a fake report
chosen to maximise a key's gain (the +1 symbol of the key and nothing else) moves the
estimates where no population can put them. This module extracts those estimates, as
shares of the reports, from the unbiased basis each estimator family already has:

* key-sampled mechanisms (PrivKV, F2M, KVUE, KVOH and KVUE-multi): the closed-form
  states theta = A(counts[j] / M_j) of all three states, with the exact covariance of
  the counts at the simplex-projected states pushed through A; and the number of
  reports M_j about each key, which uniform key sampling makes Binomial(n, t/d) (t keys
  per report) whatever the population holds;
* PCKV (UE and GRR): Algorithm 4's linear counts A^-1 (n1 - nb/2, n2 - nb/2) / n of the
  reports that sampled <j, +1> and <j, -1>, with the exact covariance of (n1, n2) at the
  raw frequency clipped into [0, 1] and the ratio mean; the padded share
  (:mod:`~kvldp.common.mechanisms.pckv_padded`) and its complement, the shares of all
  keys summed, are population-level counts that must also be >= 0 (the complement is
  what a unary fake with fewer set bits than a genuine report drives below 0);
* joint-state mechanisms (IOH, IOH-OUE, IOH-HRR): the calibrated cell counts summed over
  each key's three states, with their exact variances;
* PrivKVM: the states and report counts of round 1 (the one round whose transition
  does not depend on published means), as for PrivKV.

Item oracles (``collects_values = False``) are not covered: their only count per item is
its frequency, whose unbiased estimate is the only thing a fake can move, and a fake
item report is one symbol a genuine device sends too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvldp.common.data.stats import Stats
from kvldp.common.estimation.conditional import ABSENT, ALL_STATES, NEG, POS, ProductSet
from kvldp.common.estimation.simplex import project_simplex
from kvldp.common.estimation.variance import stderr
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.ioh import JointStateMechanism
from kvldp.common.mechanisms.keysampled import KeySampledMechanism, sampled_count_covariance
from kvldp.common.mechanisms.pckv import PCKV
from kvldp.common.mechanisms.privkv import lpp_transition
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.common.primitives import FloatArray

#: the state names, in column order of :attr:`StateShares.share`
STATE_NAMES = ("neg", "absent", "pos")


@dataclass(frozen=True)
class StateShares:
    """Per key and state (columns ``neg``, ``absent``, ``pos``): the unbiased share of the
    reports in that state and its standard error; NaN where the mechanism has no such
    count (PCKV's ``absent``) or the key has no reports. ``population`` holds
    population-level counts that are >= 0 for every genuine population, by name:
    (unbiased estimate, standard error). Key-sampled mechanisms also give ``reports``,
    the reports about each key (M_j), and ``report_share``, the chance t/d that a genuine
    report is about a given key."""

    share: FloatArray
    stderr: FloatArray
    population: dict[str, tuple[float, float]] = field(default_factory=dict)
    reports: FloatArray | None = None
    report_share: float = 0.0

    @property
    def d(self) -> int:
        return int(self.share.shape[0])


def covers(mechanism: Mechanism) -> bool:
    """Whether :func:`state_shares` has a basis for ``mechanism``."""
    return isinstance(mechanism, KeySampledMechanism | PCKV | JointStateMechanism | PrivKVM)


def state_shares(mechanism: Mechanism, stats: Stats) -> StateShares:
    """The unbiased state shares of ``stats`` (see the module docstring); raises
    ``TypeError`` for a mechanism without a basis (:func:`covers` says which)."""
    mechanism.check_stats(stats, "unbiased")
    if isinstance(mechanism, KeySampledMechanism):
        return _key_sampled(mechanism, stats)
    if isinstance(mechanism, PCKV):
        return _pckv(mechanism, stats)
    if isinstance(mechanism, JointStateMechanism):
        return _joint(mechanism, stats)
    if isinstance(mechanism, PrivKVM):
        return _privkvm(mechanism, stats)
    raise TypeError(f"{mechanism.name} has no state-count basis for poisoning tests")


def _through(a: FloatArray, cov: FloatArray, reports: FloatArray) -> FloatArray:
    """Standard errors of the states A (counts / M) per key, from the counts' covariance."""
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.einsum("ij,gjk,ik->gi", a, cov, a) / (reports**2)[:, None]
    return np.where(reports[:, None] > 0, stderr(var), np.nan)


def _sampled(
    transition: FloatArray, inverse: FloatArray, counts: FloatArray, n: int
) -> tuple[FloatArray, FloatArray]:
    """States and standard errors of one uniformly key-sampled round of counts (d, J)."""
    reports = counts.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pi = np.where(reports[:, None] > 0, counts / reports[:, None], np.nan)
    theta = np.asarray(pi @ inverse.T, dtype=np.float64)
    plugin = project_simplex(np.where(np.isfinite(theta), theta, 1.0 / 3.0))
    cov = sampled_count_covariance(transition, plugin, reports, n)
    return theta, _through(inverse, cov, reports)


def _key_sampled(mechanism: KeySampledMechanism, stats: Stats) -> StateShares:
    counts = stats.arrays["counts"].astype(np.float64)
    theta, se = _sampled(mechanism.transition(), mechanism.linear_inverse(), counts, stats.n_reports)
    return StateShares(
        theta, se, reports=counts.sum(axis=1), report_share=mechanism.keys_per_report / mechanism.d
    )


def _privkvm(mechanism: PrivKVM, stats: Stats) -> StateShares:
    counts = stats.arrays["counts"].astype(np.float64)[0]
    transition = lpp_transition(float(mechanism.p1[0]), mechanism.p2)
    inverse = np.asarray(np.linalg.inv(transition), dtype=np.float64)
    theta, se = _sampled(transition, inverse, counts, round(float(counts.sum())))
    return StateShares(theta, se, reports=counts.sum(axis=1), report_share=1.0 / mechanism.d)


def _pckv(mechanism: PCKV, stats: Stats) -> StateShares:
    d = mechanism.d
    n = float(stats.arrays["n"][0])
    nan = np.full((d, 3), np.nan)
    padded = mechanism.padded_share(stats)
    # both >= 0: the padded share, and its complement (the real pairs sampled, summed over keys)
    population = {
        "padded_share": (padded.estimate, padded.stderr),
        "sampled_share": (1.0 - padded.estimate, padded.stderr),
    }
    if n <= 0:
        return StateShares(nan, nan.copy(), population)
    n1 = stats.arrays["n1"].astype(np.float64)
    n2 = stats.arrays["n2"].astype(np.float64)
    c1, c2 = mechanism.linear_counts(n, n1, n2)
    f = np.clip(mechanism.baseline_frequency(n, n1, n2), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.nan_to_num(np.clip((c1 - c2) / (c1 + c2), -1.0, 1.0), nan=0.0)
    cov = mechanism.count_covariance(n, f, m)
    inverse = np.asarray(np.linalg.inv(mechanism.count_matrix()), dtype=np.float64)
    var = np.einsum("ij,gjk,ik->gi", inverse, cov, inverse)  # (d, 2): N+, N-
    share, se = nan.copy(), nan.copy()
    share[:, POS], share[:, NEG] = c1 / n, c2 / n
    se[:, POS], se[:, NEG] = stderr(var[:, 0]) / n, stderr(var[:, 1]) / n
    return StateShares(share, se, population)


def _joint(mechanism: JointStateMechanism, stats: Stats) -> StateShares:
    d = mechanism.d
    n = float(stats.arrays["n"][0])
    nan = np.full((d, 3), np.nan)
    if n <= 0:
        return StateShares(nan, nan.copy())

    def one_state(key: int, state: int) -> ProductSet:
        return ProductSet(tuple((state,) if k == key else ALL_STATES for k in range(d)))

    groups = [[one_state(key, s) for s in (NEG, ABSENT, POS)] for key in range(d)]
    sums = mechanism.cell_sums(stats, groups, "unbiased")
    share = np.array([g.estimates for g in sums]) / n
    se = np.array([stderr(np.diag(g.covariance)) for g in sums]) / n
    return StateShares(share, se)
