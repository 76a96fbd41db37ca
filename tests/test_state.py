"""Aggregator state: offsets make folding idempotent, windows are exact sums of buckets,
checkpoints round-trip and refuse another configuration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvldp.aggregator.ingest import plan
from kvldp.aggregator.ledgerkey import ledger_key
from kvldp.aggregator.state import AggregatorState, CheckpointMismatch, CheckpointStore
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import row
from kvldp.common.errors import KvldpError
from kvldp.common.messages.wire import WireFormat

from support import Rec

TABLE = {
    "name": "st",
    "mechanism": "kvue",
    "epsilon": 1.0,
    "key_count": 3,
    "value_range": [0.0, 1.0],
    "aggregate": {"windows": ["10s", "1m", "all"]},
}


def records(n: int, start_offset: int, ts: int, seed: int) -> list[Rec]:
    c = parse_collection(TABLE)
    wire = WireFormat(c)
    rng = np.random.default_rng(seed)
    batch = c.mechanism.perturb_many(KVData.from_pairs(3, [{0: 0.5, 2: -0.5}] * n), rng)
    return [
        Rec(start_offset + i, ts + i, None, wire.encode_report(row(batch, wire.fields, i))) for i in range(n)
    ]


def test_redelivered_records_are_folded_once() -> None:
    c = parse_collection(TABLE)
    state, wire = AggregatorState(c), WireFormat(c)
    recs = records(50, 0, 1_000_000, 1)
    first = plan(state, wire, 0, recs[:30])
    assert first is not None
    first.apply(state)
    again = plan(state, wire, 0, recs[:30])
    assert again is None  # everything below next_offset
    rest = plan(state, wire, 0, recs[10:])  # overlapping redelivery
    assert rest is not None and rest.n_reports == 20
    rest.apply(state)
    assert state.reports_total == 50 and state.partition(0).next_offset == 50


def test_windows_are_sums_of_buckets_and_compaction_keeps_all() -> None:
    c = parse_collection(TABLE)
    state, wire = AggregatorState(c), WireFormat(c)
    assert state.bucket_ms == 1000
    now = 10_000_000
    for ts, n in ((now - 5_000, 7), (now - 30_000, 11), (now - 600_000, 13)):
        work = plan(state, wire, 0, records(n, state.partition(0).next_offset, ts, n))
        assert work is not None
        work.apply(state)
    windows = state.window_stats(now)
    assert windows["10s"].n_reports == 7
    assert windows["1m"].n_reports == 18
    assert windows["all"].n_reports == 31
    before = state.all_stats()
    state.compact(now)
    assert len(state.partition(0).buckets) < 31
    assert state.all_stats() == before
    assert state.window_stats(now)["1m"].n_reports == 18


def test_checkpoint_round_trip_and_mismatch(tmp_path: Path) -> None:
    c = parse_collection(TABLE)
    state, wire = AggregatorState(c), WireFormat(c)
    work = plan(state, wire, 3, [*records(20, 0, 5000000, 2), Rec(20, 5000100, b"k", b"\xc1")])
    assert work is not None and len(work.rejected) == 1
    work.apply(state)
    store = CheckpointStore(tmp_path, c)
    store.save(store.take(state))
    loaded = store.load()
    assert loaded is not None
    assert loaded.all_stats() == state.all_stats()
    assert loaded.partition(3).next_offset == 21 and loaded.rejected_totals() == {"undecodable": 1}
    other = parse_collection({**TABLE, "epsilon": 2.0})
    with pytest.raises(CheckpointMismatch, match="collection file changed"):
        CheckpointStore(tmp_path, other).load()
    assert CheckpointStore(tmp_path / "empty", c).load() is None
    assert [p.name for p in tmp_path.iterdir()] == ["st.checkpoint"]  # no temporary files left


def test_the_ledger_key_is_created_once_and_an_empty_one_refused(tmp_path: Path) -> None:
    collection = parse_collection(
        {"name": "keyed", "mechanism": "kvue", "epsilon": 1.0, "key_count": 3, "value_range": [0.0, 1.0]}
    )
    first = ledger_key(collection, tmp_path)
    assert len(first) == 32 and ledger_key(collection, tmp_path) == first  # kept, not redrawn
    key_file = tmp_path / "keyed.ledger-key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    key_file.write_bytes(b"")  # what a power loss after an unsynced create could leave
    with pytest.raises(KvldpError, match=r"ledger key file .* is empty"):
        ledger_key(collection, tmp_path)


def test_instantaneous_randomization_is_decoded_folded_and_estimated_as_the_composed_channel(
    tmp_path: Path,
) -> None:
    """Devices of a collection with instantaneous randomization send their memoized report
    randomized again: far more set bits than the device's own OUE at epsilon 6 ever sets, so
    the device mechanism's plausibility rule would refuse most of them. The aggregator
    decodes them with the composed channel's rule, folds them into its statistics and
    checkpoints, and the frequencies it estimates hold the truth within 4 standard errors."""
    table = {
        "name": "irr",
        "mechanism": "oue",
        "epsilon": 6.0,
        "key_count": 40,
        "value_range": [0.0, 1.0],
        "privacy": {"memoize": True, "instantaneous_epsilon": 1.0},
    }
    c = parse_collection(table)
    channel = c.estimation_mechanism
    assert channel is not c.mechanism and channel.epsilon == 1.0
    rng = np.random.default_rng(8)
    keys = rng.integers(0, 40, size=3000)
    users = KVData.from_pairs(40, [{int(k): 0.5} for k in keys])
    sent = channel.perturb_many(users, rng)
    assert c.mechanism.implausible_rows(sent).mean() > 0.9
    state, wire = AggregatorState(c), WireFormat(c)
    recs = [
        Rec(i, 1_000_000 + i, b"dev-%d" % i, wire.encode_report(row(sent, wire.fields, i)))
        for i in range(3000)
    ]
    work = plan(state, wire, 0, recs)
    assert work is not None and not work.rejected
    work.apply(state)
    stats = state.all_stats()
    assert stats == channel.new_stats().fold(channel.plausible(sent))
    store = CheckpointStore(tmp_path, c)
    store.save(store.take(state))
    loaded = store.load()
    assert loaded is not None and loaded.all_stats() == stats
    est = channel.estimate(stats, "unbiased")
    truth = np.bincount(keys, minlength=40) / 3000
    assert np.all(np.abs(est.frequency - truth) < 4 * est.frequency_stderr)
