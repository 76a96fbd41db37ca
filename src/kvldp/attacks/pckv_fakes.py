"""Fakes against PCKV-GRR and PCKV-UE.

Both estimators see a report only through its symbol at each key j: +1 (counted in
n1[j]), -1 (n2[j]) or 0. The ``unbiased`` frequency of j grows with n1[j] + n2[j] and the
mean's numerator with n1[j] - n2[j] (Gu et al. 2020, Eq. 9-10), so the maximal-gain report
says +1 (m* < 0: -1) at every target it can:

* PCKV-GRR carries one pair: M2GA sends <t, +1> for a uniform target t;
* PCKV-UE carries a ternary vector: M2GA sets the ``pos`` bit of every target and nothing
  else (a genuine report has every target set and no other coordinate with probability
  (a p)(b/2)^(r-1)(1-b)^(d-r) at most).

RMA: a uniform valid output — one of the 2d + 1 pairs (<k, +-1> or the dummy) for GRR, each
coordinate uniform over {+1, -1, 0} for UE. Adaptive: GRR sends <t, v> with v = +1 with
probability (1 + (2p - 1) m*)/2, the sign split of genuine holders of <t, m*> that kept
their key, so the target's unbiased mean estimates m* and never leaves [-1, 1]. UE draws
the number of non-zero coordinates K of a genuine report of a holder of <t, m*> (the
genuine client's own draw), puts up to r of them on the targets (signs as for GRR) and
the rest on uniform other keys with fair signs: the count of non-zero coordinates, the
statistic a plausibility rule looks at, has exactly the genuine distribution of one-pair
devices.
"""

from __future__ import annotations

import numpy as np

from kvldp.attacks.target import FakeGenerator, Target
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import ReportBatch
from kvldp.common.mechanisms import Mechanism
from kvldp.common.mechanisms.pckv import PCKV
from kvldp.common.primitives import IntArray, pack_bits


def _pckv(mech: Mechanism) -> PCKV:
    assert isinstance(mech, PCKV)
    return mech


def kept_signs(mech: PCKV, target: Target, n: int, rng: np.random.Generator) -> IntArray:
    """Signs of genuine holders of m* who kept their key: +1 w.p. (1 + (2p - 1) m*)/2."""
    up = rng.random(n) < (1.0 + (2.0 * mech.p - 1.0) * target.mean) / 2.0
    return np.where(up, 1, -1).astype(np.int64)


# ---------------------------------------------------------------------- PCKV-GRR
def grr_m2ga(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    return {"k": target.pick(n, rng), "v": np.full(n, target.sign, dtype=np.int64)}


def grr_rma(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    code = rng.integers(0, 2 * mech.d + 1, size=n, dtype=np.int64)
    dummy = code == 2 * mech.d
    return {
        "k": np.where(dummy, mech.d, code // 2).astype(np.int64),
        "v": np.where(dummy, 0, 1 - 2 * (code % 2)).astype(np.int64),
    }


def grr_adaptive(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    return {"k": target.pick(n, rng), "v": kept_signs(_pckv(mech), target, n, rng)}


GRR_GENERATORS: dict[str, FakeGenerator] = {"m2ga": grr_m2ga, "rma": grr_rma, "adaptive": grr_adaptive}


# ---------------------------------------------------------------------- PCKV-UE
def ue_m2ga(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    bits = np.zeros((n, mech.d), dtype=bool)
    bits[:, target.keys] = True
    none = np.zeros_like(bits)
    pos, neg = (bits, none) if target.sign > 0 else (none, bits)
    return {"pos": pack_bits(pos), "neg": pack_bits(neg)}


def ue_rma(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    u = rng.integers(0, 3, size=(n, mech.d))
    return {"pos": pack_bits(u == 1), "neg": pack_bits(u == 2)}


def nonzero_counts(batch: ReportBatch, d: int) -> IntArray:
    """Non-zero coordinates per PCKV-UE report (set bits of ``pos`` and ``neg``)."""
    pos = np.unpackbits(batch["pos"], axis=1, count=d, bitorder="little")
    neg = np.unpackbits(batch["neg"], axis=1, count=d, bitorder="little")
    return np.asarray(pos.sum(axis=1) + neg.sum(axis=1), dtype=np.int64)


def ue_adaptive(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    m = _pckv(mech)
    d, r = m.d, target.keys.size
    holders = KVData.from_single_key(d, target.pick(n, rng), np.full(n, target.mean))
    k = nonzero_counts(m.perturb_many(holders, rng), d)
    on_target = np.minimum(k, r)
    # a uniform order of the targets, then of the other keys, per fake
    others = np.setdiff1d(np.arange(d, dtype=np.int64), target.keys)
    t_order = target.keys[np.argsort(rng.random((n, r)), axis=1)]
    o_order = others[np.argsort(rng.random((n, others.size)), axis=1)]
    order = np.concatenate([t_order, o_order], axis=1)
    rank = np.arange(d)[None, :]
    head = rank < r  # the first r places of ``order`` are the targets
    chosen = np.where(head, rank < on_target[:, None], rank < (r + k - on_target)[:, None])
    fair = np.where(rng.random((n, d)) < 0.5, 1, -1)
    signs = np.where(head, kept_signs(m, target, n * d, rng).reshape(n, d), fair)
    rows = np.repeat(np.arange(n), d).reshape(n, d)
    pos = np.zeros((n, d), dtype=bool)
    neg = np.zeros((n, d), dtype=bool)
    pos[rows[chosen & (signs > 0)], order[chosen & (signs > 0)]] = True
    neg[rows[chosen & (signs < 0)], order[chosen & (signs < 0)]] = True
    return {"pos": pack_bits(pos), "neg": pack_bits(neg)}


UE_GENERATORS: dict[str, FakeGenerator] = {"m2ga": ue_m2ga, "rma": ue_rma, "adaptive": ue_adaptive}
