"""A partition's per-device rows as a chain of segments: what a checkpoint writes of the
device book, the budget ledger and the de-duplication memory.

The per-device state of a partition (:class:`~kvldp.aggregator.tag_index.TagIndex` rows,
the :class:`~kvldp.aggregator.devices.DeviceBook`, the
:class:`~kvldp.aggregator.ledger.Ledger`'s windows) grows with the fleet, while a
checkpoint interval changes only the rows of the devices that reported in it. So a
checkpoint does not re-encode the rows: it writes a *segment* of the rows that changed
since the previous segment, and the partition's checkpoint lists its chain of segments.

* **A segment** holds the tags of the devices that arrived since the previous segment
  (rows are appended, never moved), the current values of every row touched since then
  (charges, latest report and its bucket, the count in each budget window kept), the
  windows kept, and the (device, payload) hashes added; and the report ids remembered
  for de-duplication that were added since (:class:`~kvldp.aggregator.dedup.RecentIds`
  remembers a suffix of the stream, so the ids added and the number remembered say
  which are). Row values are absolute, so applying a segment twice gives the same rows.
* **A chain** is a *base* (the segment of every row) followed by deltas. Restoring applies
  them in order. A new base replaces the chain once the deltas since the last base add
  up to more bytes than it: the chain never holds more than twice the rows' size, and
  every byte a base rewrites was paid for by as many bytes of deltas, so the bytes
  written stay proportional to the rows changed (amortised), whatever the fleet.
* **Names** are ``<writer>.<n>``, with a writer id random per process: a stalled former
  owner of a partition cannot overwrite a segment its successor's chain lists.

Where segments live is the store's business: files beside the local checkpoint
(:class:`~kvldp.aggregator.state.CheckpointStore`), or records of the state topic cut
into pieces (:mod:`kvldp.aggregator.statetopic`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack
import numpy as np
from numpy.typing import NDArray

from kvldp.aggregator.dedup import RecentIds
from kvldp.aggregator.devices import DeviceBook
from kvldp.aggregator.ledger import Ledger
from kvldp.aggregator.round_state import RoundBook
from kvldp.aggregator.tag_index import RowCounts, TagIndex

I64 = NDArray[np.int64]
U64 = NDArray[np.uint64]

FORMAT = "kvldp-rows"


def new_writer() -> str:
    """A writer id for segment names (random: unique to the process that writes)."""
    return secrets.token_hex(6)


class Rows(Protocol):
    """What a partition keeps per device and the report ids it remembers: the parts of
    :class:`~kvldp.aggregator.state.PartitionState` a segment holds."""

    devices: TagIndex
    book: DeviceBook
    ledger: Ledger
    recent: RecentIds
    round_book: RoundBook


@dataclass(frozen=True)
class Segment:
    """One segment taken from a partition: its name, its bytes, and the segments the chain
    no longer lists (a new base makes the old chain obsolete)."""

    name: str
    data: bytes
    obsolete: list[tuple[str, int]]


@dataclass
class SegmentChain:
    """A partition's chain of segments, and what changed since its last segment."""

    #: (name, bytes) of every segment listed, the base first
    entries: list[tuple[str, int]] = field(default_factory=list)
    #: the partition's devices and (device, payload) hashes when the last segment was taken
    rows_mark: int = 0
    pairs_mark: int = 0
    #: report ids seen (:attr:`RecentIds.count`) when the last segment was taken
    recent_mark: int = 0
    #: rows whose values changed since the last segment (repeats allowed)
    touched: list[I64] = field(default_factory=list)
    #: the next segment must be a base (a segment taken was never stored)
    rebase: bool = False
    writer: str = field(default_factory=new_writer)
    taken: int = 0

    def touch(self, rows: I64) -> None:
        if rows.size:
            self.touched.append(rows)
            if len(self.touched) > 256:  # checkpoints held up: keep each row once
                self.touched = [np.unique(np.concatenate(self.touched))]

    def lost(self) -> None:
        """The segment last taken was not stored: the next one is a base."""
        self.rebase = True

    def take(self, rows: Rows) -> Segment | None:
        """The segment of what changed since the last one — or a base, when the chain is
        empty, was broken, or would pass twice the base's size — and the chain that lists
        it; None when nothing changed (or the partition never had anything to keep)."""
        devices, book, recent = rows.devices, rows.book, rows.recent
        n, pairs = len(devices), len(book.pairs)
        if not n and not pairs and not recent.held and not self.entries:
            return None
        base = self.rebase or not self.entries
        marks = (self.rows_mark, self.pairs_mark, self.recent_mark)
        if not base and not self.touched and marks == (n, pairs, recent.count):
            return None
        if not base:
            touched = np.concatenate([*self.touched, np.arange(self.rows_mark, n, dtype=np.int64)])
            data = encode(rows, self.rows_mark, self.pairs_mark, np.unique(touched), self.recent_mark)
            deltas = sum(size for _, size in self.entries[1:]) + len(data)
            base = deltas > self.entries[0][1]
        if base:
            data = encode(rows, 0, 0, np.arange(n, dtype=np.int64), None)
        self.taken += 1
        name = f"{self.writer}.{self.taken}"
        obsolete = self.entries if base else []
        self.entries = [(name, len(data))] if base else [*self.entries, (name, len(data))]
        self.rows_mark, self.pairs_mark, self.recent_mark = n, pairs, recent.count
        self.touched, self.rebase = [], False
        return Segment(name, data, obsolete)

    def restored(self, entries: list[tuple[str, int]], rows: Rows) -> None:
        """Continue the chain ``entries`` just applied to these rows and ids."""
        self.entries = list(entries)
        self.rows_mark, self.pairs_mark = len(rows.devices), len(rows.book.pairs)
        self.recent_mark = rows.recent.count
        self.touched, self.rebase = [], False


