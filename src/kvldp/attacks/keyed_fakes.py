"""Fakes against the key-sampled mechanisms: PrivKV, F2M, KVUE, KVOH, KVUE over t keys, PrivKVM.

A genuine report is (j, z): a uniform key j and a symbol z drawn from P[z | state of j].
The ``unbiased`` estimator of key j is theta_j = A counts_j / M_j (A P = I), its frequency
theta_0 + theta_2 and its mean (theta_2 - theta_0) / (theta_0 + theta_2). A report (t, z)
therefore moves key t's estimated count of <t, +1> holders by A[POS, z] and nothing else,
so the maximal-gain report is

    j = a uniform target t,   z* = argmax_z A[POS, z]

(A[NEG, z] for m* < 0), ties broken by the larger mean weight A[POS, z] - A[NEG, z] and then
the larger frequency weight A[POS, z] + A[NEG, z]. For KVUE and PrivKV z* is the state
<1, +1> itself; for F2M the report (k' = 1, v' = +1); for KVOH the pattern with only the
<1, +1> bit set (the pattern with both held-state bits set adds more frequency but no mean).
KVUE over t keys: the report's keys include the targets (min(t, r) of them, the rest
uniform others) and its joint symbol has digit z* at every target and "absent" elsewhere.
PrivKVM's later rounds spend nothing on the key bit (P is singular), so its fakes send
<1, +1> (Wu et al.'s maximal gain for PrivKVM) in every round.

RMA: j (or the key set) uniform, z uniform over the symbols. Adaptive: j a uniform target
and z drawn from the genuine client on the state of <t, m*> — the target's symbol
counts are those of genuine holders of <t, m*>, so its estimated states stay
non-negative and its mean inside [-1, 1]; only the number of reports about the target
rises (by beta/(1-beta) n/r against n/d).
"""

from __future__ import annotations

import numpy as np

from kvldp.attacks.target import FakeGenerator, Target
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import ReportBatch
from kvldp.common.mechanisms import Mechanism
from kvldp.common.mechanisms.keysampled import ABSENT, NEG, POS, KeySampledMechanism
from kvldp.common.mechanisms.kvue_multi import KVUEMulti, sample_key_sets
from kvldp.common.mechanisms.privkv import lpp_perturb
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.common.mechanisms.privkvm_rounds import means_digest
from kvldp.common.primitives import FloatArray, IntArray, disc


def _state(target: Target) -> int:
    return POS if target.sign > 0 else NEG


def best_symbol(inverse: FloatArray, state: int) -> int:
    """z* = argmax_z A[state, z], ties by the mean weight, then the frequency weight."""
    a = np.asarray(inverse, dtype=np.float64)
    sign = 1.0 if state == POS else -1.0
    mean_w = sign * (a[POS] - a[NEG])
    freq_w = a[POS] + a[NEG]
    order = np.lexsort((-np.round(freq_w, 9), -np.round(mean_w, 9), -np.round(a[state], 9)))
    return int(order[0])


def _keysampled(mech: Mechanism) -> KeySampledMechanism:
    assert isinstance(mech, KeySampledMechanism)
    return mech


def target_states(target: Target, n: int, rng: np.random.Generator) -> IntArray:
    """State codes of n holders of value m*: Disc(m*) as the genuine client applies it."""
    return np.where(disc(np.full(n, target.mean), rng) > 0, POS, NEG).astype(np.int64)


