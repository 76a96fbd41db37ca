"""De-duplication by report id: the last ``horizon`` ids of a partition.

**Rule.** A report whose non-zero id occurs among the ``horizon`` id-tagged reports
before it in its partition is a duplicate. The rule looks back a fixed number of
reports, so it gives the same answer however the stream is cut into fetches, across
restarts, and in an offline replay.

**Structure.** The ids live in a ring, oldest first (what checkpoints store), and in an
open-addressing hash table from id to the sequence number of its latest occurrence,
rebuilt from the ring on load. Lookups and inserts are vectorised rounds of linear
probing over the whole batch — no Python per report, no sort of the history. The slot
hash is multiplicative with a secret odd multiplier, so report ids chosen by an
attacker cannot be steered into one probe chain. Entries older than the horizon are
ignored by the distance check and dropped when the table is rebuilt, every ``horizon``
inserts (so a rebuild costs one extra placement per insert). The table has at least
``4 x horizon`` slots, so it is at most half full and probe chains stay short (about 72
bytes per unit of horizon with the ring), and is allocated on the first id: collections
without ids pay nothing.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]


@dataclass(frozen=True)
class Probe:
    """:meth:`RecentIds.duplicates`' answer, and what it learnt for the insert after."""

    #: per id: a duplicate under the rule
    duplicates: NDArray[np.bool_]
    version: int
    #: per id: the slot holding it, or the free slot that ends its probe chain
    slots: I64
    found: NDArray[np.bool_]
    #: no id occurs twice in the batch (each then has its own slot)
    distinct: bool


#: the slot hash multiplier (odd, secret, per process)
_MULTIPLIER = np.uint64(secrets.randbits(64) | 1)