@dataclass
class RecentLog:
    """The remembered report ids and their times, as the segments applied so far say."""

    ids: U64 = field(default_factory=lambda: np.zeros(0, np.uint64))
    times: I64 = field(default_factory=lambda: np.zeros(0, np.int64))


def encode(held: Rows, rows_from: int, pairs_from: int, rows: I64, recent_from: int | None) -> bytes:
    """A segment: the tags of rows ``rows_from ..``, the values of ``rows`` (distinct),
    every window kept, the hashes from ``pairs_from``, and the remembered ids added since
    the id count was ``recent_from`` (None: every remembered id)."""
    recent, book = held.recent, held.book
    ids, times = recent.newest(recent.held if recent_from is None else recent.count - recent_from)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "rows_from": rows_from,
        "tags": held.devices.tags[rows_from:].astype("<u8").tobytes(),
        "rows": rows.astype("<u4").tobytes(),
        "book": book.rows_to_wire(rows),
        "windows": {str(w): c.get(rows).astype("<i4").tobytes() for w, c in held.ledger.windows.items()},
        "pairs_from": pairs_from,
        "pairs": book.pairs.tags[pairs_from:].astype("<u8").tobytes(),
        "rounds": held.round_book.masks_of(rows).astype("<u8").tobytes() if held.round_book.rows else b"",
        "recent": ids.astype("<u8").tobytes(),
        "recent_at": times.astype("<i8").tobytes(),
        "recent_held": recent.held,
    }
    return bytes(msgpack.packb(payload, use_bin_type=True))


def apply(held: Rows, recent: RecentLog, data: bytes) -> None:
    """Apply a segment to the rows and ids it follows (:class:`ValueError` if it does not
    follow them, or is not a segment)."""
    devices, book, ledger = held.devices, held.book, held.ledger
    payload = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError("not a segment of device rows")
    if payload["rows_from"] != len(devices) or payload["pairs_from"] != len(book.pairs):
        raise ValueError(
            f"a segment from row {payload['rows_from']} and hash {payload['pairs_from']} does not follow "
            f"{len(devices)} rows and {len(book.pairs)} hashes"
        )
    devices.extend(np.frombuffer(payload["tags"], dtype="<u8").astype(np.uint64))
    book.pairs.extend(np.frombuffer(payload["pairs"], dtype="<u8").astype(np.uint64))
    rows = np.frombuffer(payload["rows"], dtype="<u4").astype(np.int64)
    if rows.size and (int(rows[-1]) >= len(devices) or bool((np.diff(rows) <= 0).any())):
        raise ValueError("a segment's rows are not increasing within the partition's devices")
    book.rows_from_wire(rows, payload["book"])
    windows = {int(w): np.frombuffer(c, dtype="<i4").astype(np.int64) for w, c in payload["windows"].items()}
    if any(c.shape[0] != rows.shape[0] for c in windows.values()):
        raise ValueError("a segment's window counts and rows differ in length")
    for window in [w for w in ledger.windows if w not in windows]:
        del ledger.windows[window]
    for window, counts in windows.items():
        ledger.windows.setdefault(window, RowCounts()).set(rows, counts)
    if payload["rounds"]:
        masks = np.frombuffer(payload["rounds"], dtype="<u8").astype(np.uint64)
        if masks.shape != rows.shape:
            raise ValueError("a segment's round masks and rows differ in length")
        held.round_book.set(rows, masks)
    ids = np.frombuffer(payload["recent"], dtype="<u8").astype(np.uint64)
    times = np.frombuffer(payload["recent_at"], dtype="<i8").astype(np.int64)
    remembered = int(payload["recent_held"])
    if ids.shape != times.shape or not 0 <= remembered <= recent.ids.shape[0] + ids.shape[0]:
        raise ValueError("a segment's report ids do not follow those before it")
    first = recent.ids.shape[0] + ids.shape[0] - remembered
    recent.ids = np.concatenate([recent.ids, ids])[first:]
    recent.times = np.concatenate([recent.times, times])[first:]
