"""The cell space of conditional queries: joint states and product sets of them.

A user's joint state (s_1, ..., s_d) takes the state code s_i per key (docs/mechanisms.md, *Primitives*)
(0 = <1,-1>, 1 = absent, 2 = <1,+1>) and is one *cell* of the 3^d base-3 index, key 1
(wire key 0) the most significant digit. This module maps users onto those cells (their
states, or the distribution of their states under Disc) and defines :class:`ProductSet`,
the product-set form T_1 x ... x T_d of the counting operators that every answer in
:mod:`kvldp.common.estimation.conditional.answer` is a ratio of. :mod:`~kvldp.common.estimation.conditional.query`
builds the product sets of one query from its condition. :class:`InvalidQuery`, the
error of every malformed query, is defined here, in the lowest layer that raises it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.errors import KvldpError
from kvldp.common.primitives import FloatArray, IntArray, disc

#: state codes (s = k v* + 1; docs/mechanisms.md, *Primitives*); the base-3 digits of a joint state
NEG, ABSENT, POS = 0, 1, 2
ALL_STATES = (NEG, ABSENT, POS)
PRESENT_STATES = (NEG, POS)
#: joint-state probabilities evaluated per block of users (bounds memory at n x 3^d floats)
_PROB_CHUNK_CELLS = 1 << 21


class InvalidQuery(KvldpError):
    """A conditional query is malformed: unknown or repeated key, the target among its own
    conditions, a value other than 0/1, or an (alpha, beta) encoding with beta not inside alpha."""


# --------------------------------------------------------------------------- joint states
def joint_states(users: KVData, rng: np.random.Generator) -> IntArray:
    """(n, d) state codes of every user: 1 where a key is absent, and for each held key
    Disc applied independently to its value (0 for -1, 2 for +1), as IOH's client does (docs/mechanisms.md, *IOH*)."""
    states = np.full((users.n_users, users.d), ABSENT, dtype=np.int64)
    rows = np.repeat(np.arange(users.n_users, dtype=np.int64), users.sizes)
    states[rows, users.keys] = np.where(disc(users.values, rng) > 0, POS, NEG)
    return states


def joint_index(states: IntArray) -> IntArray:
    """Base-3 index I = sum_i 3^(d-i) s_i of joint states (..., d): wire key 0 (the paper's
    key 1) is the most significant digit, so Sun et al. 2019's concatenated digits read as the index."""
    d = states.shape[-1]
    weights = 3 ** np.arange(d - 1, -1, -1, dtype=np.int64)
    return np.asarray(states.astype(np.int64) @ weights, dtype=np.int64)


def state_probabilities(users: KVData) -> FloatArray:
    """(n, d, 3) probability of each state code per user and key: an absent key is state 1
    for sure, a held value v is 2 with probability (1+v)/2 and 0 otherwise (Disc)."""
    present, values = users.to_dense()
    probs = np.zeros((users.n_users, users.d, 3))
    probs[:, :, NEG] = np.where(present, (1.0 - values) / 2.0, 0.0)
    probs[:, :, ABSENT] = np.where(present, 0.0, 1.0)
    probs[:, :, POS] = np.where(present, (1.0 + values) / 2.0, 0.0)
    return probs


def joint_state_probabilities(users: KVData) -> FloatArray:
    """(n, 3^d) distribution of each user's joint state over the base-3 index.

    Disc acts independently per key, so a user's joint distribution is the Kronecker
    product of its per-key state distributions, with key 1 the slowest-varying factor.
    """
    probs = state_probabilities(users)
    joint = probs[:, 0, :]
    for key in range(1, users.d):
        joint = (joint[:, :, None] * probs[:, key, None, :]).reshape(users.n_users, -1)
    return np.asarray(joint, dtype=np.float64)


def expected_joint_counts(users: KVData) -> FloatArray:
    """E[A]: the expected number of users in each joint state (3^d,), in blocks of users."""
    total = np.zeros(3**users.d)
    for block in users.chunks(max(1, _PROB_CHUNK_CELLS // 3**users.d)):
        total += joint_state_probabilities(block).sum(axis=0)
    return total


# --------------------------------------------------------------------------- product sets
@dataclass(frozen=True)
class ProductSet:
    """T_1 x ... x T_d: per key (wire order) the allowed state codes, a non-empty subset of
    {0, 1, 2}. The counting operators of Sun et al. 2019, Eq. 10-14, are all of this form
    (docs/mechanisms.md, *Counting operators*)."""

    allowed: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.allowed:
            raise InvalidQuery("a product set needs at least one key")
        normalised = []
        for key, states in enumerate(self.allowed):
            codes = tuple(sorted({int(s) for s in states}))
            if not codes or any(s not in ALL_STATES for s in codes):
                raise InvalidQuery(
                    f"key {key} of a product set allows {states!r}; use a non-empty subset of {{0,1,2}}"
                )
            normalised.append(codes)
        object.__setattr__(self, "allowed", tuple(normalised))

    @classmethod
    def everything(cls, d: int) -> ProductSet:
        """All 3^d joint states."""
        return cls(tuple(ALL_STATES for _ in range(d)))

    @property
    def d(self) -> int:
        return len(self.allowed)

    @property
    def size(self) -> int:
        """|T| = prod_i |T_i|, the number of cells the set sums."""
        return math.prod(len(states) for states in self.allowed)

    def cells(self) -> IntArray:
        """The base-3 indices of the set's cells, ascending (key 1 is the leading digit);
        read-only, computed once per set."""
        return _cells(self)

    def restrict(self, key: int, states: Iterable[int]) -> ProductSet:
        """The same set with key ``key`` limited to ``states``."""
        allowed = list(self.allowed)
        allowed[key] = tuple(states)
        return ProductSet(tuple(allowed))

    def intersection(self, other: ProductSet) -> ProductSet | None:
        """The product of per-key intersections, or None when the sets are disjoint."""
        if other.d != self.d:
            raise InvalidQuery(f"product sets over {self.d} and {other.d} keys cannot be intersected")
        return _intersection(self, other)


# The answers of one query recur in every estimate of every collection: the set algebra
# below is computed once per set (or pair of sets), as product sets are immutable. A set's
# cells are up to 3^d indices (d <= 10: 472 KB), so at most 256 sets keep theirs (about
# 120 MB at worst); intersections are a few small tuples each.
@functools.lru_cache(maxsize=256)
def _cells(s: ProductSet) -> IntArray:
    index = np.zeros(1, dtype=np.int64)
    for states in s.allowed:
        index = (index[:, None] * 3 + np.asarray(states, dtype=np.int64)[None, :]).ravel()
    index.setflags(write=False)
    return index


@functools.lru_cache(maxsize=4096)
def _intersection(a: ProductSet, b: ProductSet) -> ProductSet | None:
    common = tuple(tuple(sorted(set(x) & set(y))) for x, y in zip(a.allowed, b.allowed, strict=True))
    if any(not states for states in common):
        return None
    return ProductSet(common)
