"""From fetched records to a fold: decode, validate, de-duplicate, budget, bucket.

The consumer calls :func:`plan` for each partition's fetched records, writes the
plan's rejected records to the dead-letter topic, and only once every in-sync replica
holds those writes (``acks=all``) applies the plan to the state (:meth:`Plan.apply`); :func:`plan` itself
mutates nothing. A record is never folded twice: records below the partition's
``next_offset`` are dropped here. Everything per report is columnar numpy; the only
Python loops are over messages.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
from numpy.typing import NDArray

from kvldp.aggregator.dedup import Probe
from kvldp.aggregator.devices import charges_distinct_payloads
from kvldp.aggregator.ledger import ADMITTED, OVER_BUDGET, Charges, device_hashes
from kvldp.aggregator.round_state import RoundState
from kvldp.aggregator.state import AggregatorState, PartitionState
from kvldp.common.data.schema import ReportBatch
from kvldp.common.messages.message_rules import ONE_REPORT_DETAIL, ONE_REPORT_REASON, one_report_per_message
from kvldp.common.messages.wire import RECORD_FUTURE, Decoded, WireFormat
from kvldp.common.primitives import IntArray
from kvldp.kafka.lean_records import LeanRecord

#: what a fetched Kafka record (or a recorded one) offers
Record = LeanRecord


def record_digest(record: Record) -> bytes:
    """Fingerprint of a record (key, value, timestamp): tells a reset topic from ours."""
    h = hashlib.sha256()
    for part in (record.key or b"", record.value or b"", str(record.timestamp).encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()[:16]


@dataclass(frozen=True)
class Rejected:
    """A record that goes to the dead-letter topic, with its reason."""

    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    detail: str


@dataclass(frozen=True)
class Plan:
    """The effect of one fetch of one partition, ready to apply."""

    partition: int
    #: the partition's next offset the plan was made from
    start: int
    reports: ReportBatch
    buckets: IntArray | None
    next_offset: int
    rejected: list[Rejected]
    duplicates: int
    #: the report ids to record, in order (every id-tagged report of the fetch)
    tagged: NDArray[np.uint64]
    #: the Kafka record time (ms) of each of ``tagged``
    tagged_at: IntArray
    #: what checking ``tagged`` for duplicates learnt, reused by the insert
    probe: Probe | None
    #: what the fetch charges the budget ledger (recorded when the plan is applied)
    charges: Charges
    last_digest: bytes
    #: keyed hash of each report's device (collections that keep a device book)
    devices: NDArray[np.uint64] | None = None
    #: interactive collections: the devices whose reports of the open round are admitted
    #: (each once), and the open round the plan was made in
    round_devices: NDArray[np.uint64] | None = None
    round_index: int = -1
    round_complete: bool = False
    #: keyed hash of the device of each report refused as implausible
    implausible: NDArray[np.uint64] | None = None

    @property
    def n_reports(self) -> int:
        return next(iter(self.reports.values())).shape[0] if self.reports else 0

    def apply(self, state: AggregatorState) -> None:
        target = state.partition(self.partition)
        if target.next_offset != self.start:
            raise RuntimeError(f"plan for offset {self.start} applied at {target.next_offset}")
        reports, buckets = self.reports, self.buckets
        if self.devices is not None:
            memoize = state.collection.privacy.memoize
            distinct = charges_distinct_payloads(state.collection)
            rows = target.devices.add(self.devices)
            change = target.book.record(rows, self.devices, reports, buckets, memoize, distinct)
            target.chain.touch(rows)
            if change is not None:  # memoized: each device counts once, at its latest report
                state.retract(self.partition, change)
                target.folded += int(np.sum(~change.keep))
                reports = {k: v[change.keep] for k, v in reports.items()}
                buckets = None if buckets is None else buckets[change.keep]
        if self.round_devices is not None and state.rounds is not None:
            if (state.rounds.open_round, state.rounds.complete) != (self.round_index, self.round_complete):
                raise RuntimeError(f"plan for round {self.round_index} applied in another round")
            rows = target.devices.add(self.round_devices)
            target.round_book.commit(rows, self.round_index)
            target.chain.touch(rows)
            state.rounds.open_reports += self.n_reports
        state.fold_reports(self.partition, reports, buckets)
        target.next_offset = self.next_offset
        target.rejected.update(Counter(r.reason for r in self.rejected))
        target.duplicates += self.duplicates
        if self.implausible is not None:
            target.flagged.add(self.implausible)
        target.recent.insert(self.tagged, self.tagged_at, self.probe)
        target.chain.touch(target.ledger.commit(self.charges, target.devices))
        target.last_digest = self.last_digest


_offset = attrgetter("offset")
_timestamp = attrgetter("timestamp")
_value = attrgetter("value")


def _from_offset(records: Sequence[Record], offset: int) -> Sequence[Record]:
    """The records at or after ``offset`` (a fetch is in offset order)."""
    if not records or records[0].offset >= offset:
        return records
    return records[bisect_left(records, offset, key=_offset) :]


def plan(
    state: AggregatorState,
    wire: WireFormat,
    partition: int,
    records: Sequence[Record],
    ledger_key: bytes = b"",
    now_ms: int | None = None,
) -> Plan | None:
    """Decode the records at or after the partition's next offset; None if there are none.
    With ``now_ms`` (the aggregator's clock), a record stamped further ahead of it than
    ``[aggregate] max_record_lead`` is refused (:func:`_refuse_ahead`)."""
    current = state.partition(partition)
    fresh = _from_offset(records, current.next_offset)
    if not fresh:
        return None
    config = state.collection.aggregate
    timestamps = np.fromiter(map(_timestamp, fresh), dtype=np.int64, count=len(fresh))
    decoded = wire.decode(list(map(_value, fresh)), timestamps)
    rejected = [
        Rejected(fresh[i].offset, fresh[i].key, fresh[i].value, reason, detail)
        for i, reason, detail in decoded.rejected
    ]
    if now_ms is not None:
        decoded = _refuse_ahead(
            decoded, timestamps, fresh, now_ms + config.max_record_lead_s * 1000, rejected
        )
    keep = np.ones(decoded.rids.shape[0], dtype=bool)
    tagged = decoded.rids[decoded.rids != 0] if config.dedup_horizon > 0 else decoded.rids[:0]
    tagged_at = timestamps[decoded.message[decoded.rids != 0]] if tagged.size else timestamps[:0]
    probe = current.recent.duplicates(tagged, tagged_at) if tagged.size else None
    if probe is not None:
        keep[decoded.rids != 0] = ~probe.duplicates
    duplicates = int(np.sum(~keep))
    rounds = state.rounds
    if one_report_per_message(state.collection) and decoded.message.size:
        _reject_batches(decoded.message, keep, fresh, rejected)
    charges = Charges({})
    hashes = None  # keyed hash of each record's device, for the ledgers and the device book
    if (config.max_reports_per_device or state.tracks_devices or rounds is not None) and decoded.message.size:
        hashes = device_hashes(ledger_key, [r.key for r in fresh])
    round_devices = None
    if rounds is not None:
        round_devices = np.zeros(0, np.uint64)
        if hashes is not None:
            round_devices = _charge_rounds(decoded, keep, fresh, rejected, hashes, current, rounds)
    if config.max_reports_per_device and hashes is not None:
        messages, counts = np.unique(decoded.message[keep], return_counts=True)
        if messages.size:
            outcome, charges = current.ledger.assess(
                timestamps[messages] // (config.budget_window_s * 1000),
                hashes[messages],
                current.devices.find(hashes[messages]),
                counts.astype(np.int64),
                config.max_reports_per_device,
            )
            limit = config.max_reports_per_device
            for m, code in zip(messages[outcome != ADMITTED], outcome[outcome != ADMITTED], strict=True):
                r = fresh[int(m)]
                detail = (
                    f"device over {limit} reports per budget window"
                    if code == OVER_BUDGET
                    else "record timestamp in a budget window that is already closed"
                )
                rejected.append(Rejected(r.offset, r.key, r.value, "budget_exceeded", detail))
            keep &= ~np.isin(decoded.message, messages[outcome != ADMITTED])
    rejected.sort(key=lambda r: r.offset)
    flagged = [r.key for r in rejected if r.reason == "implausible_report"]
    reports = {k: v[keep] for k, v in decoded.reports.items()}
    buckets = state.buckets_of(timestamps[decoded.message[keep]])
    devices = hashes[decoded.message[keep]] if state.tracks_devices and hashes is not None else None
    return Plan(
        partition,
        current.next_offset,
        reports,
        buckets,
        fresh[-1].offset + 1,
        rejected,
        duplicates,
        tagged,
        tagged_at,
        probe,
        charges,
        record_digest(fresh[-1]),
        devices,
        round_devices,
        -1 if rounds is None else rounds.open_round,
        rounds is not None and rounds.complete,
        device_hashes(ledger_key, flagged) if flagged else None,
    )


def _refuse_ahead(
    decoded: Decoded, timestamps: IntArray, fresh: Sequence[Record], limit_ms: int, rejected: list[Rejected]
) -> Decoded:
    """Refuse the messages whose record timestamp is after ``limit_ms`` (``record_future``)
    and return the reports of the others: a refused one makes no time bucket, is not
    charged to the budget ledger (so cannot move its window) and leaves no report id."""
    ahead = timestamps[decoded.message] > limit_ms
    if not ahead.any():
        return decoded
    for m in np.unique(decoded.message[ahead]):
        r = fresh[int(m)]
        detail = f"record timestamp {r.timestamp} ms is after the aggregator's clock plus max_record_lead"
        rejected.append(Rejected(r.offset, r.key, r.value, RECORD_FUTURE, detail))
    usable = ~ahead
    reports = {k: v[usable] for k, v in decoded.reports.items()}
    return Decoded(reports, decoded.message[usable], decoded.rids[usable], decoded.rejected)


def _reject_batches(
    message: IntArray, keep: NDArray[np.bool_], fresh: Sequence[Record], rejected: list[Rejected]
) -> None:
    """Refuse every message carrying several reports (:mod:`kvldp.common.messages.message_rules`)."""
    messages, counts = np.unique(message, return_counts=True)
    for m in messages[counts > 1]:
        r = fresh[int(m)]
        rejected.append(Rejected(r.offset, r.key, r.value, ONE_REPORT_REASON, ONE_REPORT_DETAIL))
    keep &= ~np.isin(message, messages[counts > 1])


def _charge_rounds(
    decoded: Decoded,
    keep: NDArray[np.bool_],
    fresh: Sequence[Record],
    rejected: list[Rejected],
    hashes: NDArray[np.uint64],
    partition: PartitionState,
    rounds: RoundState,
) -> NDArray[np.uint64]:
    """Interactive collections: refuse reports of another round or other means, then a
    device's second report in the open round; returns the devices of the rest."""
    bad, reasons, details = rounds.gate(decoded.reports)
    for row in np.flatnonzero(bad & keep):
        r = fresh[int(decoded.message[row])]
        rejected.append(Rejected(r.offset, r.key, r.value, str(reasons[row]), str(details[row])))
    keep &= ~bad
    rows = np.flatnonzero(keep)
    devices = hashes[decoded.message[rows]]
    admitted = partition.round_book.assess(devices, partition.devices.find(devices), rounds.open_round)
    for row in rows[~admitted]:
        r = fresh[int(decoded.message[row])]
        detail = f"device already reported in round {rounds.open_round + 1}"
        rejected.append(Rejected(r.offset, r.key, r.value, "budget_exceeded", detail))
    keep[rows[~admitted]] = False
    return devices[admitted]
