"""A record stamped further ahead of the aggregator's clock than ``[aggregate]
max_record_lead`` is dead-lettered as ``record_future``: it makes no time bucket and does
not move the budget ledger's window, so the honest devices of its partition still count.
Late records (delayed devices, replays of recordings) have no bound behind."""

from __future__ import annotations

import numpy as np
import pytest

from kvldp.aggregator.ingest import Plan, plan
from kvldp.aggregator.state import AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import collection_table, parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import row
from kvldp.common.messages.wire import REASONS, RECORD_FUTURE, WireFormat
from kvldp.common.spec.collection_fields import InvalidCollection

from support import Rec

TABLE = {
    "name": "lead",
    "mechanism": "kvue",
    "epsilon": 1.0,
    "key_count": 3,
    "value_range": [0.0, 1.0],
    "aggregate": {"windows": ["10s", "all"], "max_reports_per_device": 2, "budget_window": "1d"},
}
NOW_MS = 1_750_000_000_000
YEAR_MS = 365 * 86_400_000


def message(c: Collection, seed: int) -> bytes:
    wire = WireFormat(c)
    batch = c.mechanism.perturb_many(KVData.from_pairs(3, [{0: 0.5}]), np.random.default_rng(seed))
    return wire.encode_report(row(batch, wire.fields, 0))


def fold(state: AggregatorState, stamped: list[tuple[bytes, int]], now_ms: int | None) -> Plan:
    start = state.partition(0).next_offset
    c = state.collection
    recs = [Rec(start + i, ts, device, message(c, start + i)) for i, (device, ts) in enumerate(stamped)]
    work = plan(state, WireFormat(c), 0, recs, b"key", now_ms)
    assert work is not None
    work.apply(state)
    return work


def test_a_forged_future_record_is_dead_lettered_and_honest_devices_still_count() -> None:
    state = AggregatorState(parse_collection(TABLE))
    work = fold(
        state, [(b"honest-a", NOW_MS), (b"forger", NOW_MS + YEAR_MS), (b"honest-b", NOW_MS + 1)], NOW_MS
    )
    assert [(r.offset, r.reason) for r in work.rejected] == [(1, RECORD_FUTURE)]
    assert "max_record_lead" in work.rejected[0].detail
    assert work.n_reports == 2
    later = fold(state, [(b"honest-c", NOW_MS + 2_000), (b"honest-a", NOW_MS + 3_000)], NOW_MS + 3_000)
    assert later.rejected == [] and later.n_reports == 2
    part = state.partition(0)
    assert max(part.buckets) == (NOW_MS + 3_000) // 1000  # no bucket of the forged date
    assert set(part.ledger.windows) == {NOW_MS // 86_400_000}  # the ledger's window did not move
    assert state.reports_total == 4 and state.rejected_totals() == {RECORD_FUTURE: 1}
    assert state.window_stats(NOW_MS + 3_000)["all"].n_reports == 4


def test_without_the_bound_the_forged_record_closes_the_window_on_honest_devices() -> None:
    state = AggregatorState(parse_collection(TABLE))
    fold(state, [(b"forger", NOW_MS + YEAR_MS)], None)
    honest = fold(state, [(b"honest-a", NOW_MS)], None)
    assert [r.reason for r in honest.rejected] == [
        "budget_exceeded"
    ]  # WINDOW_CLOSED: what the bound prevents


def test_the_bound_is_inclusive_and_late_or_replayed_records_are_never_refused_by_it() -> None:
    unbudgeted = {**TABLE, "aggregate": {"windows": ["10s", "all"]}}  # the ledger has its own rule behind
    state = AggregatorState(parse_collection(unbudgeted))
    lead_ms = state.collection.aggregate.max_record_lead_s * 1000
    work = fold(
        state, [(b"a", NOW_MS + lead_ms), (b"b", NOW_MS + lead_ms + 1), (b"c", NOW_MS - YEAR_MS)], NOW_MS
    )
    assert [(r.offset, r.reason) for r in work.rejected] == [(1, RECORD_FUTURE)]
    assert work.n_reports == 2 and min(state.partition(0).buckets) == (NOW_MS - YEAR_MS) // 1000


def test_max_record_lead_is_a_duration_of_five_minutes_by_default_and_not_in_the_digest() -> None:
    c = parse_collection(TABLE)
    assert c.aggregate.max_record_lead_s == 300
    hour = parse_collection({**TABLE, "aggregate": {**TABLE["aggregate"], "max_record_lead": "1h"}})  # type: ignore[dict-item]
    assert hour.aggregate.max_record_lead_s == 3600 and hour.digest == c.digest
    assert parse_collection(collection_table(hour)).aggregate.max_record_lead_s == 3600
    for bad in ("all", "5 minutes", 300):
        with pytest.raises(InvalidCollection, match=r"aggregate\.max_record_lead"):
            parse_collection({**TABLE, "aggregate": {"max_record_lead": bad}})
    assert RECORD_FUTURE in REASONS
