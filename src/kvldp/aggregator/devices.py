"""Per-device book of one partition: what each device spent, and its latest report.

Kept for collections with a ``[privacy]`` table (see :mod:`kvldp.common.spec.privacy`), next to the
statistics of each partition (so checkpoints and scale-out hand-overs carry it). A device
is its record key, stored as ``HMAC-SHA256(ledger key, device id)[:8]`` like the budget
ledger's, never as an id; a device's reports stay in one partition because the key picks it.

* **Spent.** The server's mirror of the device's spending rule: without memoization every
  report a device sent costs the per-report epsilon; with it, each *distinct* payload
  does (a memoized device re-sends an unchanged state byte for byte). Distinct payloads
  are told apart by a keyed 64-bit hash of (device, payload). Exported as the histogram
  ``kvldp_device_privacy_spent_epsilon``.
* **An upper bound, with instantaneous randomization.** There every send is randomized
  again and no two payloads are alike, so payloads no longer show states: the book
  counts every report R of a device instead, and exports R x the per-send bound c
  (:func:`kvldp.common.channel.instantaneous.epsilon_per_send_bound`) as
  ``kvldp_device_privacy_spent_epsilon_upper_bound``. A device's true spend is the sum
  over its states of what that state's sends reveal, at most eps_inf each; however the
  R sends fall into states it is at most R c, so the figure is never below the truth,
  and often far above it (a device re-sending one state for a year spent eps_inf). The
  book sees neither the states nor the sends per state, so it cannot tell a device
  that changes state more often than its ``lifetime_epsilon`` allows: that cap is kept
  by the device alone, and a bound above the cap is no sign of overspending. What the
  server enforces is unchanged: the budget ledger's count of reports per device.
* **Latest report (memoized collections).** A memoized device repeats one report while
  its state holds, so its reports are not independent and averaging them does not shrink
  the error. The statistics of a memoized collection therefore count each device once,
  at its latest report: a new report of a device retracts the device's previous one from
  the bucket it was folded into (or from the partition's base). A window then estimates
  the *devices* whose latest report falls in it, at their latest state — independent
  reports, so every standard error holds as it is.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvldp.aggregator.tag_index import RowCounts, TagIndex, grown
from kvldp.common.config.collection import Collection
from kvldp.common.data.schema import ReportBatch

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]

#: ``latest_bucket`` of a report folded into the base (a collection without finite windows)
NO_BUCKET = np.iinfo(np.int64).min
#: ``latest_bucket`` of a device that has no stored report yet
_UNSET = np.iinfo(np.int64).max
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def charges_distinct_payloads(collection: Collection) -> bool:
    """Whether the book charges a device's distinct payloads (memoized reports re-sent byte
    for byte) rather than every report (no memoization, or every send randomized again)."""
    privacy = collection.privacy
    return privacy.memoize and privacy.instantaneous_epsilon is None


def epsilon_per_charge(collection: Collection) -> float:
    """What one charge of the book stands for: the collection's epsilon, or with
    instantaneous randomization the per-send bound c, which makes the book's figure an
    upper bound of what a device revealed (module docstring)."""
    randomizer = collection.instantaneous_randomizer
    return collection.epsilon if randomizer is None else randomizer.send_bound(collection.epsilon)


def mix64(x: U64) -> U64:
    """SplitMix64's finaliser: a bijective scramble of 64-bit words."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        return np.asarray(x ^ (x >> np.uint64(31)), dtype=np.uint64)


