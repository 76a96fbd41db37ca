"""Exactly once at any report rate: a retry within the SDK's deadline is folded once.

The old rule remembered the last ``dedup_horizon`` (100,000) tagged reports of a
partition, so a retry 120 s late was folded twice above about 830 tagged reports per
second. These tests stream 5 times that rate (4,150 per second) through the aggregator's
own ingest path with synthetic Kafka record times — a retried batch then comes back
after about half a million other reports — and restart from the checkpoint on the way.
"""

from __future__ import annotations

import msgpack
import numpy as np

from kvldp.aggregator.dedup import RecentIds
from kvldp.aggregator.ingest import plan
from kvldp.aggregator.state import VERSION, AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.common.messages.wire import WireFormat
from kvldp.producer.retry_policy import RetryPolicy

from support import Rec, kvue_collection

#: 5 x the rate at which a 100,000-report horizon stopped covering a 120 s retry
RATE = 4150
#: reports per message (the SDK's batches)
BATCH = 415
START_MS = 1_800_000_000_000


def collection(**aggregate: object) -> Collection:
    return kvue_collection("dedupwindow", **aggregate)


def stream(c: Collection, seconds: float, retry_after_s: float, seed: int) -> tuple[list[Rec], int]:
    """``seconds`` of batches at :data:`RATE` tagged reports per second, each record stamped
    with its send time, and a copy of the first batch sent again ``retry_after_s`` after it;
    returns the records and how many reports came between the two copies."""
    wire = WireFormat(c)
    rng = np.random.default_rng(seed)
    messages = int(seconds * RATE / BATCH)
    step_ms = 1000 * BATCH / RATE
    records: list[Rec] = []
    first = b""
    between = -1
    for m in range(messages):
        at = START_MS + int(m * step_ms)
        if between < 0 and at >= START_MS + retry_after_s * 1000:
            records.append(Rec(len(records), at, b"device-0", first))
            between = m * BATCH - BATCH
        batch = {"j": rng.integers(0, 4, size=BATCH), "s": rng.integers(0, 3, size=BATCH)}
        value = wire.encode_batch(batch, at, rng.integers(1, 2**63, size=BATCH).astype(np.uint64))
        records.append(Rec(len(records), at, b"device-%d" % (m % 97), value))
        first = first or value
    return records, between


def fold(c: Collection, records: list[Rec], pieces: int) -> AggregatorState:
    """Fold in ``pieces`` fetches, restarting from the checkpoint after each."""
    state, wire = AggregatorState(c), WireFormat(c)
    for chunk in np.array_split(np.arange(len(records)), pieces):
        work = plan(state, wire, 0, records[int(chunk[0]) : int(chunk[-1]) + 1])
        assert work is not None
        work.apply(state)
        state = AggregatorState.from_bytes(c, state.to_bytes())
    return state


def test_a_retry_at_the_deadline_at_five_times_the_old_rate_is_folded_once() -> None:
    c = collection()
    deadline = RetryPolicy().deadline
    records, between = stream(c, deadline + 5, deadline, seed=3)
    assert between > 4 * c.aggregate.dedup_horizon  # far past what the count alone remembers
    sent = (len(records) - 1) * BATCH
    state = fold(c, records, pieces=7)
    assert (state.reports_total, state.duplicates_total) == (sent, BATCH)


def test_the_count_alone_folds_that_retry_twice() -> None:
    """The same stream with a one-second window: the rule of a count (what was there before)."""
    c = collection(dedup_window="1s")
    records, _ = stream(c, RetryPolicy().deadline + 5, RetryPolicy().deadline, seed=3)
    state = fold(c, records, pieces=3)
    assert (state.reports_total, state.duplicates_total) == (len(records) * BATCH, 0)


def test_past_the_window_a_copy_is_folded_again() -> None:
    """The guarantee ends where it says: a copy more than ``dedup_window`` of record time
    after the first (and more than ``dedup_horizon`` reports) is a new report."""
    c = collection(dedup_window="60s")
    records, _ = stream(c, 70, 61, seed=4)
    state = fold(c, records, pieces=2)
    assert (state.reports_total, state.duplicates_total) == (len(records) * BATCH, 0)


def test_past_the_cap_the_oldest_ids_are_forgotten_first() -> None:
    """More tagged reports per window than ``dedup_max_ids``: the memory holds the last
    ``dedup_max_ids``, so a retry behind more than that many is counted again."""
    recent = RecentIds(10, window_ms=1_000_000, cap=1_000)
    ids = np.arange(1, 3_001, dtype=np.uint64)
    recent.insert(ids, np.arange(3_000, dtype=np.int64))  # all within the window
    assert recent.held == 1_000 and recent.ordered().tolist() == list(range(2_001, 3_001))
    now = np.array([3_000], dtype=np.int64)
    assert recent.duplicates(np.array([2_001], dtype=np.uint64), now).duplicates.tolist() == [True]
    assert recent.duplicates(np.array([2_000], dtype=np.uint64), now).duplicates.tolist() == [False]


def test_memory_follows_the_rate_times_the_window() -> None:
    """A slow partition holds its last ``dedup_horizon`` ids, a fast one what its window
    holds: ids older than the window (and the count) are dropped."""
    recent = RecentIds(100, window_ms=10_000, cap=1_000_000)
    for second in range(60):  # 1,000 tagged reports a second for a minute
        ids = np.arange(second * 1000 + 1, second * 1000 + 1001, dtype=np.uint64)
        recent.insert(ids, np.full(1000, second * 1000, dtype=np.int64))
    assert recent.held == 11_000  # the reports stamped within the last 10 s
    assert recent.ordered_times().min() == 49_000


def test_a_version_2_checkpoint_keeps_its_ids_under_the_count_rule() -> None:
    """Checkpoints before the window kept ids without times: they still load, and their
    ids are remembered for the last ``dedup_horizon`` tagged reports."""
    c = collection(dedup_horizon=1000)
    records, _ = stream(c, 1, 2, seed=5)  # ten batches of 415, no retry
    state = fold(c, records[:2], pieces=1)
    payload = msgpack.unpackb(state.to_bytes(), raw=False, strict_map_key=False)
    assert payload["v"] == VERSION
    payload["v"] = 2
    entry = payload["partitions"]["0"]
    entry["recent"] = msgpack.unpackb(entry.pop("segment"))["recent"]  # format 2 kept the ids alone
    del entry["tally"]
    entry["ledger"] = {}  # no budget ledger, no device book: format 2 kept neither
    old = AggregatorState.from_bytes(c, msgpack.packb(payload, use_bin_type=True))
    assert old.partition(0).recent.ordered().tolist() == state.partition(0).recent.ordered().tolist()
    resent = [Rec(2, records[9].timestamp, b"device-0", records[0].value)]
    work = plan(old, WireFormat(c), 0, resent)
    assert work is not None and work.duplicates == BATCH
