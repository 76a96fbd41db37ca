"""A device's privacy over many reports: memoized re-sends, the lifetime cap, one report
per period, the state file, alpha-point rounding, the lifetime audit and simulated fleets.

No Kafka: the collector publishes into a fake producer that keeps what it was given.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import stat
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import numpy as np
import pytest

from kvldp.aggregator.ledger import ADMITTED, Ledger, device_hashes
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.cli import main
from kvldp.cli.produce import unsent_note
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.errors import KvldpError
from kvldp.common.guarantees.memo import alphas, round_values, state_of
from kvldp.common.messages.wire import WireFormat
from kvldp.producer import Collector, PrivacyBudgetExhausted, ReportStatus
from kvldp.producer.batching import BatchingRefused
from kvldp.producer.device_state import DeviceState, FleetSummary, InvalidDeviceState
from kvldp.sim.fleet import FleetSimulation, PeriodReport

from support import record_and_fold, run_kvldp
from support.producer import FakeProducer

T = TypeVar("T")
HOUR = 3600.0
DAY = 24 * HOUR
NOW = 1_800_000_000.0  # a period boundary of "1h": 500,000 hours since the epoch


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def collection(
    privacy: dict[str, Any] | None,
    mechanism: str = "pckv_grr",
    name: str = "dev",
    aggregate: dict[str, Any] | None = None,
) -> Collection:
    table: dict[str, Any] = {
        "name": name,
        "mechanism": mechanism,
        "epsilon": 1.5,
        "keys": ["a", "b", "c", "d"],
        "value_range": [0.0, 10.0],
    }
    if privacy is not None:
        table["privacy"] = privacy
    if aggregate is not None:
        table["aggregate"] = aggregate
    return parse_collection(table)


def limited(limit: int, privacy: dict[str, Any] | None = None) -> Collection:
    """A collection whose aggregator takes ``limit`` reports per device and day."""
    return collection(privacy, aggregate={"max_reports_per_device": limit, "budget_window": "1d"})


def sdk(
    c: Collection, fake: FakeProducer, clock: Clock | None = None, state_path: Path | None = None
) -> Collector:
    return Collector(
        c,
        "unused:9092",
        producer=fake,  # type: ignore[arg-type]
        device_id="phone",
        clock=clock or Clock(),
        state_path=state_path,
        rng=np.random.default_rng(1),
    )


def payload(message: bytes) -> dict[str, Any]:
    body = msgpack.unpackb(message, raw=False)
    return {k: v for k, v in body.items() if k not in ("ts", "rid")}


def test_memoized_resends_are_byte_identical_and_free() -> None:
    c = collection({"memoize": True})
    fake = FakeProducer()
    clock = Clock()
    s = sdk(c, fake, clock)

    async def go() -> list[ReportStatus]:
        statuses = []
        for t in range(20):
            clock.now = NOW + t
            statuses.append(await s.report({"a": 4.0, "c": 9.0}))
        return statuses

    statuses = run(go())
    assert statuses == [ReportStatus.SENT] + [ReportStatus.RESENT] * 19
    assert s.privacy_spent() == pytest.approx(c.epsilon)
    assert s.privacy_remaining() == math.inf
    values = [value for _, value, _ in fake.sent]
    decoded = WireFormat(c).decode(values, [ts for _, _, ts in fake.sent])
    assert not decoded.rejected and len(decoded.message) == 20
    for column in decoded.reports.values():
        assert (column == column[:1]).all()
    assert all(payload(v) == payload(values[0]) for v in values)
    bodies = [msgpack.unpackb(v, raw=False) for v in values]
    assert len({b["rid"] for b in bodies}) == 20  # a fresh report id for each send
    assert (
        [b["ts"] for b in bodies]
        == [ts for _, _, ts in fake.sent]
        == [int((NOW + t) * 1000) for t in range(20)]
    )
    assert {key for key, _, _ in fake.sent} == {b"phone"}
    # a new state costs again; going back to the first one is a re-send
    run(s.report({"b": 1.0}))
    assert run(s.report({"a": 4.0, "c": 9.0})) is ReportStatus.RESENT
    assert s.privacy_spent() == pytest.approx(2 * c.epsilon)


def test_spending_without_memoize_and_the_cap(tmp_path: Path) -> None:
    c = collection({})
    fake = FakeProducer()
    s = sdk(c, fake)
    for _ in range(7):
        assert run(s.report({"a": 1.0})) is ReportStatus.SENT
    assert s.privacy_spent() == pytest.approx(7 * c.epsilon) and len(fake.sent) == 7

    capped = collection({"lifetime_epsilon": 4.0})  # 1.5 per report: two fit
    fake = FakeProducer()
    path = tmp_path / "phone.state"
    s = sdk(capped, fake, state_path=path)
    assert [run(s.report({"a": 1.0})) for _ in range(2)] == [ReportStatus.SENT] * 2
    assert s.privacy_remaining() == pytest.approx(1.0)
    before = path.read_bytes()
    with pytest.raises(PrivacyBudgetExhausted, match="lifetime_epsilon=4"):
        run(s.report({"a": 1.0}))
    assert len(fake.sent) == 2 and path.read_bytes() == before
    assert s.privacy_spent() == pytest.approx(3.0)


def test_memoized_cap_refuses_new_states_but_resends_old_ones() -> None:
    c = collection({"memoize": True, "lifetime_epsilon": 1.5})
    fake = FakeProducer()
    s = sdk(c, fake)
    assert run(s.report({"a": 1.0})) is ReportStatus.SENT
    with pytest.raises(PrivacyBudgetExhausted):
        run(s.report({"b": 1.0}))
    assert run(s.report({"a": 1.0})) is ReportStatus.RESENT
    assert len(fake.sent) == 2


def test_the_spend_is_written_before_the_send(tmp_path: Path) -> None:
    c = collection({"memoize": True, "lifetime_epsilon": 10.0})
    path = tmp_path / "phone.state"
    seen: list[int] = []

    class Watching(FakeProducer):
        async def send(self, topic: str, value: bytes, key: bytes, timestamp_ms: int) -> asyncio.Future[None]:
            seen.append(msgpack.unpackb(path.read_bytes(), raw=False)["charged"])
            return await super().send(topic, value, key, timestamp_ms)

    s = sdk(c, Watching(), state_path=path)
    for pairs in ({"a": 1.0}, {"b": 1.0}, {"a": 1.0}):
        run(s.report(pairs))
    assert seen == [1, 2, 2]
    with pytest.raises(InvalidDeviceState, match=r"directory .*missing does not exist"):
        sdk(c, FakeProducer(), state_path=tmp_path / "missing" / "phone.state")


def test_one_report_per_period() -> None:
    c = collection({"memoize": True, "report_period": "1h"})
    fake = FakeProducer()
    clock = Clock()
    s = sdk(c, fake, clock)
    assert run(s.report({"a": 1.0})) is ReportStatus.SENT
    clock.now = NOW + HOUR - 1
    assert run(s.report({"b": 1.0})) is ReportStatus.SKIPPED_PERIOD
    assert len(fake.sent) == 1
    clock.now = NOW + HOUR
    assert run(s.report({"a": 1.0})) is ReportStatus.RESENT
    clock.now = NOW + 2 * HOUR
    assert run(s.report({"b": 1.0})) is ReportStatus.SENT
    assert len(fake.sent) == 3 and s.privacy_spent() == pytest.approx(2 * c.epsilon)
    assert [ts for _, _, ts in fake.sent] == [int(t * 1000) for t in (NOW, NOW + HOUR, NOW + 2 * HOUR)]


def test_batching_is_refused_where_reports_are_keyed_by_device() -> None:
    for privacy in ({"memoize": True}, {"report_period": "1h"}):
        s = sdk(collection(privacy), FakeProducer())
        with pytest.raises(BatchingRefused, match="batch_size must be 1, got 8"):
            run(s.report_many([{"a": 1.0}] * 8, [f"d{i}" for i in range(8)], batch_size=8))
    fake = FakeProducer()  # a cap alone does not need device keys: a gateway may batch
    s = sdk(collection({"lifetime_epsilon": 100.0}), fake)
    summary = run(s.report_many([{"a": 1.0}] * 8, [f"d{i}" for i in range(8)], batch_size=4))
    assert summary.sent == 8 and len(fake.sent) == 2


def test_state_file_survives_a_restart(tmp_path: Path) -> None:
    c = collection({"memoize": True})
    path = tmp_path / "phone.state"
    first = FakeProducer()
    s = sdk(c, first, state_path=path)
    assert run(s.report({"a": 3.0, "d": 7.0})) is ReportStatus.SENT
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # no temp file left behind; the lock file stays (it is never replaced)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["phone.state", "phone.state.lock"]
    assert stat.S_IMODE(os.stat(tmp_path / "phone.state.lock").st_mode) == 0o600
    secret = s.state.secret

    again = FakeProducer()
    restarted = Collector(c, "unused:9092", producer=again, state_path=path)  # type: ignore[arg-type]
    assert restarted.device_id == "phone" and restarted.state.secret == secret
    assert restarted.privacy_spent() == pytest.approx(c.epsilon)
    assert run(restarted.report({"a": 3.0, "d": 7.0})) is ReportStatus.RESENT
    assert payload(again.sent[0][1]) == payload(first.sent[0][1])
    assert restarted.privacy_spent() == pytest.approx(c.epsilon)


def test_unusable_state_files_are_one_line_errors(tmp_path: Path) -> None:
    c = collection({"memoize": True})
    other = collection({"memoize": True}, name="other")
    theirs = tmp_path / "other.state"
    DeviceState.open(theirs, other)
    corrupt = tmp_path / "corrupt.state"
    corrupt.write_bytes(b"\x93not msgpack at all")
    foreign = tmp_path / "foreign.state"
    foreign.write_bytes(msgpack.packb({"format": "something-else"}))
    broken = tmp_path / "broken.state"
    body = msgpack.unpackb(theirs.read_bytes(), raw=False)
    body.update(collection=c.name, digest=c.digest, secret=b"short")
    broken.write_bytes(msgpack.packb(body, use_bin_type=True))
    for path, reason in (
        (theirs, "belongs to collection 'other'"),
        (corrupt, "undecodable"),
        (foreign, "no format tag"),
        (broken, "'secret'"),
    ):
        before = path.read_bytes()
        with pytest.raises(InvalidDeviceState) as info:
            Collector(c, "unused:9092", producer=FakeProducer(), state_path=path)  # type: ignore[arg-type]
        message = str(info.value)
        assert isinstance(info.value, KvldpError) and str(path) in message and reason in message
        assert "\n" not in message and path.read_bytes() == before


def test_warning_without_state_path_only_where_there_is_something_to_remember(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="kvldp.producer"):
        s = sdk(collection(None), FakeProducer())
        run(s.report({"a": 1.0}))
        assert not caplog.records
        s = sdk(collection({"memoize": True}), FakeProducer())
        run(s.report({"a": 1.0}))
        run(s.report({"a": 2.0}))
    assert len(caplog.records) == 1 and "forgets" in caplog.records[0].getMessage()


def truncations(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The truncation warnings logged so far."""
    return [
        r.getMessage()
        for r in caplog.records
        if "more than ell" in r.getMessage() or "than ell=" in r.getMessage()
    ]


