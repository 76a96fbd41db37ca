"""PrivKVM's rounds without Kafka: control records, the round policy, the server's round
state and round book, ingest's round checks, the device's per-round budget, and the
estimators on rounds with different participants."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from kvldp.aggregator.ingest import plan
from kvldp.aggregator.merged import MergedExporter
from kvldp.aggregator.offline import fold_recording
from kvldp.aggregator.round_state import RoundBook, RoundState
from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.state import AggregatorState, CheckpointStore
from kvldp.aggregator.tag_index import TagIndex
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import Stats
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.common.mechanisms.privkvm_rounds import means_digest
from kvldp.common.messages.control_record import Control, InvalidControl, decode_control
from kvldp.common.messages.wire import WireFormat
from kvldp.common.spec.collection_fields import InvalidCollection
from kvldp.producer.batching import BatchingRefused, check_batching
from kvldp.producer.device_state import DeviceState, InvalidDeviceState, ReportStatus

from support import Rec, multi_key_population
from support.checkpoint_formats import format_4


def privkvm_collection(name: str = "pk", privacy: dict[str, Any] | None = None, **params: Any) -> Collection:
    table: dict[str, Any] = {
        "name": name,
        "mechanism": "privkvm",
        "epsilon": 2.0,
        "key_count": 3,
        "value_range": [-1.0, 1.0],
        "params": {"rounds": 3, "round_period": "10s", "round_min_reports": 2, **params},
    }
    if privacy:
        table["privacy"] = privacy
    return parse_collection(table)


def mechanism_of(collection: Collection) -> PrivKVM:
    mech = collection.mechanism
    assert isinstance(mech, PrivKVM)
    return mech


# ---------------------------------------------------------------------- policy and control
@pytest.mark.parametrize(
    ("params", "privacy", "message"),
    [
        ({"rounds": 0}, None, "params: parameter rounds=0 is out of range"),
        ({"adaptive": True}, None, "adaptive = true needs a0 > 0"),
        ({"a0": 0.1}, None, "a0 is the threshold of the adaptive rule"),
        ({"round_period": "soon"}, None, "parameter round_period='soon' is out of range"),
        ({"round_min_reports": 0}, None, "parameter round_min_reports=0 is out of range"),
        ({}, {"report_period": "1h"}, "privacy.report_period: privkvm devices report once per round"),
    ],
)
def test_inconsistent_round_policies_are_refused_naming_the_field(
    params: dict[str, Any], privacy: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(InvalidCollection, match=message.replace("(", r"\(").replace("+", r"\+")):
        privkvm_collection(privacy=privacy, **params)


def test_round_costs_add_up_to_epsilon_in_both_budget_modes() -> None:
    for mode in ("default", "per_round_equal"):
        mech = mechanism_of(privkvm_collection(budget_mode=mode, rounds=4))
        costs = [mech.round_epsilon(r) for r in range(4)]
        assert sum(costs) == pytest.approx(2.0, rel=1e-12)
        if mode == "default":
            assert costs == pytest.approx([1.0 + 0.25, 0.25, 0.25, 0.25])
        else:
            assert costs == pytest.approx([0.5] * 4)


def test_control_records_round_trip_and_bad_ones_are_refused_with_a_reason() -> None:
    c = privkvm_collection()
    means = np.array([0.25, -0.5, 1.0])
    good = Control.build(c, 1, means, complete=False)
    back = decode_control(c, good.to_bytes())
    assert back.round == 1 and not back.complete and back.means_digest == means_digest(1, means)
    np.testing.assert_array_equal(back.means, means)

    def tampered(**change: Any) -> bytes:
        obj = msgpack.unpackb(good.to_bytes(), raw=False)
        obj.update(change)
        return bytes(msgpack.packb(obj, use_bin_type=True))

    cases = {
        "not msgpack": b"\xc1garbage",
        "not a kvldp control record": msgpack.packb({"hello": 1}),
        "of collection 'other'": tampered(col="other"),
        "digest does not match": tampered(md=good.means_digest ^ 1),
        "not 3 float64": tampered(means=b"\x00" * 16),
        "not all in \\[-1, 1\\]": tampered(means=np.array([2.0, 0, 0]).tobytes()),
        "opens round 4 of 3": tampered(round=3),
        "empty control record": None,
    }
    for reason, data in cases.items():
        with pytest.raises(InvalidControl, match=reason):
            decode_control(c, data)
    other = privkvm_collection(rounds=4)  # same name, other configuration
    with pytest.raises(InvalidControl, match="digest"):
        decode_control(other, good.to_bytes())


# ---------------------------------------------------------------------- the server's rounds
def counts_of(mech: PrivKVM, users: KVData, rng: np.random.Generator) -> np.ndarray:
    return mech.collect(users, rng).arrays["counts"]


def test_a_round_closes_on_enough_reports_and_a_period_and_publishes_the_reference_means() -> None:
    c = privkvm_collection(round_min_reports=100)
    mech = mechanism_of(c)
    rounds = RoundState.start(c, now_ms=0)
    rounds.open_reports = 99
    assert not rounds.due(20_000)  # too few reports
    rounds.open_reports = 100
    assert not rounds.due(9_999) and rounds.due(10_000)  # the period
    counts = counts_of(
        mech, multi_key_population(3000, 3, np.random.default_rng(1)), np.random.default_rng(2)
    )
    reference = mech.published_means(counts.astype(np.float64))
    for r in range(3):
        assert rounds.open_round == r and not rounds.complete
        rounds.close(counts, now_ms=10_000 * (r + 1))
        np.testing.assert_array_equal(rounds.published[r + 1], reference[r + 1])
        assert rounds.open_reports == 0 and rounds.opened_ms == 10_000 * (r + 1)
    assert rounds.complete and rounds.closed == 3 and not rounds.due(10**9)
    again = RoundState.from_wire(c, msgpack.unpackb(msgpack.packb(rounds.to_wire())))
    assert again.control().to_bytes() == rounds.control().to_bytes() and again.closed_ms == rounds.closed_ms


def test_the_adaptive_rule_stops_in_process_and_live_at_the_same_round() -> None:
    c = privkvm_collection(rounds=8, adaptive=True, a0=0.5)
    mech = mechanism_of(c)
    users = multi_key_population(4000, 3, np.random.default_rng(3))
    stats = mech.collect(users, np.random.default_rng(4))
    per_round = stats.arrays["counts"].sum(axis=(1, 2))
    ran = int(np.sum(per_round > 0))
    assert 1 <= ran < 8 and np.all(per_round[:ran] == 4000)
    means = mech.published_means(stats.arrays["counts"].astype(np.float64))
    moved = [np.mean(np.abs(means[r + 1] - means[r])) for r in range(ran)]
    assert moved[-1] <= 0.5 and all(m > 0.5 for m in moved[:-1])
    rounds = RoundState.start(c, 0)
    while not rounds.complete:
        rounds.close(stats.arrays["counts"], 1)
    assert rounds.closed == ran


def test_reports_of_another_round_or_other_means_are_stale_or_mismatched() -> None:
    c = privkvm_collection()
    rounds = RoundState.start(c, 0)
    rounds.close(np.ones((3, 3, 3), dtype=np.int64), 1)  # round 2 open
    good = means_digest(1, rounds.published[1])
    reports = {
        "r": np.array([1, 0, 2, 1]),
        "md": np.array([good, good, good, good ^ 5]),
        "j": np.zeros(4),
        "s": np.ones(4),
    }
    bad, reason, detail = rounds.gate(reports)
    assert bad.tolist() == [False, True, True, True]
    assert reason.tolist() == ["", "stale_round", "stale_round", "round_mismatch"]
    assert detail[1] == "report for round 1; round 2 is open"
    rounds.close(np.ones((3, 3, 3), dtype=np.int64), 2)
    rounds.close(np.ones((3, 3, 3), dtype=np.int64), 3)
    assert rounds.complete
    bad, reason, detail = rounds.gate(reports)
    assert bad.all() and set(reason) == {"stale_round"} and "the rounds are complete" in detail[0]


def test_the_round_book_admits_one_report_per_device_and_round_and_counts_the_spend() -> None:
    book, index = RoundBook(), TagIndex()

    def charge(devices: list[int], round_index: int) -> list[bool]:
        tags = np.array(devices, dtype=np.uint64)
        admitted = book.assess(tags, index.find(tags), round_index)
        book.commit(index.add(tags[admitted]), round_index)
        return [bool(a) for a in admitted]

    assert charge([5, 7, 5], 0) == [True, True, False]
    assert charge([7, 9], 0) == [False, True]
    assert charge([5, 9], 2) == [True, True]
    rows = index.find(np.array([5, 7, 9], dtype=np.uint64))
    assert book.masks_of(rows).tolist() == [0b101, 0b001, 0b101]
    assert book.by_mask == {0b101: 2, 0b001: 1}  # what the spent histogram reads
    np.testing.assert_allclose(book.spent(np.array([1.0, 0.5, 0.25])), [1.25, 1.0, 1.25])


def test_ingest_dead_letters_rounds_means_repeats_and_batches_with_their_reasons(tmp_path: Path) -> None:
    c = privkvm_collection()
    state = AggregatorState(c)
    assert state.rounds is not None
    state.rounds.close(np.ones((3, 3, 3), dtype=np.int64), 1)  # round 2 open
    wire = WireFormat(c)
    md = means_digest(1, state.rounds.published[1])

    def report(r: int, digest: int) -> bytes:
        return wire.encode_report({"r": r, "md": digest, "j": 1, "s": 2}, ts_ms=1000, rid=None)

    records = [
        Rec(0, 1000, b"a", report(1, md)),
        Rec(1, 1000, b"b", report(0, means_digest(0, np.zeros(3)))),  # round 1 is closed
        Rec(2, 1000, b"c", report(1, md ^ 1)),
        Rec(3, 1000, b"a", report(1, md)),  # a's second report in round 2
        Rec(
            4,
            1000,
            b"d",
            wire.encode_batch(
                {
                    "r": np.array([1, 1]),
                    "md": np.array([md, md]),
                    "j": np.array([0, 1]),
                    "s": np.array([1, 1]),
                }
            ),
        ),
        Rec(5, 1000, b"e", report(1, md)),
    ]
    work = plan(state, wire, 0, records, b"key")
    assert work is not None
    assert [(r.offset, r.reason) for r in work.rejected] == [
        (1, "stale_round"),
        (2, "round_mismatch"),
        (3, "budget_exceeded"),
        (4, "invalid_report"),
    ]
    work.apply(state)
    assert state.rounds.open_reports == 2 and state.reports_total == 2
    assert state.all_stats().arrays["counts"][1].sum() == 2
    # the checkpoint keeps the rounds and the round book
    back = AggregatorState.from_bytes(c, state.to_bytes())
    assert back.rounds is not None and back.rounds.open_round == 1
    payload = msgpack.unpackb(state.to_bytes(), raw=False, strict_map_key=False)
    older = AggregatorState.from_bytes(c, msgpack.packb(format_4(payload), use_bin_type=True))
    store = CheckpointStore(tmp_path, c)
    store.save(store.take(state))
    saved = store.load()
    assert saved is not None
    for restored in (back, older, saved, AggregatorState.from_bytes(c, state.head_bytes(), rows=False)):
        assert restored.devices_by_rounds() == state.devices_by_rounds() == {0b10: 2}
    again = plan(saved, wire, 0, [Rec(6, 1000, b"e", report(1, md))], b"key")  # e's second report
    assert again is not None and [r.reason for r in again.rejected] == ["budget_exceeded"]
    np.testing.assert_allclose(np.sort(back.device_spent()), [1.0 / 3.0] * 2)


def test_interactive_collections_take_one_report_per_message() -> None:
    with pytest.raises(BatchingRefused, match="reports once per device and round"):
        check_batching(privkvm_collection(), 10)


# ---------------------------------------------------------------------- the device's budget
def test_a_device_spends_each_round_once_and_never_more_than_epsilon(tmp_path: Any) -> None:
    c = privkvm_collection()
    mech = mechanism_of(c)
    state = DeviceState.open(tmp_path / "device", c)
    assert state.round_report(c, 0) is ReportStatus.SENT
    assert state.round_report(c, 0) is ReportStatus.SKIPPED_ROUND
    assert state.spent(c) == pytest.approx(mech.round_epsilon(0))
    reopened = DeviceState.open(tmp_path / "device", c)  # the spend was written first
    assert reopened.rounds == [0] and reopened.round_report(c, 0) is ReportStatus.SKIPPED_ROUND
    assert reopened.round_report(c, 2) is ReportStatus.SENT  # joined round 2 late: fine
    assert reopened.round_report(c, 1) is ReportStatus.SENT
    assert reopened.spent(c) == pytest.approx(c.epsilon, rel=1e-12)
    capped = privkvm_collection(privacy={"lifetime_epsilon": 1.4})
    device = DeviceState.new(capped)
    assert device.round_report(capped, 0) is ReportStatus.SENT  # 1 + 1/3
    assert device.round_report(capped, 1) is ReportStatus.EXHAUSTED
    assert device.rounds == [0]


def test_device_state_files_of_version_one_still_load(tmp_path: Any) -> None:
    c = privkvm_collection()
    state = DeviceState.open(tmp_path / "d", c)
    obj = msgpack.unpackb((tmp_path / "d").read_bytes(), raw=False)
    for newer in ("rounds", "budget_window", "budget_used"):  # the fields of versions 2 and 3
        del obj[newer]
    obj["version"] = 1
    (tmp_path / "d").write_bytes(msgpack.packb(obj, use_bin_type=True))
    assert DeviceState.load(tmp_path / "d", c).rounds == [] == state.rounds
    obj["rounds"] = [0]
    (tmp_path / "d").write_bytes(msgpack.packb(obj, use_bin_type=True))
    with pytest.raises(InvalidDeviceState, match="fields"):
        DeviceState.load(tmp_path / "d", c)


# ---------------------------------------------------------------------- estimators
def collect_with_joiners(mech: PrivKVM, users: KVData, join: np.ndarray, rng: np.random.Generator) -> Stats:
    """The rounds in-process where user u takes part from round join[u] on."""
    stats = mech.new_stats()
    for r in range(mech.rounds):
        published = mech.published_means(stats.arrays["counts"].astype(np.float64))[r]
        members = users.take(np.flatnonzero(join <= r))
        stats.fold(mech.perturb_round_many(members, rng, r, published))
    return stats


def test_estimates_stay_unbiased_with_honest_errors_when_devices_join_late() -> None:
    """Round 1 has 40% of the devices, round 2 70%, round 3 all: over R = 300 collections
    each estimator's mean error is within 4 sqrt(Var/R) of 0, the empirical variance
    within 4 sqrt(2/R) (relative) of the mean squared standard error, and the exported
    95% intervals of frequencies and means cover the truth within 4 binomial sd."""
    rng = np.random.default_rng(40)
    n = 20_000
    users = multi_key_population(n, 3, rng)
    join = np.searchsorted([0.4, 0.7], rng.random(n), side="right")
    mech = mechanism_of(privkvm_collection())
    truth_f, truth_m = users.truth()
    repeats = 300
    estimators = ("unbiased", "em")
    draws: dict[str, list[np.ndarray]] = {e: [] for e in estimators}
    freq: list[np.ndarray] = []
    errors: dict[str, list[np.ndarray]] = {e: [] for e in estimators}
    covered: dict[str, list[np.ndarray]] = {e: [] for e in estimators}
    for _ in range(repeats):
        stats = collect_with_joiners(mech, users, join, rng)
        assert stats.arrays["counts"].sum(axis=(1, 2)).tolist() == [np.sum(join <= r) for r in range(3)]
        for e in estimators:
            est = mech.estimate(stats, e)
            draws[e].append(est.mean)
            errors[e].append(est.mean_stderr)
            (f_lo, f_hi), (m_lo, m_hi) = est.frequency_interval, est.mean_interval
            covered[e].append(
                np.concatenate([(f_lo <= truth_f) & (truth_f <= f_hi), (m_lo <= truth_m) & (truth_m <= m_hi)])
            )
        freq.append(mech.estimate(stats, "unbiased").frequency)
    f = np.array(freq)
    assert np.all(np.abs(f.mean(axis=0) - truth_f) < 4 * np.sqrt(f.var(axis=0, ddof=1) / repeats))
    for e in estimators:
        d = np.array(draws[e])
        var = d.var(axis=0, ddof=1)
        assert np.all(np.abs(d.mean(axis=0) - truth_m) < 4 * np.sqrt(var / repeats)), e
        ratio = var / np.mean(np.square(errors[e]), axis=0)
        assert np.all(np.abs(ratio - 1) < 4 * math.sqrt(2 / repeats)), (e, ratio)
        hits = np.array(covered[e])
        assert abs(hits.mean() - 0.95) < 4 * math.sqrt(0.95 * 0.05 / hits.size), (e, hits.mean(axis=0))


def test_exported_estimates_use_the_closed_rounds_only() -> None:
    c = privkvm_collection()
    mech = mechanism_of(c)
    stats = mech.collect(multi_key_population(2000, 3, np.random.default_rng(5)), np.random.default_rng(6))
    first = mech.through_round(stats, 1)
    assert first.n_reports == 2000 and first.arrays["counts"][1:].sum() == 0
    np.testing.assert_array_equal(first.arrays["counts"][0], stats.arrays["counts"][0])
    both = mech.estimate(first, "paper").mean
    np.testing.assert_array_equal(both, mech.published_means(stats.arrays["counts"].astype(np.float64))[1])
    virtual = mech.estimate(stats, "virtual")
    np.testing.assert_array_equal(virtual.mean, mech.estimate(first, "virtual").mean)


def test_one_aggregator_decides_the_rounds_and_recordings_are_not_folded_offline(tmp_path: Any) -> None:
    c = privkvm_collection()
    with pytest.raises(KvldpError, match="one aggregator decides its rounds, so it runs with --role all"):
        Aggregator(c, "127.0.0.1:1", role="worker")
    with pytest.raises(KvldpError, match="one aggregator decides its rounds"):
        MergedExporter(c, "127.0.0.1:1")
    with pytest.raises(KvldpError, match="cannot be folded offline"):
        fold_recording(c, tmp_path / "recording")


def test_reports_after_the_last_round_are_stale_and_leave_the_state_alone() -> None:
    c = privkvm_collection()
    state = AggregatorState(c)
    assert state.rounds is not None
    for t in range(3):
        state.rounds.close(np.ones((3, 3, 3), dtype=np.int64), t)
    wire = WireFormat(c)
    late = wire.encode_report(
        {"r": 2, "md": means_digest(2, state.rounds.published[2]), "j": 0, "s": 1}, ts_ms=9
    )
    work = plan(state, wire, 0, [Rec(0, 9, b"a", late), Rec(1, 9, b"b", b"\x00garbage")], b"key")
    assert work is not None and [r.reason for r in work.rejected] == ["stale_round", "undecodable"]
    work.apply(state)
    assert state.partitions[0].next_offset == 2 and state.reports_total == 0 and state.rounds.complete