class RecentIds:
    """The ring and the hash table of one partition's recent report ids."""

    def __init__(self, horizon: int, ids: U64 | None = None) -> None:
        self.horizon = horizon
        self.count = 0  # tagged reports seen: the sequence number of the next one
        self._ring = np.zeros(0, dtype=np.uint64)
        self._keys = np.zeros(0, dtype=np.uint64)
        self._seqs = np.zeros(0, dtype=np.int64)
        self._since_rebuild = 0
        self._version = 0  # bumped by every change of the table: older probes are stale
        if ids is not None and ids.size:
            self.insert(np.asarray(ids, dtype=np.uint64)[-horizon:])

    # ------------------------------------------------------------------ state
    def ordered(self) -> U64:
        """The last ``min(count, horizon)`` ids, oldest first (what a checkpoint keeps)."""
        if not self._ring.size:
            return np.zeros(0, dtype=np.uint64)
        held = min(self.count, self.horizon)
        end = self.count % self.horizon
        return np.roll(self._ring, -end)[self.horizon - held :] if held else self._ring[:0].copy()

    def _allocate(self) -> None:
        self._version += 1  # a probe of the unallocated table has no slots
        # at most 2 x horizon entries between rebuilds, kept under 1/2 load
        bits = max(4, math.ceil(math.log2(4 * self.horizon)))
        self._shift = np.uint64(64 - bits)
        self._mask = (1 << bits) - 1
        self._keys = np.zeros(1 << bits, dtype=np.uint64)
        self._seqs = np.zeros(1 << bits, dtype=np.int64)
        self._ring = np.zeros(self.horizon, dtype=np.uint64)

    def _slots(self, ids: U64) -> I64:
        return ((ids * _MULTIPLIER) >> self._shift).astype(np.int64)

    # ------------------------------------------------------------------ queries
    def _probe(self, ids: U64) -> tuple[I64, I64]:
        """(sequence number of each id's latest occurrence or -1, the slot where its probe
        ended: the id's own slot, or the empty slot that ends its chain)."""
        out = np.full(ids.shape[0], -1, dtype=np.int64)
        if not self._keys.size or not ids.size:
            return out, np.full(ids.shape[0], -1, dtype=np.int64)
        slot = self._slots(ids)
        pending = np.arange(ids.shape[0])
        while pending.size:
            s = slot[pending]
            k = self._keys[s]
            hit = k == ids[pending]
            out[pending[hit]] = self._seqs[s[hit]]
            more = ~hit & (k != 0)
            pending = pending[more]
            slot[pending] = (s[more] + 1) & self._mask
        return out, slot

    def duplicates(self, ids: U64) -> Probe:
        """Which of the next tagged reports, with these ids (non-zero, in order), are
        duplicates under the rule (pure: :meth:`insert` records them afterwards, reusing
        the probe if nothing changed in between)."""
        n = ids.shape[0]
        seq = self.count + np.arange(n, dtype=np.int64)
        previous, slots = self._probe(ids)
        dup = (previous >= 0) & (seq - previous <= self.horizon)
        ordered = np.sort(ids)
        repeated = n > 1 and bool((ordered[1:] == ordered[:-1]).any())
        if repeated:  # an id repeated inside the batch
            order = np.argsort(ids, kind="stable")
            again = np.flatnonzero(ids[order][1:] == ids[order][:-1]) + 1
            gap = order[again] - order[again - 1]
            dup[order[again[gap <= self.horizon]]] = True
        return Probe(dup, self._version, slots, previous >= 0, not repeated)

    # ------------------------------------------------------------------ updates
    def insert(self, ids: U64, probe: Probe | None = None) -> None:
        """Record the next tagged reports' ids (duplicates included), in order. ``probe``
        is :meth:`duplicates`' answer for these ids; it saves probing again when no other
        insert happened since."""
        n = ids.shape[0]
        if not n or self.horizon <= 0:
            return
        if not self._keys.size:
            self._allocate()
        seq = self.count + np.arange(n, dtype=np.int64)
        tail = ids[-self.horizon :]
        positions = (self.count + n - tail.shape[0] + np.arange(tail.shape[0])) % self.horizon
        self._ring[positions] = tail
        self.count += n
        self._since_rebuild += n
        if self._since_rebuild > self.horizon:
            self._rebuild()
        elif probe is not None and probe.version == self._version and probe.slots.shape[0] == n:
            self._place_probed(ids, seq, probe)
        else:
            self._place(ids, seq)
        self._version += 1

    def _place_probed(self, ids: U64, seq: I64, probe: Probe) -> None:
        """Place ids whose probe ended at their slot or at a free one: claim the free slots
        (one id wins a slot claimed twice); the losers probe again from the start."""
        final = probe.slots.copy()
        new = np.flatnonzero(~probe.found)
        if new.size:
            self._keys[final[new]] = ids[new]
            lost = new[self._keys[final[new]] != ids[new]]
            if lost.size:
                self._place(ids[lost], seq[lost])
                keep = np.ones(ids.shape[0], dtype=bool)
                keep[lost] = False
                final, seq = final[keep], seq[keep]
        if probe.distinct:  # one slot per id: a plain store is the latest sequence number
            self._seqs[final] = seq
        else:
            np.maximum.at(self._seqs, final, seq)

    def _place(self, ids: U64, seq: I64) -> None:
        slot = self._slots(ids)
        final = np.empty(ids.shape[0], dtype=np.int64)
        pending = np.arange(ids.shape[0])
        while pending.size:
            s = slot[pending]
            k = self._keys[s]
            found = k == ids[pending]
            final[pending[found]] = s[found]
            free = pending[k == 0]
            if free.size:
                self._keys[slot[free]] = ids[free]  # several may claim a slot: one id wins
                won = self._keys[slot[free]] == ids[free]
                final[free[won]] = slot[free[won]]
                lost = free[~won]
            else:
                lost = free
            rest = np.concatenate([pending[~found & (k != 0)], lost])
            slot[rest] = (slot[rest] + 1) & self._mask
            pending = rest
        np.maximum.at(self._seqs, final, seq)

    def _rebuild(self) -> None:
        """Drop everything older than the horizon: re-insert the ring alone."""
        self._keys[:] = 0
        self._seqs[:] = 0
        held = self.ordered()
        self._since_rebuild = 0
        self._place(held, self.count - held.shape[0] + np.arange(held.shape[0], dtype=np.int64))