def test_truncation_warned_once_per_device(caplog: pytest.LogCaptureFixture) -> None:
    """PCKV at ell = 1: a device holding two pairs is warned once, whatever it sends next;
    another device once too; devices within ell, and other mechanisms, never."""
    with caplog.at_level(logging.WARNING, logger="kvldp.producer"):
        s = sdk(collection(None), FakeProducer())
        run(s.report({"a": 1.0}))
        assert truncations(caplog) == []
        run(s.report({"a": 1.0, "b": 2.0}))
        run(s.report({"a": 1.0, "b": 2.0, "c": 3.0}))
        run(s.report({"a": 1.0, "b": 2.0}, device_id="tablet"))
        run(s.report({"a": 1.0, "b": 2.0}, device_id="tablet"))
        covered = parse_collection(
            {
                "name": "wide",
                "mechanism": "pckv_ue",
                "epsilon": 1.0,
                "keys": ["a", "b"],
                "value_range": [0.0, 10.0],
                "params": {"ell": 2},
            }
        )
        run(sdk(covered, FakeProducer()).report({"a": 1.0, "b": 2.0}))
        run(sdk(collection(None, mechanism="kvue"), FakeProducer()).report({"a": 1.0, "b": 2.0}))
    messages = truncations(caplog)
    assert len(messages) == 2, messages
    assert "device phone holds 2 pairs, more than ell=1" in messages[0]
    assert "device tablet holds 2 pairs" in messages[1]
    assert all("raise ell" in m and "kvldp advise" in m and "\n" not in m for m in messages)


