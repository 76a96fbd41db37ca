"""Aggregator state keyed by input partition, and its atomic checkpoints.

Exactly-once *effect* without Kafka transactions (``docs/reliability.md``, *Exactly-once
statistics*):

* every input partition owns ``PartitionState(next_offset, statistics, rejected
  counts)``; a record is folded only if its offset is at least ``next_offset``, which
  then moves past it, so redelivery after a rebalance or a restart is a no-op;
* a checkpoint stores every partition's state *together with* its next offset, written
  to a temporary file, fsynced and renamed over the previous one (atomic on POSIX); the
  per-device rows, which grow with the fleet, are not rewritten: the checkpoint lists a
  chain of segments, each holding the rows changed since the one before it
  (:mod:`kvldp.aggregator.device_segments`), written before the head that lists them;
* after a crash the aggregator loads the last checkpoint and seeks every partition to
  its ``next_offset``: reports folded after that checkpoint are folded again exactly
  once, because the statistics went back with the offsets. Kafka's committed offsets
  are informational only.

Windows: statistics are additive, so a window is a sum of time buckets. A report goes
to the bucket of its Kafka record timestamp (set by the device SDK, kept by replays),
so replaying a topic reproduces the buckets exactly. Buckets are one tenth of the
smallest finite window (at least one second); buckets that have left every finite
window are merged into the partition's ``base``, which only the ``all`` window reads,
so memory stays bounded by (partitions x buckets x statistics size).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from numpy.typing import NDArray

from kvldp.aggregator import device_segments as segments
from kvldp.aggregator.dedup import RecentIds
from kvldp.aggregator.device_segments import Segment, SegmentChain
from kvldp.aggregator.devices import NO_BUCKET, DeviceBook, Retraction, epsilon_per_charge
from kvldp.aggregator.flagged import FlaggedDevices
from kvldp.aggregator.ledger import Ledger
from kvldp.aggregator.round_state import RoundBook, RoundState
from kvldp.aggregator.tag_index import RowCounts, TagIndex
from kvldp.common.config.collection import Collection
from kvldp.common.data.schema import ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.common.errors import KvldpError
from kvldp.common.files.atomic_file import write_atomically
from kvldp.common.files.file_lock import FileLock, LockTimeout
from kvldp.common.messages.control_record import interactive_mechanism, is_interactive
from kvldp.common.primitives import FloatArray, IntArray

FORMAT = "kvldp-checkpoint"
VERSION = 5
#: older versions still read: 2 kept report ids without their partition times, 3 kept the
#: device book's and each ledger window's devices apart, 4 kept every partition's
#: per-device rows whole in the checkpoint (5 keeps them in segments)
READABLE = (2, 3, 4, 5)


class CheckpointMismatch(KvldpError):
    """A checkpoint belongs to another collection or configuration."""


def bucket_millis(collection: Collection) -> int | None:
    """Bucket width: a tenth of the smallest finite window, at least 1 s; None without windows."""
    finite = [w.seconds for w in collection.aggregate.windows if w.seconds is not None]
    if not finite:
        return None
    return max(1000, min(finite) * 1000 // 10)


def recent_ids(
    collection: Collection, ids: NDArray[np.uint64] | None = None, times: IntArray | None = None
) -> RecentIds:
    """A partition's de-duplication memory under the collection's settings, empty or
    remembering ``ids`` (oldest first) at partition ``times`` (none: ids checkpointed by
    format 2, which keep the count rule alone)."""
    agg = collection.aggregate
    return RecentIds(
        agg.dedup_horizon, ids, times, window_ms=agg.dedup_window_s * 1000, cap=agg.dedup_max_ids
    )


@dataclass
class PartitionState:
    """What has been folded from one input partition, and the filters' memory.

    ``last_digest`` fingerprints the record at ``next_offset - 1``: on reassignment the
    aggregator re-reads that record, and a different one means the topic was reset.
    """

    next_offset: int
    base: Stats
    buckets: dict[int, Stats] = field(default_factory=dict)
    rejected: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    resets: int = 0
    #: offsets deleted (retention, delete-records) before they were read
    lost: int = 0
    recent: RecentIds = field(default_factory=lambda: RecentIds(0))
    ledger: Ledger = field(default_factory=Ledger)
    #: a row per device the book or the ledger holds, in order of arrival
    devices: TagIndex = field(default_factory=TagIndex)
    last_digest: bytes = b""
    #: end of the partition when last seen (informational: lag for an exporter)
    highwater: int = 0
    #: per-device spending and latest reports (collections with a ``[privacy]`` table)
    book: DeviceBook = field(default_factory=DeviceBook)
    #: reports folded, ever (a memoized collection's statistics keep one per device)
    folded: int = 0
    #: rounds each device reported in (interactive collections)
    round_book: RoundBook = field(default_factory=RoundBook)
    #: devices with reports refused as implausible (docs/plausibility.md)
    flagged: FlaggedDevices = field(default_factory=FlaggedDevices)
    #: the checkpointed segments of the per-device rows (devices, book, ledger)
    chain: SegmentChain = field(default_factory=SegmentChain)

    @property
    def reports(self) -> int:
        return self.folded

    def take_segment(self) -> Segment | None:
        """The segment of the per-device rows that changed since the last one taken
        (:meth:`SegmentChain.take`)."""
        return self.chain.take(self)


class AggregatorState:
    """All partitions of one collection; folding, windows and (de)serialisation."""

    def __init__(self, collection: Collection) -> None:
        self.collection = collection
        self.mechanism = collection.estimation_mechanism
        self.bucket_ms = bucket_millis(collection)
        finite = [w.seconds for w in collection.aggregate.windows if w.seconds is not None]
        self.retention_ms = (max(finite) * 1000 + 2 * self.bucket_ms) if finite and self.bucket_ms else 0
        self.partitions: dict[int, PartitionState] = {}
        #: the rounds of an interactive collection (None: not interactive)
        self.rounds: RoundState | None = (
            RoundState.start(collection, int(time.time() * 1000)) if is_interactive(collection) else None
        )
        #: whether partitions keep a :class:`DeviceBook` (collections with a privacy table;
        #: interactive ones count rounds per device in their round book instead)
        self.tracks_devices = bool(collection.privacy.as_table()) and self.rounds is None

    def partition(self, p: int) -> PartitionState:
        if p not in self.partitions:
            self.partitions[p] = PartitionState(
                next_offset=0,
                base=self.mechanism.new_stats(),
                recent=recent_ids(self.collection),
            )
        return self.partitions[p]

    # ------------------------------------------------------------------ folding
    def buckets_of(self, timestamps_ms: IntArray) -> IntArray | None:
        return None if self.bucket_ms is None else timestamps_ms // self.bucket_ms

    def fold_reports(self, p: int, reports: ReportBatch, buckets: IntArray | None) -> None:
        """Fold decoded, validated reports of partition ``p`` into their time buckets."""
        state = self.partition(p)
        n = next(iter(reports.values())).shape[0] if reports else 0
        state.folded += n
        if n:
            if buckets is None:
                state.base.fold(reports, check=False)
            else:
                first, last = int(buckets.min()), int(buckets.max())
                # a fetch usually falls in one bucket: no need to sort its reports by bucket
                for b in [first] if first == last else np.unique(buckets):
                    target = state.buckets.get(int(b))
                    if target is None:
                        target = state.buckets[int(b)] = self.mechanism.new_stats()
                    if first == last:
                        target.fold(reports, check=False)
                    else:
                        mask = buckets == b
                        target.fold({k: v[mask] for k, v in reports.items()}, check=False)

    def retract(self, p: int, retraction: Retraction) -> None:
        """Take reports back out of partition ``p``'s buckets (or base, once merged there)."""
        state = self.partition(p)
        for b in np.unique(retraction.buckets):
            rows = {k: v[retraction.buckets == b] for k, v in retraction.rows.items()}
            target = state.buckets.get(int(b)) if b != NO_BUCKET else None
            retracted = self.mechanism.new_stats().fold(rows, check=False)
            (state.base if target is None else target).subtract(retracted)

    def compact(self, now_ms: int) -> None:
        """Merge buckets that left every finite window into ``base`` (never changes 'all')."""
        if self.bucket_ms is None:
            return
        oldest = (now_ms - self.retention_ms) // self.bucket_ms
        for state in self.partitions.values():
            for b in [b for b in state.buckets if b < oldest]:
                state.base.add(state.buckets.pop(b))

    # ------------------------------------------------------------------ reading
    def window_stats(self, now_ms: int) -> dict[str, Stats]:
        """Merged statistics of every configured window at wall-clock time ``now_ms``."""
        out: dict[str, Stats] = {}
        for window in self.collection.aggregate.windows:
            total = self.mechanism.new_stats()
            for state in self.partitions.values():
                if window.seconds is None:
                    total.add(state.base)
                    for stats in state.buckets.values():
                        total.add(stats)
                elif self.bucket_ms is not None:
                    first = (now_ms - window.seconds * 1000) // self.bucket_ms
                    for b, stats in state.buckets.items():
                        if b >= first:
                            total.add(stats)
            out[window.name] = total
        return out

    def all_stats(self) -> Stats:
        """Everything folded so far (the 'all' window), for exact comparisons."""
        total = self.mechanism.new_stats()
        for state in self.partitions.values():
            total.add(state.base)
            for stats in state.buckets.values():
                total.add(stats)
        return total

    def device_spent(self) -> NDArray[np.float64]:
        """Epsilon spent by every device seen (collections that keep a device or round book);
        with instantaneous randomization an upper bound of it, the device's reports times
        the per-send bound (:mod:`kvldp.aggregator.devices`)."""
        if self.rounds is not None:
            return np.concatenate(
                [np.zeros(0), *(s.round_book.spent(self.round_costs()) for s in self.partitions.values())]
            )
        charged = [s.book.spent(len(s.devices)) for s in self.partitions.values()]
        counts = np.concatenate([np.zeros(0, np.int64), *charged]).astype(np.float64)
        return epsilon_per_charge(self.collection) * counts

    def round_costs(self) -> FloatArray:
        """The epsilon of each round of an interactive collection."""
        mech = interactive_mechanism(self.collection)
        return np.array([mech.round_epsilon(r) for r in range(mech.rounds)], dtype=np.float64)

    def devices_by_rounds(self) -> Counter[int]:
        """How many devices reported in exactly the rounds of each mask (bit r: round r),
        all partitions: the spent histogram of an interactive collection without a pass
        over the devices."""
        total: Counter[int] = Counter()
        for s in self.partitions.values():
            total.update(s.round_book.by_mask)
        return total

    def devices_by_charges(self) -> Counter[int]:
        """How many devices of the device book were charged exactly k times, for every k
        (all partitions): the spent histogram without a pass over the devices."""
        total: Counter[int] = Counter()
        for s in self.partitions.values():
            total.update(s.book.devices_by_charges)
        return total

    @property
    def reports_total(self) -> int:
        return sum(s.reports for s in self.partitions.values())

    @property
    def duplicates_total(self) -> int:
        return sum(s.duplicates for s in self.partitions.values())

    @property
    def resets_total(self) -> int:
        return sum(s.resets for s in self.partitions.values())

    def lag(self) -> dict[int, int]:
        """Records not yet folded per partition, from the last high watermark seen."""
        return {p: max(0, s.highwater - s.next_offset) for p, s in self.partitions.items()}

    @property
    def implausible_devices(self) -> int:
        """Devices with at least one report refused as implausible (summed over partitions:
        a device's reports stay in the partition its record key picks)."""
        return sum(s.flagged.count for s in self.partitions.values())

    def rejected_totals(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for state in self.partitions.values():
            total.update(state.rejected)
        return total

    # ------------------------------------------------------------------ bytes
    def to_bytes(self) -> bytes:
        """The whole state in one message, per-device rows included (a base segment per
        partition, inline)."""
        return self._pack(
            {
                p: {
                    **self._entry(s),
                    "segment": segments.encode(s, 0, 0, _all(s), None),
                }
                for p, s in self.partitions.items()
            }
        )

    def head_bytes(self, partitions: list[int] | None = None) -> bytes:
        """The checkpoint of ``partitions`` (all by default) listing, for the per-device rows,
        each partition's chain of segments (stored apart: :meth:`PartitionState.take_segment`)."""
        chosen = self.partitions if partitions is None else {p: self.partitions[p] for p in partitions}
        return self._pack({p: {**self._entry(s), "segments": s.chain.entries} for p, s in chosen.items()})

    def _pack(self, entries: dict[int, dict[str, Any]]) -> bytes:
        payload: dict[str, Any] = {
            "format": FORMAT,
            "v": VERSION,
            "collection": self.collection.name,
            "digest": self.collection.digest,
            "bucket_ms": self.bucket_ms,
            "partitions": {str(p): entry for p, entry in entries.items()},
        }
        if self.rounds is not None:
            payload["rounds"] = self.rounds.to_wire()
        return bytes(msgpack.packb(payload, use_bin_type=True))

    def _entry(self, s: PartitionState) -> dict[str, Any]:
        """A partition's checkpoint entry, its per-device rows aside."""
        return {
            "next": s.next_offset,
            "base": s.base.to_bytes(),
            "buckets": {str(b): st.to_bytes() for b, st in s.buckets.items()},
            "rejected": dict(s.rejected),
            "duplicates": s.duplicates,
            "resets": s.resets,
            "lost": s.lost,
            "last": s.last_digest,
            "highwater": s.highwater,
            "folded": s.folded,
            "flagged": s.flagged.to_wire(),
            "tally": sorted(s.book.devices_by_charges.items()),
            "round_tally": sorted(s.round_book.by_mask.items()),
        }

    @classmethod
    def from_bytes(
        cls, collection: Collection, data: bytes, segment: SegmentReader | None = None, rows: bool = True
    ) -> AggregatorState:
        """A state from :meth:`to_bytes` or :meth:`head_bytes` (or an older format), reading
        the segments a head lists with ``segment(partition, name)``. With ``rows=False``
        the per-device rows are left out (the spent tally is kept): what a reader of the
        statistics alone needs."""
        try:
            payload = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as exc:
            raise CheckpointMismatch(f"checkpoint is not valid msgpack: {exc}") from exc
        if (
            not isinstance(payload, dict)
            or payload.get("format") != FORMAT
            or payload.get("v") not in READABLE
        ):
            raise CheckpointMismatch("file is not a kvldp checkpoint of a supported version")
        if payload.get("collection") != collection.name or payload.get("digest") != collection.digest:
            raise CheckpointMismatch(
                f"checkpoint belongs to collection {payload.get('collection')!r} with digest "
                f"{payload.get('digest')}, not {collection.name!r}/{collection.digest}: the collection file "
                "changed; move the old state away or use another --state-dir"
            )
        state = cls(collection)
        if payload.get("bucket_ms") != state.bucket_ms:
            raise CheckpointMismatch("checkpoint was written with other windows; use another --state-dir")
        mech = collection.estimation_mechanism
        try:
            if state.rounds is not None:
                state.rounds = RoundState.from_wire(collection, payload["rounds"])
            for p, entry in payload["partitions"].items():
                base = Stats.from_bytes(mech, entry["base"])
                buckets = {int(b): Stats.from_bytes(mech, v) for b, v in entry["buckets"].items()}
                part = state.partitions[int(p)] = PartitionState(
                    next_offset=int(entry["next"]),
                    base=base,
                    buckets=buckets,
                    rejected=Counter({str(k): int(v) for k, v in entry["rejected"].items()}),
                    duplicates=int(entry["duplicates"]),
                    resets=int(entry["resets"]),
                    lost=int(entry.get("lost", 0)),
                    last_digest=bytes(entry["last"]),
                    highwater=int(entry["highwater"]),
                    flagged=(
                        FlaggedDevices.from_wire(entry["flagged"]) if "flagged" in entry else FlaggedDevices()
                    ),
                    # checkpoints written before the count was kept: every report is in the stats
                    folded=int(
                        entry.get("folded", base.n_reports + sum(s.n_reports for s in buckets.values()))
                    ),
                )
                if payload["v"] < 5:
                    part.devices, part.book, part.ledger = _device_state(entry)
                    part.recent = _legacy_recent(collection, entry)
                    if state.rounds is not None:
                        _legacy_round_book(part, entry["round_book"])
                elif rows:
                    _restore_rows(collection, part, int(p), entry, segment)
                else:
                    part.book.devices_by_charges.update({int(k): int(c) for k, c in entry["tally"]})
                    part.round_book.by_mask.update({int(k): int(c) for k, c in entry["round_tally"]})
        except (KeyError, TypeError, ValueError, AttributeError, OSError, KvldpError) as exc:
            raise CheckpointMismatch(f"checkpoint is corrupt: {type(exc).__name__}: {exc}") from exc
        return state


#: reads segment ``name`` of a partition (:class:`KeyError` or :class:`OSError` if missing)
SegmentReader = Callable[[int, str], bytes]


def _all(s: PartitionState) -> IntArray:
    return np.arange(len(s.devices), dtype=np.int64)


def _restore_rows(
    collection: Collection, part: PartitionState, p: int, entry: dict[str, Any], segment: SegmentReader | None
) -> None:
    """Rebuild a partition's per-device rows and remembered report ids from its inline
    segment or its chain."""
    inline = "segment" in entry
    chain = [] if inline else [(str(name), int(size)) for name, size in entry["segments"]]
    if chain and segment is None:
        raise ValueError("the checkpoint lists segments and none can be read")
    log = segments.RecentLog()
    for name, size in chain:
        data = segment(p, name) if segment is not None else b""
        if len(data) != size:
            raise ValueError(f"segment {name} of partition {p} holds {len(data)} bytes, not {size}")
        segments.apply(part, log, data)
    if inline:
        segments.apply(part, log, bytes(entry["segment"]))
    part.recent = recent_ids(collection, log.ids, log.times)
    part.chain.restored(chain, part)


def _legacy_round_book(part: PartitionState, wire: list[bytes]) -> None:
    """Put a format 2 to 4 round book (devices sorted by hash, a mask each) on rows."""
    keys, masks = (np.frombuffer(b, dtype="<u8").astype(np.uint64) for b in wire)
    rows = part.devices.add(keys)
    part.round_book.set(rows, masks)


def _legacy_recent(collection: Collection, entry: dict[str, Any]) -> RecentIds:
    """The remembered report ids of a format 2 to 4 entry (format 2 kept no times)."""
    ids = np.frombuffer(entry["recent"], dtype="<u8").astype(np.uint64)
    times = np.frombuffer(entry["recent_at"], dtype="<i8").astype(np.int64) if "recent_at" in entry else None
    return recent_ids(collection, ids, times)


def _device_state(entry: dict[str, Any]) -> tuple[TagIndex, DeviceBook, Ledger]:
    """A partition's devices, device book and budget ledger as formats 3 and 4 kept them.
    Format 4 keeps the devices once, the book and each ledger window by row; format 3 kept
    the book's devices with the book and each window's with the window (rows are given in
    that order: the book's first)."""
    book_entry = entry.get("book")
    if "devices" in entry:
        devices = TagIndex(np.frombuffer(entry["devices"], dtype="<u8").astype(np.uint64))
        windows = {int(w): np.frombuffer(c, dtype="<i4").astype(np.int64) for w, c in entry["ledger"].items()}
        if any(c.shape[0] > len(devices) for c in windows.values()):
            raise ValueError("a budget window counts more devices than the partition holds")
        ledger = Ledger({w: RowCounts(c) for w, c in windows.items()})
    else:
        tags = np.frombuffer(book_entry["tags"], dtype="<u8") if book_entry else np.zeros(0, "<u8")
        devices = TagIndex(tags.astype(np.uint64))
        ledger = Ledger()
        for w, (keys, counts) in entry["ledger"].items():
            window = ledger.windows[int(w)] = RowCounts()
            window.add(
                devices.add(np.frombuffer(keys, dtype="<u8").astype(np.uint64)),
                np.frombuffer(counts, dtype="<i8").astype(np.int64),
            )
    book = DeviceBook.from_wire(book_entry, len(devices)) if book_entry else DeviceBook()
    return devices, book, ledger


@dataclass
class Checkpoint:
    """A checkpoint taken at one instant and not yet stored: its head and the new segment
    of every partition whose rows changed."""

    head: bytes
    segments: dict[int, Segment]
    chains: dict[int, SegmentChain]

    def lost(self) -> None:
        """It was not stored: the next checkpoint of these partitions starts a new chain."""
        for p in self.segments:
            self.chains[p].lost()


class CheckpointStore:
    """``<state_dir>/<collection>.checkpoint``, replaced atomically, and the segments of
    per-device rows it lists, one file each in ``<state_dir>/<collection>.segments/``.

    A checkpoint writes its new segments (each fsynced) before the head that lists them,
    so the head on disk only ever lists complete segments; files the head no longer lists
    are removed after it (and, after a crash between the two, when the store is loaded)."""

    def __init__(self, directory: str | Path, collection: Collection) -> None:
        self.directory = Path(directory)
        self.collection = collection
        self.path = self.directory / f"{collection.name}.checkpoint"
        self.segments = self.directory / f"{collection.name}.segments"
        self._lock = FileLock(self.path, f"the checkpoint {self.path}")

    def hold(self) -> None:
        """Take the checkpoint for this process (until :meth:`release`): a second aggregator
        of the collection on the same directory would overwrite it and its segments with
        its own, so it is refused with one line (``<checkpoint>.lock``'s ``flock``)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0.0)
        except LockTimeout:
            raise KvldpError(
                f"state directory {self.directory}: another aggregator of collection "
                f"{self.collection.name} uses it (it holds {self._lock.path}); give each aggregator "
                "its own --state-dir"
            ) from None

    def release(self) -> None:
        self._lock.release()

    def _file(self, p: int, name: str) -> Path:
        return self.segments / f"{p}.{name}"

    def load(self) -> AggregatorState | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        state = AggregatorState.from_bytes(
            self.collection, data, lambda p, name: self._file(p, name).read_bytes()
        )
        self._remove_unlisted(state)
        return state

    def take(self, state: AggregatorState) -> Checkpoint:
        """The checkpoint of ``state`` as it is now (call it between folds)."""
        taken = {p: s.take_segment() for p, s in state.partitions.items()}
        segments = {p: segment for p, segment in taken.items() if segment is not None}
        chains = {p: state.partitions[p].chain for p in segments}
        return Checkpoint(state.head_bytes(), segments, chains)

    def save(self, checkpoint: Checkpoint) -> None:
        """Store ``checkpoint`` atomically and durably (on failure: :meth:`Checkpoint.lost`)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if checkpoint.segments:
                self.segments.mkdir(exist_ok=True)
            for p, segment in checkpoint.segments.items():
                write_atomically(self._file(p, segment.name), segment.data)
            write_atomically(self.path, checkpoint.head)
        except BaseException:
            checkpoint.lost()
            raise
        for p, segment in checkpoint.segments.items():
            for name, _ in segment.obsolete:
                self._file(p, name).unlink(missing_ok=True)

    def _remove_unlisted(self, state: AggregatorState) -> None:
        """Remove segment files the loaded head does not list (a crash between writing a
        segment and the head that would have listed it)."""
        if not self.segments.is_dir():
            return
        listed = {
            self._file(p, name).name for p, s in state.partitions.items() for name, _ in s.chain.entries
        }
        for path in self.segments.iterdir():
            if path.name not in listed:
                path.unlink(missing_ok=True)
