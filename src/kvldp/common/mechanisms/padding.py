"""PCKV's Padding-and-Sampling, shared by PCKV and the frequency oracles (docs/mechanisms.md,
*Padding and sampling*).

A user holding the set S draws one of max(|S|, ell) slots uniformly: the first |S|
slots are its pairs, the others are padding. PCKV fills padding with ell distinct dummy
keys; the frequency oracles with one ``none`` item. Either way a real key is sampled
with probability 1 / max(|S|, ell), which is what makes ell * (sampled share) unbiased
for users holding at most ell keys.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.kvdata import KVData
from kvldp.common.primitives import FloatArray, IntArray


def sample_slots(
    users: KVData, ell: int, rng: np.random.Generator
) -> tuple[NDArray[np.bool_], IntArray, FloatArray]:
    """Per user: whether a real pair was drawn, its key and its value (0 for padding)."""
    sizes = users.sizes
    slot = np.asarray(rng.integers(0, np.maximum(sizes, ell)), dtype=np.int64)
    real = slot < sizes
    if not users.keys.size:
        return real, np.zeros(users.n_users, dtype=np.int64), np.zeros(users.n_users)
    idx = np.where(real, users.indptr[:-1] + slot, 0)
    return real, users.keys[idx], np.where(real, users.values[idx], 0.0)


def slot_weights(users: KVData, ell: int) -> tuple[FloatArray, FloatArray]:
    """Exact Pr[the user samples pair i] per stored pair, and Pr[padding] per user."""
    slots = np.maximum(users.sizes, ell).astype(np.float64)
    per_pair = np.repeat(1.0 / slots, users.sizes)
    return per_pair, np.maximum(ell - users.sizes, 0) / slots