def test_truncation_warning_of_a_gateway_block_names_a_few(caplog: pytest.LogCaptureFixture) -> None:
    devices = [{"a": 1.0, "b": 2.0, "c": 3.0}] * 8 + [{"d": 1.0}] * 3
    ids = [f"till-{i}" for i in range(len(devices))]
    with caplog.at_level(logging.WARNING, logger="kvldp.producer"):
        s = sdk(collection(None), FakeProducer())
        run(s.report_many(devices, ids, batch_size=4))
        run(s.report_many(devices, ids, batch_size=4))
    messages = truncations(caplog)
    assert len(messages) == 1, messages
    assert "8 devices hold more pairs than ell=1 (till-0: 3 pairs" in messages[0]
    assert "till-4: 3 pairs, and 3 more)" in messages[0] and "till-8" not in messages[0]


def test_a_block_losing_few_pairs_to_ell_warns_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A few devices a pair over ell (1 of 40 holding 3 pairs at ell = 2: 1 of 81 pairs
    uncounted) is the trade-off a larger ell's variance makes worth it: no warning. Half
    of them over ell (20 of 120 pairs uncounted): a warning saying how much."""
    wide = parse_collection(
        {
            "name": "wide",
            "mechanism": "pckv_ue",
            "epsilon": 1.0,
            "keys": ["a", "b", "c"],
            "value_range": [0.0, 10.0],
            "params": {"ell": 2},
        }
    )
    few = [{"a": 1.0, "b": 2.0, "c": 3.0}] + [{"a": 1.0, "b": 2.0}] * 39
    many = [{"a": 1.0, "b": 2.0, "c": 3.0}] * 20 + [{"a": 1.0, "b": 2.0}] * 30
    with caplog.at_level(logging.WARNING, logger="kvldp.producer"):
        s = sdk(wide, FakeProducer())
        run(s.report_many(few, [f"few-{i}" for i in range(len(few))]))
        assert truncations(caplog) == []
        run(s.report_many(many, [f"many-{i}" for i in range(len(many))]))
    (message,) = truncations(caplog)
    assert (
        "20 devices hold more pairs than ell=2" in message
        and "(17% of the pairs sent here go uncounted)" in message
    )


@pytest.mark.parametrize("memoize", [True, False])
def test_truncation_warning_follows_the_device_state(
    memoize: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A memoized re-send is the stored report: no warning, not even after a restart; a
    new report after a restart warns once more (the warning is not part of the state file)."""
    c = collection({"memoize": memoize, "lifetime_epsilon": 100.0})
    path = tmp_path / "phone.state"
    pairs = {"a": 1.0, "b": 2.0}
    with caplog.at_level(logging.WARNING, logger="kvldp.producer"):
        s = sdk(c, FakeProducer(), state_path=path)
        assert run(s.report(pairs)) is ReportStatus.SENT
        assert run(s.report(pairs)) is (ReportStatus.RESENT if memoize else ReportStatus.SENT)
        assert len(truncations(caplog)) == 1
        restarted = sdk(c, FakeProducer(), state_path=path)
        assert run(restarted.report(pairs)) is (ReportStatus.RESENT if memoize else ReportStatus.SENT)
        assert len(truncations(caplog)) == (1 if memoize else 2)
        run(restarted.report({"a": 1.0, "b": 2.0, "c": 3.0}))
        run(restarted.report({"a": 1.0, "b": 2.5, "c": 3.0}))
    assert len(truncations(caplog)) == 2