def m2ga(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    m = _keysampled(mech)
    z = best_symbol(m.linear_inverse(), _state(target))
    return {"j": target.pick(n, rng), m.symbol_field: np.full(n, z, dtype=np.int64)}


def rma(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    m = _keysampled(mech)
    return {
        "j": rng.integers(0, m.d, size=n, dtype=np.int64),
        m.symbol_field: rng.integers(0, m.n_symbols, size=n, dtype=np.int64),
    }


def adaptive(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    m = _keysampled(mech)
    j = target.pick(n, rng)
    return {"j": j, m.symbol_field: m._perturb_states(target_states(target, n, rng), rng)}


GENERATORS: dict[str, FakeGenerator] = {"m2ga": m2ga, "rma": rma, "adaptive": adaptive}


# ---------------------------------------------------------------------- KVUE over t keys
def _multi(mech: Mechanism) -> KVUEMulti:
    assert isinstance(mech, KVUEMulti)
    return mech


def key_sets_with_targets(d: int, t: int, target: Target, n: int, rng: np.random.Generator) -> IntArray:
    """n sorted key sets of size t holding min(t, r) targets (uniform among them) and
    uniform non-targets for the rest."""
    r = target.keys.size
    take = min(t, r)
    chosen = target.keys[np.argsort(rng.random((n, r)), axis=1)[:, :take]]
    if t > take:
        others = np.setdiff1d(np.arange(d, dtype=np.int64), target.keys)
        extra = others[sample_key_sets(n, others.size, t - take, rng)]
        chosen = np.concatenate([chosen, extra], axis=1)
    return np.sort(chosen, axis=1).astype(np.int64)


def _joint(keys: IntArray, target: Target, digits: IntArray) -> IntArray:
    """Joint symbol with ``digits[u]`` at target positions of row u and 'absent' elsewhere."""
    is_target = np.isin(keys, target.keys)
    per = np.where(is_target, digits[:, None], ABSENT)
    return np.asarray((per * 3 ** np.arange(keys.shape[1])[None, :]).sum(axis=1), dtype=np.int64)


def _multi_batch(m: KVUEMulti, keys: IntArray, symbols: IntArray) -> ReportBatch:
    out: ReportBatch = {name: keys[:, i] for i, name in enumerate(m.key_fields())}
    out[m.symbol_field] = symbols
    return out


def multi_m2ga(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    m = _multi(mech)
    keys = key_sets_with_targets(m.d, m.t, target, n, rng)
    z = best_symbol(m.linear_inverse(), _state(target))
    return _multi_batch(m, keys, _joint(keys, target, np.full(n, z, dtype=np.int64)))


def multi_rma(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    m = _multi(mech)
    keys = sample_key_sets(n, m.d, m.t, rng)
    return _multi_batch(m, keys, rng.integers(0, m.n_joint, size=n, dtype=np.int64))


def multi_adaptive(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> ReportBatch:
    """Keys as in M2GA; the joint symbol the genuine client draws for a device holding
    <t, m*> at every target of its set (each with its own Disc) and nothing else."""
    m = _multi(mech)
    keys = key_sets_with_targets(m.d, m.t, target, n, rng)
    is_target = np.isin(keys, target.keys)
    states = np.where(is_target, target_states(target, keys.size, rng).reshape(keys.shape), ABSENT)
    joint = (states * 3 ** np.arange(m.t)[None, :]).sum(axis=1).astype(np.int64)
    return _multi_batch(m, keys, m._perturb_states(joint, rng))


MULTI_GENERATORS: dict[str, FakeGenerator] = {
    "m2ga": multi_m2ga,
    "rma": multi_rma,
    "adaptive": multi_adaptive,
}


# ---------------------------------------------------------------------- PrivKVM rounds
def privkvm_reports(
    m: PrivKVM,
    attack: str,
    n: int,
    target: Target,
    rng: np.random.Generator,
    round_index: int,
    published: FloatArray,
) -> ReportBatch:
    """One round's fake reports, stamped with the round and the digest of its published means."""
    p1 = float(m.p1[round_index])
    if attack == "m2ga":
        j = target.pick(n, rng)
        s = np.full(n, _state(target), dtype=np.int64)
    elif attack == "rma":
        j = rng.integers(0, m.d, size=n, dtype=np.int64)
        s = rng.integers(0, 3, size=n, dtype=np.int64)
    elif attack == "adaptive":
        j = target.pick(n, rng)
        s = lpp_perturb(target_states(target, n, rng), p1, m.p2, rng, published[j])
    else:  # rkva: the genuine client of this round on <t, m*>
        users = KVData.from_single_key(m.d, target.pick(n, rng), np.full(n, target.mean))
        return m.perturb_round(users, rng, round_index, published)
    return {
        "r": np.full(n, round_index, dtype=np.int64),
        "md": np.full(n, means_digest(round_index, published), dtype=np.int64),
        "j": j,
        "s": s,
    }
