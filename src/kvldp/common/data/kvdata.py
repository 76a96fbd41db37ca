"""Users' key-value data in compressed sparse rows: the input of every client perturbation.

A device holds a handful of pairs out of a domain of ``d`` keys; a simulated population
holds millions. CSR (``indptr``/``keys``/``values``) serves both with one vectorised code
path: the single-device ``perturb`` is ``perturb_many`` on a one-row ``KVData``.

Validation lives here, once: values must be finite and inside [-1, 1] and keys inside
[0, d), unique per user. Mechanisms never clip silently; the SDK normalises raw values
into [-1, 1] before they reach this class.

A KVData is immutable (frozen, and nothing writes into its arrays: every operation that
changes users builds a new one), so a summary of all its pairs — the per-key totals
behind the truth and the key-sampled mechanisms' expected statistics — is computed once
and kept on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from kvldp.common.errors import KvldpError
from kvldp.common.primitives import FloatArray, IntArray
from kvldp.common.typed_fields import integer


class InvalidUserData(KvldpError):
    """A user's pairs violate the data model (bad key index or value outside [-1, 1])."""


def _not_an_index(key: object) -> InvalidUserData:
    return InvalidUserData(f"key {key!r} is not an integer index")


@dataclass(frozen=True, eq=False)
class KVData:
    """Key-value pairs of ``n_users`` users over ``d`` keys, rows sorted by key."""

    d: int
    indptr: IntArray
    keys: IntArray
    values: FloatArray

    def __post_init__(self) -> None:
        if self.d < 1:
            raise InvalidUserData(f"the key domain must hold at least one key, got d={self.d}")
        if self.indptr.ndim != 1 or self.indptr.shape[0] < 1 or self.indptr[0] != 0:
            raise InvalidUserData("indptr must be a 1-D array starting at 0")
        if np.any(np.diff(self.indptr) < 0) or self.indptr[-1] != self.keys.shape[0]:
            raise InvalidUserData("indptr must be non-decreasing and end at the number of pairs")
        if self.keys.shape != self.values.shape:
            raise InvalidUserData("keys and values must have the same length")
        if self.keys.size:
            bad = np.flatnonzero((self.keys < 0) | (self.keys >= self.d))
            if bad.size:
                i = int(bad[0])
                raise InvalidUserData(
                    f"key index {int(self.keys[i])} of user {self._user_of(i)} is outside [0, {self.d})"
                )
            bad = np.flatnonzero(~np.isfinite(self.values) | (np.abs(self.values) > 1.0))
            if bad.size:
                i = int(bad[0])
                raise InvalidUserData(
                    f"value {float(self.values[i])!r} for key {int(self.keys[i])} of user {self._user_of(i)} "
                    "is outside [-1, 1] or NaN; normalise values into [-1, 1] before perturbing "
                    "(the producer SDK does this from the collection's value_range)"
                )
            codes = self._pair_codes
            if np.any(np.diff(codes) <= 0):
                bad_pos = int(np.flatnonzero(np.diff(codes) <= 0)[0]) + 1
                raise InvalidUserData(
                    f"user {self._user_of(bad_pos)} lists key {int(self.keys[bad_pos])} twice "
                    "or out of order (keys must be unique and sorted)"
                )

    @cached_property
    def _pair_codes(self) -> IntArray:
        """user * d + key of every pair: ascending in a valid KVData (what :meth:`lookup`
        searches, computed once per population)."""
        rows = np.repeat(np.arange(self.n_users, dtype=np.int64), self.sizes)
        codes = rows * self.d + self.keys
        codes.setflags(write=False)
        return codes

    def _user_of(self, pair_index: int) -> int:
        return int(np.searchsorted(self.indptr, pair_index, side="right")) - 1

    @property
    def n_users(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def sizes(self) -> IntArray:
        """Number of pairs each user holds."""
        return np.diff(self.indptr)

    @classmethod
    def from_pairs(cls, d: int, users: Iterable[Mapping[int, float]]) -> KVData:
        """Build from one mapping key -> value per user (keys are wire indices)."""
        indptr = [0]
        keys: list[int] = []
        values: list[float] = []
        for pairs in users:
            for k in sorted(pairs):
                keys.append(integer(k, _not_an_index))
                values.append(float(pairs[k]))
            indptr.append(len(keys))
        return cls(
            d=d,
            indptr=np.asarray(indptr, dtype=np.int64),
            keys=np.asarray(keys, dtype=np.int64),
            values=np.asarray(values, dtype=np.float64),
        )

    @classmethod
    def from_dense(cls, present: NDArray[np.bool_], values: FloatArray) -> KVData:
        """Build from an (n, d) presence mask and an (n, d) value matrix."""
        if present.shape != values.shape or present.ndim != 2:
            raise InvalidUserData("present and values must both be (n_users, d) matrices")
        rows, cols = np.nonzero(present)
        indptr = np.zeros(present.shape[0] + 1, dtype=np.int64)
        np.cumsum(present.sum(axis=1), out=indptr[1:])
        return cls(
            d=int(present.shape[1]),
            indptr=indptr,
            keys=cols.astype(np.int64),
            values=np.asarray(values[rows, cols], dtype=np.float64),
        )

    @classmethod
    def from_single_key(cls, d: int, keys: IntArray, values: FloatArray) -> KVData:
        """Every user holds exactly one pair (keys[u], values[u]); keys < 0 mean no pair."""
        has = keys >= 0
        indptr = np.zeros(keys.shape[0] + 1, dtype=np.int64)
        np.cumsum(has, out=indptr[1:])
        return cls(d=d, indptr=indptr, keys=keys[has].astype(np.int64), values=values[has].astype(np.float64))

    def rows(self, start: int, stop: int) -> KVData:
        """Users ``start`` to ``stop`` (exclusive) as a new KVData sharing no state."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        return KVData(
            d=self.d,
            indptr=self.indptr[start : stop + 1] - lo,
            keys=self.keys[lo:hi],
            values=self.values[lo:hi],
        )

    def take(self, index: IntArray) -> KVData:
        """The users at ``index`` (in that order) as a new KVData."""
        sizes = self.sizes[index]
        indptr = np.zeros(index.shape[0] + 1, dtype=np.int64)
        np.cumsum(sizes, out=indptr[1:])
        pairs = np.repeat(self.indptr[:-1][index] - indptr[:-1], sizes) + np.arange(indptr[-1])
        return KVData(self.d, indptr, self.keys[pairs], self.values[pairs])

    def chunks(self, max_users: int) -> Iterator[KVData]:
        """Consecutive row blocks of at most ``max_users`` users (bounds simulator memory); a
        population that fits in one block is its own block."""
        for start in range(0, self.n_users, max_users):
            stop = min(start + max_users, self.n_users)
            yield self if (start, stop) == (0, self.n_users) else self.rows(start, stop)

    def lookup(self, users: IntArray, keys: IntArray) -> tuple[NDArray[np.bool_], FloatArray]:
        """For each (user, key): whether the user holds the key, and its value (0 if absent)."""
        codes = self._pair_codes
        query = users.astype(np.int64) * self.d + keys.astype(np.int64)
        pos = np.searchsorted(codes, query)
        pos_c = np.minimum(pos, max(codes.shape[0] - 1, 0))
        held = (pos < codes.shape[0]) & (codes[pos_c] == query) if codes.size else np.zeros(query.shape, bool)
        vals = np.where(held, self.values[pos_c] if codes.size else 0.0, 0.0)
        return held, vals

    def to_dense(self) -> tuple[NDArray[np.bool_], FloatArray]:
        """(n, d) presence mask and value matrix (absent entries hold 0)."""
        present = np.zeros((self.n_users, self.d), dtype=bool)
        values = np.zeros((self.n_users, self.d), dtype=np.float64)
        rows = np.repeat(np.arange(self.n_users), self.sizes)
        present[rows, self.keys] = True
        values[rows, self.keys] = self.values
        return present, values

    def key_totals(self) -> tuple[FloatArray, FloatArray]:
        """Per key: how many users hold it and the sum of their values (read-only arrays,
        computed once per population)."""
        return self._key_totals

    @cached_property
    def _key_totals(self) -> tuple[FloatArray, FloatArray]:
        counts = np.bincount(self.keys, minlength=self.d).astype(np.float64)
        sums = np.asarray(np.bincount(self.keys, weights=self.values, minlength=self.d), dtype=np.float64)
        counts.setflags(write=False)
        sums.setflags(write=False)
        return counts, sums

    def truth(self) -> tuple[FloatArray, FloatArray]:
        """Non-private frequency (fraction of users holding each key) and mean per key.

        The mean of a key nobody holds is NaN (undefined), never 0.
        """
        counts, sums = self.key_totals()
        n = max(self.n_users, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        return counts / n, mean