def test_alpha_rounding_is_unbiased() -> None:
    devices = 4000
    keys = np.arange(4)
    values = np.array([-0.9, -0.3, 0.2, 0.75])
    signs = np.array(
        [
            round_values(keys, values, alphas(hashlib.sha256(b"t%d" % i).digest(), 7, 4))
            for i in range(devices)
        ]
    )
    bound = 4 * np.sqrt((1 - values**2) / devices)
    assert (np.abs(signs.mean(axis=0) - values) < bound).all()


def test_a_device_does_not_pay_for_reports_the_aggregators_budget_would_refuse(tmp_path: Path) -> None:
    for privacy in (None, {"memoize": True}):
        c = limited(2, privacy)
        clock = Clock()
        path = tmp_path / f"{bool(privacy)}.state"
        s = sdk(c, FakeProducer(), clock, state_path=path)
        assert run(s.report({"a": 1.0})) is ReportStatus.SENT
        # a memoized re-send costs nothing, but the aggregator counts it all the same
        assert run(s.report({"a": 1.0})) is (ReportStatus.RESENT if privacy else ReportStatus.SENT)
        spent = s.privacy_spent()
        fake = FakeProducer()
        restarted = sdk(c, fake, clock, state_path=path)  # the count is in the state file
        assert run(restarted.report({"b": 2.0})) is ReportStatus.SKIPPED_BUDGET
        assert restarted.privacy_spent() == spent and fake.sent == []
        clock.now = NOW + DAY
        assert run(restarted.report({"b": 2.0})) is ReportStatus.SENT and len(fake.sent) == 1
    # a state file of version 2 (before the budget count) is still read, with no count
    body = msgpack.unpackb(path.read_bytes(), raw=False)
    del body["budget_window"], body["budget_used"]
    path.write_bytes(msgpack.packb({**body, "version": 2}, use_bin_type=True))
    old = DeviceState.load(path, c)
    assert (old.budget_window, old.budget_used, old.charged) == (None, 0, body["charged"])


