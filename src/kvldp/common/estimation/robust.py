"""Fake reports that a key-sampled mechanism's own key sampling gives away.

In a key-sampled mechanism (PrivKV, KVUE, KVOH, F2M, KVUE over t keys) every genuine
device picks the key(s) it reports on uniformly, independently of its data, so the
number of reports M_j about key j is Binomial(n, rho) with rho = t/d (t keys per report)
whatever the population holds. A fake device that wants to move key j must report on j,
so a targeted attack leaves an excess of reports on its targets that no genuine
population produces. This module holds the arithmetic of the ``robust`` estimator
(docs/robust.md) built on that fact:

* the common level of M_j is the median over keys (a minority of attacked keys does not
  move it); a key is *flagged* when its excess over the level is significant at the
  one-sided false-alarm rate ``FALSE_ALARM`` per key under the genuine binomial law;
* a flagged key's excess is attributed to fake reports and removed from the symbols a
  maximal-gain fake sends (the symbol that adds most to the key's "holds +1" state
  first), which leaves the key with the level's number of reports;
* the corrected states' covariance includes the randomness of M_j that the removal
  exposes (the ordinary estimators condition on M_j; the corrected one replaces M_j by
  the level, so the genuine count of the other symbols is unconditional) and the
  level's own variance (pi/2 times the binomial variance over d keys, the median's).

Everything is vectorised over keys; nothing here knows a mechanism beyond its transition
P and left inverse A.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from kvldp.common.primitives import FloatArray

#: one-sided false-alarm rate of the per-key excess test on genuine reports
FALSE_ALARM = 1e-4
#: its normal quantile
Z_GATE = NormalDist().inv_cdf(1.0 - FALSE_ALARM)
#: variance of a median of k iid normals over the variance of one, times k
MEDIAN_VARIANCE = np.pi / 2.0


@dataclass(frozen=True)
class ReportExcess:
    """The per-key report excess test of one snapshot.

    ``level`` is the genuine number of reports per key (the median over keys), ``sd`` the
    binomial standard deviation of one key's count at that level, ``z`` each key's excess
    in units of the excess's standard deviation, ``flagged`` the keys whose z exceeds
    ``Z_GATE`` and ``excess`` the reports attributed to fakes (0 on unflagged keys).
    """

    level: float
    sd: float
    level_variance: float
    z: FloatArray
    flagged: NDArray[np.bool_]
    excess: FloatArray


def report_excess(reports: FloatArray, share: float) -> ReportExcess:
    """Test every key's report count against the genuine Binomial(n_g, share) law.

    ``share`` is the chance that a genuine device reports on a given key (t/d). n_g is
    estimated as level/share, the level being the median count over keys.
    """
    d = reports.shape[0]
    level = float(np.median(reports))
    var_one = level * (1.0 - share)
    level_var = MEDIAN_VARIANCE * var_one / d
    sd_excess = float(np.sqrt(var_one + level_var))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd_excess > 0, (reports - level) / sd_excess, 0.0)
    flagged = z > Z_GATE
    excess = np.where(flagged, reports - level, 0.0)
    return ReportExcess(level, float(np.sqrt(var_one)), level_var, z, flagged, excess)


def gain_order(inverse: FloatArray, pos: int, neg: int) -> NDArray[np.int64]:
    """Output symbols in the order a maximal-gain fake prefers them: by what one report
    adds to the estimated "holds +1" state (A[pos, z]), ties broken by what it adds to the
    mean's numerator (A[pos, z] - A[neg, z])."""
    up = inverse[pos]
    mean = inverse[pos] - inverse[neg]
    return np.lexsort((-mean, -up)).astype(np.int64)


def remove_excess(counts: FloatArray, excess: FloatArray, order: NDArray[np.int64]) -> FloatArray:
    """``counts`` (d, J) with ``excess[j]`` reports taken from key j's symbols in ``order``,
    each symbol emptied before the next is touched."""
    out = counts.astype(np.float64, copy=True)
    left = excess.astype(np.float64, copy=True)
    for z in order:
        take = np.minimum(left, out[:, z])
        out[:, z] -= take
        left -= take
    return out


def corrected_state_covariance(
    p: FloatArray, inverse: FloatArray, theta: FloatArray, symbol: int, test: ReportExcess
) -> FloatArray:
    """Covariance (d, 3, 3) of the corrected states theta' = A c' / level of flagged keys.

    c' = L c + e level with L = I - e 1^T and e the unit vector of ``symbol`` (the removed
    excess is M_j - level, all from that symbol). Genuine counts c of a key are binomial
    in number and multinomial given it: Cov(c) = M (diag pi - pi pi^T) + Var(M) pi pi^T,
    pi = P theta, M = level, Var(M) = level (1 - share); the level adds Var(level) e e^T.
    ``theta`` (d, 3) are the plug-in states (on the simplex).
    """
    j_out = p.shape[0]
    pi = theta @ p.T  # (d, J)
    level = test.level
    eye = np.eye(j_out)
    cov = level * (pi[:, :, None] * eye[None] - pi[:, :, None] * pi[:, None, :])
    cov += test.sd**2 * pi[:, :, None] * pi[:, None, :]
    e = eye[symbol]
    lmap = eye - np.outer(e, np.ones(j_out))
    cov_c = np.einsum("ij,gjk,lk->gil", lmap, cov, lmap) + test.level_variance * np.outer(e, e)[None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.einsum("ij,gjk,lk->gil", inverse, cov_c, inverse) / level**2, dtype=np.float64)
