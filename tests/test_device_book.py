"""The aggregator's per-device book: spent epsilon per device, and memoized collections
counting each device once, at its latest report (exactly, through checkpoints)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kvldp.aggregator.devices import payload_hashes
from kvldp.aggregator.exporter import SnapshotCollector
from kvldp.aggregator.ingest import plan
from kvldp.aggregator.state import AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.messages.wire import WireFormat

from support import Rec
from support.checkpoint_formats import format_3, format_4

HOUR_MS = 3_600_000
T0 = 1_800_000_000_000


def collection(memoize: bool, **privacy: Any) -> Collection:
    return parse_collection(
        {
            "name": "book",
            "mechanism": "kvue",
            "epsilon": 1.5,
            "key_count": 3,
            "value_range": [-1.0, 1.0],
            "aggregate": {"windows": ["2h", "all"], "estimators": ["unbiased"]},
            "privacy": {"memoize": memoize, **privacy},
        }
    )


def send(state: AggregatorState, records: list[Rec]) -> list[Any]:
    work = plan(state, WireFormat(state.collection), 0, records, b"k")
    assert work is not None
    work.apply(state)
    return work.rejected


def single(c: Collection, offset: int, hour: int, device: bytes, j: int, s: int) -> Rec:
    ts = T0 + hour * HOUR_MS
    value = WireFormat(c).encode_report({"j": j, "s": s}, ts, rid=offset + 1)
    return Rec(offset, ts, device, value)


def test_memoized_device_counts_once_at_its_latest_report() -> None:
    c = collection(True)
    state = AggregatorState(c)
    # device a repeats one report for three hours, changes, then returns to the first
    records = [single(c, i, i, b"a", 1, 2) for i in range(3)]
    records += [single(c, 3, 3, b"a", 2, 0), single(c, 4, 4, b"a", 1, 2), single(c, 5, 4, b"b", 0, 1)]
    assert send(state, records[:2]) == []
    assert state.all_stats().n_reports == 1
    assert send(state, records[2:]) == []
    total = state.all_stats()
    assert total.n_reports == 2  # two devices, each once
    assert state.reports_total == 6  # every report was folded
    # device a's latest report (j=1, s=2) counts, in hour 4's bucket; b's too
    expected = c.mechanism.new_stats().fold({"j": np.array([1, 0]), "s": np.array([2, 1])})
    assert total == expected
    windows = state.window_stats(T0 + 4 * HOUR_MS + 1)
    assert windows["2h"] == expected
    # spent: a sent two distinct reports, b one
    assert sorted(state.device_spent().tolist()) == [1.5, 3.0]


def test_memoized_collection_refuses_gateway_batches() -> None:
    c = collection(True)
    state = AggregatorState(c)
    batch = WireFormat(c).encode_batch({"j": np.array([0, 1]), "s": np.array([1, 2])}, T0)
    rejected = send(state, [Rec(0, T0, b"gateway", batch), single(c, 1, 0, b"a", 0, 0)])
    assert [(r.offset, r.reason) for r in rejected] == [(0, "invalid_report")]
    assert "one report per message" in rejected[0].detail
    assert state.all_stats().n_reports == 1


def test_book_survives_a_checkpoint_exactly() -> None:
    c = collection(True, report_period="1h")
    straight, restarted = AggregatorState(c), AggregatorState(c)
    records = [single(c, i, i // 2, b"d%d" % (i % 2), i % 3, i % 3) for i in range(8)]
    send(straight, records)
    send(restarted, records[:5])
    restarted = AggregatorState.from_bytes(c, restarted.to_bytes())
    send(restarted, records[5:])
    assert restarted.all_stats() == straight.all_stats()
    assert restarted.device_spent().tolist() == straight.device_spent().tolist()
    assert restarted.reports_total == straight.reports_total == 8


@pytest.mark.parametrize("older", [format_3, format_4])
def test_an_older_checkpoint_resumes_exactly(older: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Devices, charges, latest reports and the ledger of a format-3 checkpoint (kept
    apart, sorted by device) or a format-4 one (whole, by row) load into rows, and the
    stream goes on as if never stopped: the same refusals, statistics and spending."""
    c = collection(True, report_period="1h")
    straight, restarted = AggregatorState(c), AggregatorState(c)
    records = [single(c, i, i // 6, b"d%d" % (i % 4), i % 3, i % 3) for i in range(18)]
    refused = send(straight, records[:9]) + send(straight, records[9:])
    before = send(restarted, records[:9])
    payload = msgpack.unpackb(restarted.to_bytes(), raw=False, strict_map_key=False)
    restarted = AggregatorState.from_bytes(c, msgpack.packb(older(payload), use_bin_type=True))
    after = send(restarted, records[9:])
    assert [r.offset for r in before + after] == [r.offset for r in refused] and refused
    assert restarted.all_stats() == straight.all_stats()
    assert sorted(restarted.device_spent().tolist()) == sorted(straight.device_spent().tolist())
    assert restarted.reports_total == straight.reports_total


def test_fresh_reports_each_cost_and_are_all_counted() -> None:
    c = collection(False, lifetime_epsilon=10.0)
    state = AggregatorState(c)
    send(state, [single(c, i, i, b"a", 1, 2) for i in range(4)] + [single(c, 4, 4, b"b", 0, 1)])
    assert state.all_stats().n_reports == 5
    assert sorted(state.device_spent().tolist()) == [1.5, 6.0]


def test_period_ledger_refuses_a_second_report_in_one_period() -> None:
    c = collection(False, report_period="1h")
    state = AggregatorState(c)
    rejected = send(
        state, [single(c, 0, 0, b"a", 1, 2), single(c, 1, 0, b"a", 1, 2), single(c, 2, 1, b"a", 0, 2)]
    )
    assert [(r.offset, r.reason) for r in rejected] == [(1, "budget_exceeded")]
    assert state.all_stats().n_reports == 2


def test_spent_histogram_is_exported() -> None:
    c = collection(True)
    state = AggregatorState(c)
    send(state, [single(c, i, i, b"a", i % 3, 2) for i in range(5)] + [single(c, 5, 0, b"b", 0, 0)])
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(c, lambda: state))
    text = generate_latest(registry).decode()
    assert 'kvldp_device_privacy_spent_epsilon_bucket{collection="book",le="1.5"} 1.0' in text
    assert 'kvldp_device_privacy_spent_epsilon_bucket{collection="book",le="4.5"} 2.0' in text
    assert 'kvldp_device_privacy_spent_epsilon_count{collection="book"} 2.0' in text
    assert 'kvldp_device_privacy_spent_epsilon_sum{collection="book"} 6.0' in text


def test_payload_hashes_tell_payloads_apart() -> None:
    rows = {"j": np.array([1, 1, 2, 1]), "s": np.array([0, 0, 0, 1])}
    h = payload_hashes(rows)
    assert h[0] == h[1] and len(set(h.tolist())) == 3
    bits = {"b": np.array([[1, 2], [1, 2], [2, 1]], dtype=np.uint8)}
    hb = payload_hashes(bits)
    assert hb[0] == hb[1] != hb[2]


def test_a_report_merged_into_the_base_is_retracted_from_it() -> None:
    c = collection(True)
    state = AggregatorState(c)
    send(state, [single(c, 0, 0, b"a", 1, 2), single(c, 1, 0, b"b", 2, 0)])
    state.compact(T0 + 6 * HOUR_MS)  # hour 0 has left every finite window: merged into the base
    assert not state.partition(0).buckets and state.partition(0).base.n_reports == 2
    send(state, [single(c, 2, 6, b"a", 0, 1)])
    assert state.partition(0).base == c.mechanism.new_stats().fold({"j": np.array([2]), "s": np.array([0])})
    assert state.all_stats().n_reports == 2
    assert state.window_stats(T0 + 6 * HOUR_MS + 1)["2h"].n_reports == 1


def test_instantaneous_randomization_charges_every_report_as_an_upper_bound() -> None:
    """Every send is randomized again, so payloads no longer show states: the book charges
    every report the per-send bound, exported as an upper bound, and a bound above the
    device's lifetime cap is no overspending (nothing refused, nothing flagged)."""
    c = collection(True, instantaneous_epsilon=0.5, lifetime_epsilon=3.0)
    randomizer = c.instantaneous_randomizer
    assert randomizer is not None
    bound = randomizer.send_bound(c.epsilon)
    # kvue's eps_out 0.91 < eps_inf - eps1 = 1: two sends of a state reveal at most eps1 + eps_out
    assert bound == pytest.approx((0.5 + randomizer.epsilon_on_output) / 2) and 0.5 < bound < c.epsilon
    state = AggregatorState(c)
    # device a re-sends one state 12 times; kvue's three symbols make many sends alike
    records = [single(c, i, i, b"a", 1, i % 2) for i in range(12)] + [single(c, 12, 0, b"b", 0, 1)]
    assert send(state, records) == []
    assert sorted(state.device_spent().tolist()) == [bound, 12 * bound]
    assert 12 * bound > 3.0 and state.implausible_devices == 0 and not state.rejected_totals()
    assert state.all_stats().n_reports == 2  # each device still counts once, at its latest report
    (book,) = (s.book for s in state.partitions.values())
    assert len(book.pairs) == 0  # no payload hashes kept: every send differs
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(c, lambda: state))
    text = generate_latest(registry).decode()
    assert "kvldp_device_privacy_spent_epsilon_bucket" not in text
    name = "kvldp_device_privacy_spent_epsilon_upper_bound"
    assert f'{name}_bucket{{collection="book",le="{bound:g}"}} 1.0' in text
    assert f'{name}_bucket{{collection="book",le="{10 * bound:g}"}} 1.0' in text
    assert f'{name}_bucket{{collection="book",le="{20 * bound:g}"}} 2.0' in text
    assert f'{name}_count{{collection="book"}} 2.0' in text
    restored = AggregatorState.from_bytes(c, state.to_bytes())
    assert restored.device_spent().tolist() == state.device_spent().tolist()


@pytest.mark.parametrize("memoize", [True, False])
def test_the_tally_of_devices_by_charges_is_the_books_own_count(memoize: bool) -> None:
    """The spent histogram reads how many devices were charged k times, kept as the book
    charges: it equals a count over every device's charges, through a checkpoint too."""
    c = collection(memoize, lifetime_epsilon=100.0)
    state = AggregatorState(c)
    rng = np.random.default_rng(4)
    offset = 0
    for fetch in range(6):
        devices = rng.integers(0, 40, size=50)
        records = [
            single(c, offset + i, fetch, b"d%d" % d, int(rng.integers(0, 3)), int(rng.integers(0, 3)))
            for i, d in enumerate(devices.tolist())
        ]
        offset += len(records)
        send(state, records)
        for book_state in (state, AggregatorState.from_bytes(c, state.to_bytes())):
            charges = (book_state.device_spent() / c.epsilon).round().astype(np.int64)
            values, counts = np.unique(charges, return_counts=True)
            assert book_state.devices_by_charges() == dict(zip(values.tolist(), counts.tolist(), strict=True))
    assert max(state.devices_by_charges()) > 1  # devices charged more than once were tallied
