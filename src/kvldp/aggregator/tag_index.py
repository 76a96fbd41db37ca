"""Dense row numbers for 64-bit device tags, looked up a whole fetch at a time, and
counters by row.

The per-device state of a partition (the device book, the budget ledger's windows) keeps
one row per device in plain arrays; :class:`TagIndex` says which row a tag has, and
:class:`RowCounts` counts per row in 4 bytes. Rows are
handed out in the order tags first arrive, so a new device is appended and nothing moves.
The index is an open-addressing hash table of row numbers (linear probing; a multiplicative
hash with a secret odd multiplier, so tags cannot be steered into one probe chain), at most
half full. A lookup or an insert is a few vectorised probing rounds over the batch: its
cost depends on the batch, not on the number of devices held. When the table would pass
half full it is rebuilt with three slots per tag, re-placing every tag once (amortised, a
constant per insert).

Memory: 8 bytes per tag in :attr:`TagIndex.tags` (and up to a quarter more room to grow)
and 4 bytes per table slot, 2 to 3 slots per tag: 16 to 22 bytes per device.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
from numpy.typing import NDArray

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]

#: the table's smallest size (slots)
MIN_TABLE = 16
#: a table slot that holds no row
EMPTY = -1
#: the slot hash multiplier (odd, secret, per process)
_MULTIPLIER = np.uint64(secrets.randbits(64) | 1)


class TagIndex:
    """Tag to row number; rows ``0 .. len - 1`` in first-arrival order."""

    def __init__(self, tags: U64 | None = None) -> None:
        self._tags = np.zeros(0, dtype=np.uint64)
        self._size = 0
        self._table = np.full(MIN_TABLE, EMPTY, dtype=np.int32)
        if tags is not None:
            self.extend(tags)

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes held (tags and table, with their room to grow)."""
        return int(self._tags.nbytes + self._table.nbytes)

    @property
    def tags(self) -> U64:
        """Every tag held, by row (a view: do not modify)."""
        return self._tags[: self._size]

    def _home(self, tags: U64) -> I64:
        """Each tag's home slot: the top 32 bits of its keyed hash, scaled to the table's
        size (a multiply and a shift, for a table of any size)."""
        top = (tags * _MULTIPLIER) >> np.uint64(32)
        return ((top * np.uint64(self._table.shape[0])) >> np.uint64(32)).astype(np.int64)

    def _next(self, slots: I64) -> I64:
        """The slot after each of ``slots`` (the table wraps around)."""
        after = slots + 1
        after[after == self._table.shape[0]] = 0
        return after

    def _probe(self, tags: U64) -> tuple[I64, I64]:
        """(each tag's row or -1, the table slot where its probe ended: its own slot, or
        the empty slot that ends its chain)."""
        rows = np.full(tags.shape[0], -1, dtype=np.int64)
        slot = self._home(tags)
        pending = np.arange(tags.shape[0])
        while pending.size:
            s = slot[pending]
            row = self._table[s]
            occupied = row != EMPTY
            hit = occupied.copy()
            hit[occupied] = self._tags[row[occupied]] == tags[pending[occupied]]
            rows[pending[hit]] = row[hit]
            more = occupied & ~hit
            pending = pending[more]
            slot[pending] = self._next(s[more])
        return rows, slot

    def find(self, tags: U64) -> I64:
        """The row of each tag, -1 for a tag not held."""
        if not tags.size or not self._size:
            return np.full(tags.shape[0], -1, dtype=np.int64)
        return self._probe(np.asarray(tags, dtype=np.uint64))[0]

    def add(self, tags: U64) -> I64:
        """The row of each tag, giving new rows (in order of first occurrence) to the tags
        not held yet."""
        tags = np.asarray(tags, dtype=np.uint64)
        rows = self.find(tags)
        absent = np.flatnonzero(rows < 0)
        if absent.size:
            fresh, first = np.unique(tags[absent], return_index=True)
            order = np.argsort(first, kind="stable")  # first-occurrence order
            start = self._size
            self._append(fresh[order])
            new_rows = np.empty(fresh.shape[0], dtype=np.int64)
            new_rows[order] = start + np.arange(fresh.shape[0], dtype=np.int64)
            rows[absent] = new_rows[np.searchsorted(fresh, tags[absent])]
        return rows

    def extend(self, tags: U64) -> None:
        """Hold ``tags`` as the next rows, in their order (:class:`ValueError` if one is
        held already or repeats): what a restore does, without :meth:`add`'s grouping."""
        fresh = np.asarray(tags, dtype=np.uint64)
        if not fresh.size:
            return
        ordered = np.sort(fresh)
        if bool((ordered[1:] == ordered[:-1]).any()) or int(self.find(fresh).max()) >= 0:
            raise ValueError("a tag index holds every tag once")
        self._append(fresh)

    def _append(self, fresh: U64) -> None:
        """Hold ``fresh`` (distinct, not held) as the next rows."""
        n = fresh.shape[0]
        self._tags = grown(self._tags, self._size, self._size + n, 0)
        self._tags[self._size : self._size + n] = fresh
        rows = np.arange(self._size, self._size + n, dtype=np.int64)
        self._size += n
        if 2 * self._size > self._table.shape[0]:
            # three slots per tag, down to two by the next resize
            self._table = np.full(max(3 * self._size, MIN_TABLE), EMPTY, dtype=np.int32)
            rows = np.arange(self._size, dtype=np.int64)  # re-place every tag
        self._place(rows)

    def _place(self, rows: I64) -> None:
        """Put rows (whose tags are distinct and not in the table) into free slots; two
        rows claiming one slot: one wins, the other probes on."""
        tags = self._tags[rows]
        slot = self._home(tags)
        pending = np.arange(rows.shape[0])
        while pending.size:
            s = slot[pending]
            free = self._table[s] == EMPTY
            claim = pending[free]
            self._table[slot[claim]] = rows[claim]
            won = np.zeros(pending.shape[0], dtype=bool)
            won[free] = self._table[slot[claim]] == rows[claim]
            pending = pending[~won]
            slot[pending] = self._next(slot[pending])


