"""De-duplication by report id: a partition remembers the ids of a count *and* a time.

**Rule.** Each id-tagged report of a partition has a sequence number ``i`` (tagged
reports seen before it) and a *partition time* ``W_i``: the latest Kafka record time
among the tagged reports up to and including it (a running maximum, so it never goes
back, whatever the order producers stamped their records in). The report is a duplicate
when its non-zero id occurs at an earlier sequence number ``j`` that is still
*remembered*:

- ``i - j <= horizon`` (the last ``horizon`` tagged reports: the old count rule), or
- ``W_j >= W_i - window`` (the reports of the last ``window`` of partition time),

and in both cases ``i - j <= cap``. So a re-sent report is counted once when it comes
back within ``window`` of record time, at any report rate up to ``cap / window`` per
second; past that rate the oldest ids are forgotten first and the memory is the last
``cap`` tagged reports (never fewer than ``horizon``). The rule reads only the records
themselves, so it gives the same answer however the stream is cut into fetches, across
restarts, and in an offline replay. Because ``W`` is monotone, what is remembered is
always a suffix of the stream: every report's *floor* (the oldest remembered sequence
number) is one ``searchsorted`` over the held times.

**Structure.** The remembered ids and their partition times live in two growable
arrays, oldest first (what checkpoints store), and in an open-addressing hash table from
id to the sequence number of its latest occurrence, rebuilt from the arrays. Lookups and
inserts are vectorised rounds of linear probing over the whole batch — no Python per
report, no sort of the history. The slot hash is multiplicative with a secret odd
multiplier, so report ids chosen by an attacker cannot be steered into one probe chain.
Entries older than the floor are ignored by the floor check and dropped when the table
is rebuilt. A rebuild sizes the table (a power of two) for the held entries and a round
of inserts after them (half as many as held, at least :data:`MIN_ROUND`), at 2 slots per
entry or more. The table is rebuilt when the entries placed in it, forgotten ones
included, would fill more than half its slots, or when a round is over and what is held
asks for a table of another size (grown, or smaller once ids were forgotten). So it is
never more than half full and probe chains stay short, and a table whose size left room
takes more inserts before every id is placed again. Memory is about
100 bytes per remembered id at most (the arrays and the table), so ``rate x window``
ids, at most ``cap``; nothing is allocated before the first id.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]

#: fewest inserts between two rebuilds of the table (and its smallest sizing unit)
MIN_ROUND = 1024


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
    """The remembered report ids of one partition: arrays of ids and times, and a hash table.

    ``horizon`` ids are always remembered, ids of the last ``window_ms`` of partition time
    as well, and never more than ``cap`` (raised to ``horizon`` when below it)."""

    def __init__(
        self,
        horizon: int,
        ids: U64 | None = None,
        times: I64 | None = None,
        *,
        window_ms: int = 0,
        cap: int = 0,
    ) -> None:
        self.horizon = horizon
        self.window_ms = window_ms
        self.cap = max(cap, horizon)
        self.count = 0  # tagged reports seen: the sequence number of the next one
        self._ids = np.zeros(0, dtype=np.uint64)
        self._at = np.zeros(0, dtype=np.int64)  # partition time of each held id
        self._start = 0  # held entries are _ids[_start:_end], sequence numbers from count - held
        self._end = 0
        self._keys = np.zeros(0, dtype=np.uint64)
        self._seqs = np.zeros(0, dtype=np.int64)
        self._since_rebuild = 0
        #: entries placed in the table at its last rebuild (they and the inserts since
        #: then fill it, the forgotten ones included, until the next)
        self._placed = 0
        self._round = MIN_ROUND
        self._version = 0  # bumped by every change of the table: older probes are stale
        if ids is not None and ids.size:
            held = np.asarray(ids, dtype=np.uint64)
            at = (
                np.zeros(held.shape[0], dtype=np.int64)
                if times is None
                else np.asarray(times, dtype=np.int64)
            )
            self.insert(held, at)

    # ------------------------------------------------------------------ state
    @property
    def held(self) -> int:
        """How many ids are remembered."""
        return self._end - self._start

    def ordered(self) -> U64:
        """The remembered ids, oldest first (what a checkpoint keeps)."""
        return self._ids[self._start : self._end].copy()

    def ordered_times(self) -> I64:
        """The partition time (ms) of each remembered id, as :meth:`ordered`."""
        return self._at[self._start : self._end].copy()

    def newest(self, count: int) -> tuple[U64, I64]:
        """The ids and partition times of the last ``count`` tagged reports that are still
        remembered (what a checkpoint adds to the previous one: the remembered ids are
        always a suffix of the stream)."""
        first = max(self._start, self._end - max(count, 0))
        return self._ids[first : self._end].copy(), self._at[first : self._end].copy()

    def _times(self, times: I64) -> I64:
        """The partition time of each of the next tagged reports with these record times."""
        clock = self._at[self._end - 1] if self.held else np.iinfo(np.int64).min
        return np.maximum.accumulate(np.maximum(np.asarray(times, dtype=np.int64), clock))

    def _floors(self, seq: I64, at: I64) -> I64:
        """The oldest remembered sequence number for reports ``seq`` at partition times ``at``,
        counting the held entries and these reports themselves."""
        by_count = seq - self.horizon
        if self.window_ms > 0:  # held times, then these, are one sorted run: count those too old
            oldest = at - self.window_ms
            older = np.searchsorted(self._at[self._start : self._end], oldest, side="left")
            older += np.searchsorted(at, oldest, side="left")
            by_time = self.count - self.held + older.astype(np.int64)
            floor = np.minimum(by_count, by_time)
        else:
            floor = by_count
        return np.maximum(floor, seq - self.cap)

    # ------------------------------------------------------------------ table
    def _allocate(self, entries: int) -> None:
        """A table with at least 2 slots per entry it will hold: at most half full."""
        bits = max(4, math.ceil(math.log2(2 * max(entries, 1))))
        self._shift = np.uint64(64 - bits)
        self._mask = (1 << bits) - 1
        self._keys = np.zeros(1 << bits, dtype=np.uint64)
        self._seqs = np.zeros(1 << bits, dtype=np.int64)

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

    def duplicates(self, ids: U64, times: I64) -> Probe:
        """Which of the next tagged reports, with these ids (non-zero, in order) and record
        times (ms), are duplicates under the rule (pure: :meth:`insert` records them
        afterwards, reusing the probe if nothing changed in between)."""
        n = ids.shape[0]
        seq = self.count + np.arange(n, dtype=np.int64)
        floor = self._floors(seq, self._times(times))
        previous, slots = self._probe(ids)
        dup = (previous >= 0) & (previous >= floor)
        ordered = np.sort(ids)
        repeated = n > 1 and bool((ordered[1:] == ordered[:-1]).any())
        if repeated:  # an id repeated inside the batch: compare with its occurrence before
            order = np.argsort(ids, kind="stable")
            again = np.flatnonzero(ids[order][1:] == ids[order][:-1]) + 1
            later, earlier = order[again], order[again - 1]
            dup[later[seq[earlier] >= floor[later]]] = True
        return Probe(dup, self._version, slots, previous >= 0, not repeated)

    # ------------------------------------------------------------------ updates
    def insert(self, ids: U64, times: I64, probe: Probe | None = None) -> None:
        """Record the next tagged reports' ids (duplicates included) and record times, in
        order. ``probe`` is :meth:`duplicates`' answer for these ids; it saves probing again
        when no other insert happened since."""
        n = ids.shape[0]
        if not n or self.horizon <= 0:
            return
        at = self._times(times)
        seq = self.count + np.arange(n, dtype=np.int64)
        self._append(ids, at)
        self.count += n
        self._forget()
        self._since_rebuild += n
        if self._rebuild_due():
            self._rebuild()
        elif probe is not None and probe.version == self._version and probe.slots.shape[0] == n:
            self._place_probed(ids, seq, probe)
        else:
            self._place(ids, seq)
        self._version += 1

    def _append(self, ids: U64, at: I64) -> None:
        n, held = ids.shape[0], self.held
        if self._end + n > self._ids.shape[0]:  # compact, and grow when still short
            size = max(self._ids.shape[0], 2 * (held + n), 16)
            fresh_ids = np.zeros(size, dtype=np.uint64)
            fresh_at = np.zeros(size, dtype=np.int64)
            fresh_ids[:held] = self._ids[self._start : self._end]
            fresh_at[:held] = self._at[self._start : self._end]
            self._ids, self._at, self._start, self._end = fresh_ids, fresh_at, 0, held
        self._ids[self._end : self._end + n] = ids
        self._at[self._end : self._end + n] = at
        self._end += n

    def _forget(self) -> None:
        """Drop the held entries that no later report can remember (its floor is at least
        the floor of a report at the current partition time)."""
        if not self.held:
            return
        floor = int(self._floors(np.array([self.count]), self._at[self._end - 1 : self._end])[0])
        drop = max(0, floor - (self.count - self.held))
        self._start += min(drop, self.held)
        if self._ids.shape[0] > 64 and 4 * self.held < self._ids.shape[0]:  # shrink a mostly empty buffer
            held = self.held
            self._ids, self._at = self.ordered(), self.ordered_times()
            self._ids.resize(max(16, 2 * held), refcheck=False)
            self._at.resize(max(16, 2 * held), refcheck=False)
            self._start, self._end = 0, held

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

    def _rebuild_due(self) -> bool:
        """Whether the table must be rebuilt before these inserts are placed: it would be
        more than half full, or a round of inserts is over and the held entries now ask
        for a table of another size (a grown one, or a smaller one after ids were
        forgotten). A round over with the table still right for what is held goes on: in
        a growing window nothing is forgotten, and re-placing every id then buys nothing."""
        if not self._keys.size or 2 * (self._placed + self._since_rebuild) > self._keys.shape[0]:
            return True
        return self._since_rebuild > self._round and self._table_size(self.held) != self._keys.shape[0]

    @staticmethod
    def _table_size(held: int) -> int:
        """Slots of a table for ``held`` entries and the round of inserts after them."""
        return 1 << max(4, math.ceil(math.log2(2 * (held + max(MIN_ROUND, held // 2)))))

    def _rebuild(self) -> None:
        """Drop everything older than the floor: re-insert the held entries alone, into a
        table sized for them and for the inserts until the next rebuild."""
        held = self.ordered()
        self._round = max(MIN_ROUND, held.shape[0] // 2)
        self._placed = held.shape[0]
        if self._table_size(held.shape[0]) != self._keys.shape[0]:
            self._allocate(held.shape[0] + self._round)
        else:
            self._keys[:] = 0
            self._seqs[:] = 0
        self._since_rebuild = 0
        self._version += 1
        self._place(held, self.count - held.shape[0] + np.arange(held.shape[0], dtype=np.int64))