def test_every_report_a_fleet_sends_passes_the_aggregators_ledger() -> None:
    c = limited(2)
    fake = FakeProducer()
    clock = Clock()
    s = sdk(c, fake, clock)
    ids = [f"d{i % 3}" for i in range(12)]  # three devices, four reports each per day
    summary = run(s.report_many([{"a": 1.0}] * 12, ids))
    assert (summary.sent, summary.skipped_budget) == (6, 6)
    clock.now = NOW + DAY
    summary = run(s.report_many([{"b": 1.0}] * 3, ids[:3]))
    assert (summary.sent, summary.skipped_budget) == (3, 0)
    assert (s.outcomes.sent, s.outcomes.skipped_budget) == (9, 6)
    windows = np.array([ts for _, _, ts in fake.sent], dtype=np.int64) // int(DAY * 1000)
    hashes = device_hashes(b"ledger key", [key for key, _, _ in fake.sent])
    ones = np.ones(len(fake.sent), dtype=np.int64)
    outcome, _ = Ledger().assess(windows, hashes, np.full(len(fake.sent), -1), ones, 2)
    assert len(fake.sent) == 9 and (outcome == ADMITTED).all()
    assert s.privacy_spent("d0") == pytest.approx(3 * c.epsilon)
    with pytest.raises(BatchingRefused, match="budget_window"):
        run(s.report_many([{"a": 1.0}] * 4, ids[:4], batch_size=2))


def test_a_fleet_over_periods_counts_what_the_aggregator_would_refuse() -> None:
    c = limited(2)
    sim = FleetSimulation(c, "gaussian", 20, periods=3, churn=0.0, now=NOW)  # three hours of one day
    s = Collector(c, "unused:9092", producer=FakeProducer(), clock=sim.clock)  # type: ignore[arg-type]
    reports = run(sim.run(s))
    assert [(r.summary.sent, r.summary.skipped_budget) for r in reports] == [(20, 0), (20, 0), (0, 20)]
    assert "skipped (budget window) 20" in str(reports[2])
    note = unsent_note(c, s.outcomes)
    assert note == (
        "; 20 not sent, nothing spent: their device already sent the aggregator's "
        "max_reports_per_device=2 in this budget_window (1d), so the aggregator would refuse "
        "them as budget_exceeded"
    )
    assert unsent_note(c, FleetSummary(sent=3)) == ""