def payload_hashes(rows: ReportBatch) -> U64:
    """A 64-bit hash of every report's payload (all its fields, column by column)."""
    n = next(iter(rows.values())).shape[0] if rows else 0
    h = np.zeros(n, dtype=np.uint64)
    for name in sorted(rows):
        column = np.ascontiguousarray(rows[name])
        raw = column.reshape(n, -1).view(np.uint8) if n else np.zeros((0, 8), dtype=np.uint8)
        width = -(-raw.shape[1] // 8) * 8
        padded = np.zeros((n, width), dtype=np.uint8)
        padded[:, : raw.shape[1]] = raw
        for word in padded.view("<u8").T:
            with np.errstate(over="ignore"):
                h = mix64(h ^ word.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    return h


def _last_of_each(tags: U64) -> NDArray[np.bool_]:
    """True at the last occurrence of every tag (rows in message order)."""
    reverse = tags[::-1]
    _, first_in_reverse = np.unique(reverse, return_index=True)
    mask = np.zeros(tags.shape[0], dtype=bool)
    mask[tags.shape[0] - 1 - first_in_reverse] = True
    return mask


@dataclass
class Retraction:
    """What a memoized fetch changes: the rows to fold (each device's last row of the
    fetch) and the reports they replace, with the bucket each was folded into."""

    keep: NDArray[np.bool_]
    rows: ReportBatch
    buckets: I64


class DeviceBook:
    """Per device, by its row of the partition's :class:`~kvldp.aggregator.tag_index.TagIndex`
    (:attr:`PartitionState.devices`): what it was charged and (memoized) its latest
    report; and the (device, payload) hashes already charged. Every step of
    :meth:`record` costs in proportion to the fetch, not to the devices held.

    Rows of devices the book never charged (the budget ledger's alone) hold 0 charges and
    no latest report.
    """

    def __init__(
        self,
        charged: RowCounts | None = None,
        latest_bucket: I64 | None = None,
        latest: ReportBatch | None = None,
        pairs: U64 | None = None,
    ) -> None:
        self.charged = charged or RowCounts()
        #: how many devices were charged exactly k times, for every k >= 1 held: what the
        #: spent-epsilon histogram reads, at a cost that does not grow with the devices
        self.devices_by_charges: Counter[int] = Counter()
        if charged is not None:
            held = charged.values(charged.rows)
            self._tally(held, 1)
        self.pairs = TagIndex(pairs)
        self._bucket = np.zeros(0, np.int64) if latest_bucket is None else np.asarray(latest_bucket, np.int64)
        self._latest: ReportBatch = dict(latest or {})

    @property
    def nbytes(self) -> int:
        """Bytes held, with the room to grow (the partition's device index aside)."""
        held = self.charged.nbytes + self.pairs.nbytes + self._bucket.nbytes
        return int(held + sum(column.nbytes for column in self._latest.values()))

    def spent(self, rows: int) -> I64:
        """The charges of every device the book charged (of rows ``0 .. rows - 1``)."""
        charged = self.charged.values(rows)
        return charged[charged > 0]

    def latest_of(self, rows: int) -> tuple[I64, ReportBatch]:
        """(the bucket of every row's latest report, those reports), rows ``0 .. rows - 1``
        (memoized collections; a row without one has bucket ``_UNSET``)."""
        self._fit(rows, None)
        return self._bucket[:rows], {name: column[:rows] for name, column in self._latest.items()}

    def _fit(self, rows: int, template: ReportBatch | None) -> None:
        """Room for ``rows`` rows of latest reports (doubling), new rows without one
        (``template``: the columns of a memoized report, for a book that has none yet)."""
        if not self._latest and template is None:
            return
        capacity = self._bucket.shape[0] if self._latest else 0
        if rows <= capacity:
            return
        self._bucket = grown(self._bucket[:capacity], capacity, rows, _UNSET)
        columns = self._latest or {
            name: column[:0].astype(_smallest(column)) for name, column in (template or {}).items()
        }
        self._latest = {name: grown(column, capacity, rows, 0) for name, column in columns.items()}

    def record(
        self,
        rows: I64,
        tags: U64,
        reports: ReportBatch,
        buckets: I64 | None,
        memoize: bool,
        distinct: bool,
    ) -> Retraction | None:
        """Charge the reports' devices (``rows``, their tags ``tags``), each distinct payload
        once when ``distinct`` (:func:`charges_distinct_payloads`), else every report; for a
        memoized collection, also make every report its device's latest and return what it
        replaces (in message order)."""
        if not rows.size:
            return None
        if distinct:
            pairs = mix64(tags ^ mix64(payload_hashes(reports)))
            fresh_pairs, first = np.unique(pairs, return_index=True)
            new = self.pairs.find(fresh_pairs) < 0
            self._charge(rows[first[new]])
            self.pairs.add(fresh_pairs[new])
        else:
            self._charge(rows)
        if not memoize:
            return None
        self._fit(int(rows.max()) + 1, reports)
        last = _last_of_each(tags)
        slots = rows[last]
        bucket_of = np.full(tags.shape[0], NO_BUCKET, np.int64) if buckets is None else buckets
        had = self._bucket[slots] != _UNSET
        retract = Retraction(  # in the reports' own types: folding must not overflow a narrow one
            last,
            {name: column[slots[had]].astype(reports[name].dtype) for name, column in self._latest.items()},
            self._bucket[slots[had]].copy(),
        )
        for name, column in reports.items():
            stored = self._latest[name]
            wider = np.promote_types(stored.dtype, _smallest(column))
            if wider != stored.dtype:  # a value the narrow type cannot hold: widen, once per type
                stored = self._latest[name] = stored.astype(wider)
            stored[slots] = column[last]
        self._bucket[slots] = bucket_of[last]
        return retract

    def _charge(self, rows: I64) -> None:
        """One more charge for each of ``rows`` (repeats add up), kept in
        :attr:`devices_by_charges` too."""
        distinct, times = np.unique(rows, return_counts=True)
        self._tally(self.charged.get(distinct), -1)
        self.charged.add(distinct, times.astype(np.int64))
        self._tally(self.charged.get(distinct), 1)

    def _tally(self, charges: I64, sign: int) -> None:
        values, devices = np.unique(charges[charges > 0], return_counts=True)
        for value, count in zip(values.tolist(), devices.tolist(), strict=True):
            self.devices_by_charges[value] += sign * count
            if not self.devices_by_charges[value]:
                del self.devices_by_charges[value]

    def rows_to_wire(self, rows: I64) -> dict[str, Any]:
        """The book's entries of ``rows`` (charges; latest reports and their buckets when
        the book keeps them), for a segment (:mod:`kvldp.aggregator.device_segments`)."""
        out: dict[str, Any] = {"charged": self.charged.get(rows).astype("<i4").tobytes()}
        if self._latest:
            self._fit(int(rows.max()) + 1 if rows.size else 0, None)
            out["bucket"] = self._bucket[rows].astype("<i8").tobytes()
            out["latest"] = {
                name: [list(column.shape[1:]), column.dtype.str, np.ascontiguousarray(column[rows]).tobytes()]
                for name, column in self._latest.items()
            }
        return out

    def rows_from_wire(self, rows: I64, entry: dict[str, Any]) -> None:
        """Set the entries of ``rows`` (distinct) from :meth:`rows_to_wire`."""
        charged = np.frombuffer(entry["charged"], dtype="<i4").astype(np.int64)
        if charged.shape[0] != rows.shape[0]:
            raise ValueError("a segment's charges and rows differ in length")
        self._tally(self.charged.get(rows), -1)
        self.charged.set(rows, charged)
        self._tally(charged, 1)
        if "latest" not in entry or not rows.size:
            return
        latest = _columns(entry["latest"])
        bucket = np.frombuffer(entry["bucket"], dtype="<i8").astype(np.int64)
        if {bucket.shape[0], *(column.shape[0] for column in latest.values())} != {rows.shape[0]}:
            raise ValueError("a segment's latest reports and rows differ in length")
        self._fit(int(rows.max()) + 1, latest)
        if set(latest) != set(self._latest):
            raise ValueError("a segment's latest reports have other fields than the book's")
        for name, column in latest.items():
            stored = self._latest[name]
            if stored.shape[1:] != column.shape[1:]:
                raise ValueError(f"a segment's latest {name!r} has another shape than the book's")
            wider = np.promote_types(stored.dtype, column.dtype)
            if wider != stored.dtype:
                stored = self._latest[name] = stored.astype(wider)
            stored[rows] = column
        self._bucket[rows] = bucket

    @classmethod
    def from_wire(cls, entry: dict[str, Any], rows: int) -> DeviceBook:
        """A book of ``rows`` rows as checkpoint formats 3 and 4 kept it (format 3: arrays
        aligned with the first rows of the partition's devices)."""
        charged = np.frombuffer(entry["charged"], dtype="<i4" if "tags" not in entry else "<i8").astype(
            np.int64
        )
        latest = _columns(entry["latest"])
        bucket = np.frombuffer(entry["bucket"], dtype="<i8").astype(np.int64)
        sizes = {charged.shape[0]} | ({bucket.shape[0]} if latest else set())
        sizes |= {column.shape[0] for column in latest.values()}
        if len(sizes) != 1 or sizes.pop() > rows:
            raise ValueError("device book arrays differ in length or exceed the partition's devices")
        return cls(
            RowCounts(charged), bucket, latest, np.frombuffer(entry["pairs"], dtype="<u8").astype(np.uint64)
        )


def _columns(wire: dict[str, Any]) -> ReportBatch:
    """Report columns from their wire form ``{name: [shape of a row, dtype, bytes]}``."""
    return {
        str(name): np.frombuffer(data, dtype=np.dtype(dtype)).reshape(-1, *shape).copy()
        for name, (shape, dtype, data) in wire.items()
    }


def _smallest(column: NDArray[Any]) -> np.dtype[Any]:
    """The narrowest type holding every value of an integer column (other columns keep
    theirs): a stored report takes the room its values need, not its decoded type's."""
    if column.dtype.kind not in "iu" or not column.size:
        return column.dtype
    return np.promote_types(np.min_scalar_type(int(column.min())), np.min_scalar_type(int(column.max())))