def grown(array: NDArray[Any], used: int, needed: int, blank: int) -> NDArray[Any]:
    """``array`` (its first ``used`` rows kept) with room for ``needed`` rows: itself if it
    has it, else a copy a quarter larger than needed, its new rows set to ``blank``.
    Growing by a quarter (not doubling) keeps the spare room of per-device arrays at most
    a fifth of what they hold, at an amortised cost of five copies per row."""
    if needed <= array.shape[0]:
        return array
    out = np.full((max(needed + needed // 4, MIN_TABLE), *array.shape[1:]), blank, dtype=array.dtype)
    out[:used] = array[:used]
    return out


#: the largest count a :class:`RowCounts` holds (it saturates there)
COUNT_MAX = 2**31 - 1


class RowCounts:
    """A count per row, 0 for a row never counted: 32-bit, saturating at :data:`COUNT_MAX`
    (a count that large only says "more than any limit"), grown as rows come."""

    def __init__(self, counts: I64 | None = None) -> None:
        held = np.zeros(0, np.int64) if counts is None else np.asarray(counts, np.int64)
        self._counts = np.minimum(held, COUNT_MAX).astype(np.int32)
        self._size = int(held.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self._counts.nbytes)

    @property
    def rows(self) -> int:
        """Rows counted so far (past them every count is 0)."""
        return self._size

    def values(self, rows: int) -> I64:
        """The counts of rows ``0 .. rows - 1``."""
        out = np.zeros(rows, np.int64)
        kept = min(rows, self._size)
        out[:kept] = self._counts[:kept]
        return out

    def get(self, rows: I64) -> I64:
        """The count of each row (0 for a row past those counted)."""
        out = np.zeros(rows.shape[0], np.int64)
        inside = rows < self._size
        out[inside] = self._counts[rows[inside]]
        return out

    def add(self, rows: I64, amounts: I64) -> None:
        """Add ``amounts`` to the counts of ``rows`` (repeats add up)."""
        if not rows.size:
            return
        distinct, where = np.unique(rows, return_inverse=True)
        added = np.bincount(where, weights=amounts, minlength=distinct.shape[0]).astype(np.int64)
        self._reach(int(distinct[-1]) + 1)
        total = self._counts[distinct].astype(np.int64) + added
        self._counts[distinct] = np.minimum(total, COUNT_MAX).astype(np.int32)

    def set(self, rows: I64, counts: I64) -> None:
        """Make the counts of ``rows`` (distinct) ``counts``."""
        if not rows.size:
            return
        if int(counts.min()) < 0:
            raise ValueError("a count is never negative")
        self._reach(int(rows.max()) + 1)
        self._counts[rows] = np.minimum(counts, COUNT_MAX).astype(np.int32)

    def _reach(self, needed: int) -> None:
        """Count rows ``0 .. needed - 1`` at least."""
        self._counts = grown(self._counts, self._size, needed, 0)
        self._size = max(self._size, needed)