def test_devices_whose_count_lives_in_memory_are_warned_the_aggregator_may_refuse(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for c, rule in (
        (limited(1), "1 report(s) per device per budget_window (1d)"),
        (collection({"report_period": "1h"}), "one report per device per report_period (1h)"),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kvldp.producer"):
            s = sdk(c, FakeProducer())
            run(s.report({"a": 1.0}))
            run(s.report_many([{"a": 1.0}] * 3, ["x", "y", "z"]))
            run(s.report_many([{"a": 1.0}] * 3, ["u", "v", "w"]))
        messages = [record.getMessage() for record in caplog.records]
        assert len(messages) == 2, messages
        assert "no state_path" in messages[0] and "devices this process reports for" in messages[1]
        assert all(rule in m and "refused as budget_exceeded" in m for m in messages)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvldp.producer"):  # a simulation on fresh topics
        quiet = Collector(limited(1), "unused:9092", producer=FakeProducer(), warn_unsaved=False)  # type: ignore[arg-type]
        run(quiet.report_many([{"a": 1.0}] * 2, [quiet.device_id, "x"]))
    assert not caplog.records


def write_collection(path: Path, privacy: str) -> Path:
    path.write_text(
        'name = "life"\nmechanism = "pckv_grr"\nepsilon = 0.5\nkeys = ["a", "b"]\n'
        f"value_range = [0.0, 1.0]\n[privacy]\n{privacy}\n"
    )
    return path


def audit_json(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> dict[str, Any]:
    code = main(["audit", "--collection", str(path), "--reports", "1000", *extra, "--json"])
    assert code == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_audit_collection_lifetime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    memo = audit_json(capsys, write_collection(tmp_path / "m.toml", "memoize = true"), "--changes", "0")
    assert memo["lifetime_epsilon"] == memo["per_report_epsilon"] == 0.5 and memo["ok"] is True
    assert memo["memoize"] is True and memo["reports"] == 1000 and memo["changes"] == 0
    assert memo["charged"] == 1 and memo["refused"] == 0 and memo["cap"] is None
    changing = audit_json(capsys, write_collection(tmp_path / "m.toml", "memoize = true"), "--changes", "9")
    assert changing["lifetime_epsilon"] == pytest.approx(5.0)
    plain = audit_json(capsys, write_collection(tmp_path / "p.toml", "memoize = false"))
    assert plain["lifetime_epsilon"] == pytest.approx(500.0) and plain["charged"] == 1000
    capped = audit_json(capsys, write_collection(tmp_path / "c.toml", "lifetime_epsilon = 20.0"))
    assert capped["lifetime_epsilon"] == pytest.approx(20.0) and capped["cap"] == 20.0
    assert capped["charged"] == 40 and capped["refused"] == 960
    assert main(["audit", "--collection", str(tmp_path / "c.toml"), "--reports", "5"]) == 0
    assert "spend at most 2.5" in capsys.readouterr().out


def test_audit_names_the_rule_and_horizon_of_every_epsilon_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "daily.toml"
    path.write_text(
        'name = "daily"\nmechanism = "pckv_grr"\nepsilon = 2.0\nkeys = ["a", "b"]\n'
        'value_range = [0.0, 1.0]\n[aggregate]\nmax_reports_per_device = 1\nbudget_window = "1d"\n'
    )
    daily = audit_json(capsys, path)
    assert daily["lifetime_epsilon"] == pytest.approx(2000.0)
    figures = daily["epsilon"]
    assert list(figures) == ["per_report", "per_window", "lifetime"]
    assert all({"epsilon", "rule", "kept_by", "horizon"} <= set(f) for f in figures.values())
    assert figures["per_report"]["horizon"] == "one report" and "pckv_grr" in figures["per_report"]["rule"]
    window = figures["per_window"]
    assert window["epsilon"] == 2.0 and "max_reports_per_device = 1" in window["rule"]
    assert "aggregator's ledger" in window["kept_by"] and window["horizon"] == "one budget_window (1d)"
    lifetime = figures["lifetime"]
    assert lifetime["epsilon"] == pytest.approx(2000.0) and lifetime["kept_by"] == "the device's ledger"
    assert "no [privacy] lifetime_epsilon cap" in lifetime["rule"]
    assert "at least 1000 budget_windows of 1d (1000 days)" in lifetime["horizon"]
    period = audit_json(capsys, write_collection(tmp_path / "p.toml", 'memoize = true\nreport_period = "1h"'))
    assert list(period["epsilon"]) == ["per_report", "per_period", "lifetime"]
    assert "the device (SKIPPED_PERIOD) and the aggregator" in period["epsilon"]["per_period"]["kept_by"]
    assert main(["audit", "--collection", str(path), "--reports", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[1:]] == ["  per_report", "  per_window", "  lifetime"]
    assert (
        "Rule: [aggregate] max_reports_per_device = 1 per budget_window. Kept by the aggregator" in lines[2]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reports", "10"], "privacy.lifetime_epsilon"),
        ([], "--collection needs --reports"),
        (["--reports", "10", "--mechanism", "grr"], "not both"),
        (["--reports", "3", "--changes", "5"], "5 state changes need at least 6 reports"),
    ],
)
def test_audit_collection_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    bad = "lifetime_epsilon = -1.0" if "privacy.lifetime_epsilon" in message else "memoize = true"
    path = write_collection(tmp_path / "bad.toml", bad)
    assert main(["audit", "--collection", str(path), *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1
    assert main(["audit", "--json"]) == 2
    assert "audit needs --mechanism" in capsys.readouterr().err


def test_fleet_resends_exactly_the_unchanged_states() -> None:
    c = collection({"memoize": True, "report_period": "1h"}, mechanism="pckv_ue")
    sim = FleetSimulation(c, "gaussian", 300, periods=3, churn=0.2, seed=4, now=NOW)
    fake = FakeProducer()
    s = Collector(c, "unused:9092", producer=fake, clock=sim.clock)  # type: ignore[arg-type]
    seen: dict[str, set[str]] = {}
    expected = []

    def check(report: PeriodReport) -> None:  # before the next period redraws the population
        new = 0
        for u, device in enumerate(sim.device_ids):
            lo, hi = sim.population.indptr[u], sim.population.indptr[u + 1]
            secret = s.fleet.states[device.encode()].secret
            fingerprint = state_of(
                c.mechanism,
                sim.population.keys[lo:hi],
                sim.population.values[lo:hi],
                alphas(secret, c.digest, c.d),
            ).fingerprint
            states = seen.setdefault(device, set())
            new += fingerprint not in states
            states.add(fingerprint)
        expected.append(new)

    reports = run(sim.run(s, on_period=check))
    assert [r.redrawn for r in reports] == [0, 60, 60]
    assert [r.summary.sent for r in reports] == expected
    assert [r.summary.resent for r in reports] == [300 - n for n in expected]
    assert 0 < expected[1] <= 60 and expected[0] == 300
    assert all(r.summary.skipped_period == r.summary.exhausted == 0 for r in reports)
    assert len(fake.sent) == 900
    spent = sim.spent(s)
    assert spent.max() <= 3 * c.epsilon and np.median(spent) == pytest.approx(c.epsilon)
    stamps = sorted({ts for _, _, ts in fake.sent})
    assert stamps == [int((NOW - k * HOUR) * 1000) for k in (2, 1, 0)]


def test_fleet_counts_devices_over_budget_and_keeps_the_fast_path_without_privacy() -> None:
    c = collection({"lifetime_epsilon": 3.0})  # two reports each
    sim = FleetSimulation(c, "gaussian", 50, periods=3, churn=0.0, now=NOW)
    s = Collector(c, "unused:9092", producer=FakeProducer(), clock=sim.clock)  # type: ignore[arg-type]
    reports = run(sim.run(s, batch_size=10))
    assert [(r.summary.sent, r.summary.exhausted) for r in reports] == [(50, 0), (50, 0), (0, 50)]
    plain = collection(None)
    fake = FakeProducer()
    s = sdk(plain, fake)
    summary = run(s.publish_users(sim.population, sim.device_ids, batch_size=25))
    assert summary.sent == 50 and len(fake.sent) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--from-csv", "CSV", "--periods", "2"], "use it with --simulate"),
        (["--simulate", "gaussian", "--users", "5", "--churn", "0.2"], "--churn goes with --periods"),
        (["--simulate", "gaussian", "--periods", "2"], "--simulate needs --users"),
    ],
)
def test_produce_periods_input_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    path = write_collection(tmp_path / "c.toml", "memoize = true")
    argv = [str(path) if word == "CSV" else word for word in argv]  # any file: the flags are wrong
    assert main(["produce", "--collection", str(path), *argv, "--bootstrap-servers", "127.0.0.1:1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and err.count("\n") == 1


def test_cli_fleet_over_periods_passes_the_aggregators_ledger(broker: EmbeddedBroker, tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'name = "fleet-{uuid.uuid4().hex[:8]}"\nmechanism = "pckv_ue"\nepsilon = 1.0\nkey_count = 6\n'
        'value_range = [-1.0, 1.0]\n[privacy]\nmemoize = true\nreport_period = "1h"\n'
    )
    bootstrap = ["--bootstrap-servers", broker.bootstrap_servers]
    truth = tmp_path / "truth.json"
    common = ["--collection", str(toml), "--simulate", "gaussian", "--users", "200", "--truth", str(truth)]
    done = run_kvldp("produce", *common, "--periods", "3", "--churn", "0.25", *bootstrap)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("period ")]
    assert len(lines) == 3 and "50 devices redrew their pairs" in lines[2]
    assert "epsilon spent per device: median 1, max " in done.stderr
    assert json.loads(truth.read_text())["users"] == 200
    payload = record_and_fold(toml, tmp_path / "fleet.rec", *bootstrap)
    assert payload["reports_total"] == 600 and payload["rejected"] == {}
