"""A device state file shared by several collectors: every change under the file's lock,
applied to what the file holds; a bounded wait for the lock; file systems (and platforms)
where the lock cannot be kept are refused.

No Kafka: the collectors publish into a fake producer. Processes racing on one file are
tests/test_state_races.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.errors import KvldpError
from kvldp.common.files import file_lock
from kvldp.producer import Collector, LockTimeout, PrivacyBudgetExhausted, ReportStatus
from kvldp.producer.device_state import DeviceState, InvalidDeviceState

from support.producer import FakeProducer, phones

NOW = 1_800_000_000.0  # a period boundary of "1h"
#: the lock wait under test, and what a loaded machine (two test processes on two cores)
#: may add to it before the refusal is raised
WAIT_S = 0.3
LOADED_MARGIN_S = 2.0


def collection(privacy: dict[str, Any] | None) -> Collection:
    return phones(privacy, "shared")


def sdk(c: Collection, path: Path, **options: Any) -> tuple[Collector, FakeProducer]:
    fake = FakeProducer()
    collector = Collector(
        c,
        "unused:9092",
        producer=fake,  # type: ignore[arg-type]
        state_path=path,
        clock=lambda: NOW,
        rng=np.random.default_rng(0),
        **options,
    )
    return collector, fake


def test_two_collectors_on_one_file_send_one_report_per_period(tmp_path: Path) -> None:
    """Two collectors of one process (an app and its service, each with its own copy of
    the state) report in the same period: the second sees the first's report in the file."""
    c = collection({"report_period": "1h"})
    path = tmp_path / "phone.state"
    (app, app_sent), (service, service_sent) = sdk(c, path), sdk(c, path)
    assert app.device_id == service.device_id
    assert asyncio.run(app.report({"a": 1.0})) is ReportStatus.SENT
    assert asyncio.run(service.report({"a": 1.0})) is ReportStatus.SKIPPED_PERIOD
    assert len(app_sent.sent) + len(service_sent.sent) == 1
    assert DeviceState.load(path, c).charged == 1
    assert app.privacy_spent() == service.privacy_spent() == pytest.approx(c.epsilon)


def test_two_collectors_on_one_file_share_one_lifetime_cap(tmp_path: Path) -> None:
    c = collection({"lifetime_epsilon": 4.5})  # 1.5 per report: three in all
    path = tmp_path / "phone.state"
    (app, app_sent), (service, service_sent) = sdk(c, path), sdk(c, path)
    sent = 0
    for _ in range(3):
        for collector in (app, service):
            with contextlib.suppress(PrivacyBudgetExhausted):
                sent += asyncio.run(collector.report({"a": 1.0})) is ReportStatus.SENT
    assert sent == len(app_sent.sent) + len(service_sent.sent) == 3
    assert DeviceState.load(path, c).charged == 3
    assert app.privacy_remaining() == service.privacy_remaining() == 0.0


def test_what_every_collector_writes_is_kept(tmp_path: Path) -> None:
    """Without a [privacy] table each collector counts its own reports; none overwrites the
    other's count. A device id given to the second is written under the lock too."""
    c = collection(None)
    path = tmp_path / "phone.state"
    (first, _), (second, _) = sdk(c, path), sdk(c, path)
    for collector in (first, second, first):
        asyncio.run(collector.report({"a": 1.0}))
    assert DeviceState.load(path, c).charged == 3
    assert first.privacy_spent() == second.privacy_spent() == pytest.approx(3 * c.epsilon)
    renamed, _ = sdk(c, path, device_id="till-7")
    assert DeviceState.load(path, c).device_id == "till-7" and renamed.device_id == "till-7"
    assert DeviceState.load(path, c).charged == 3


def test_a_held_lock_is_waited_for_within_a_bound_then_refused_naming_the_file(tmp_path: Path) -> None:
    """Two opens in one process exclude each other (flock belongs to the open file)."""
    c = collection({"report_period": "1h"})
    path = tmp_path / "phone.state"
    holder = DeviceState.open(path, c)
    waiter = DeviceState.open(path, c, lock_timeout=WAIT_S)
    with holder.locked():
        started = time.monotonic()
        with pytest.raises(LockTimeout) as refused:
            waiter.fresh(c, period=1)
        waited = time.monotonic() - started
    message = str(refused.value)
    assert isinstance(refused.value, KvldpError) and "\n" not in message
    assert message.startswith(f"device state {path}: another process held its lock ({path}.lock)")
    assert f"for all of the {WAIT_S:g} s" in message
    assert WAIT_S <= waited < WAIT_S + LOADED_MARGIN_S
    assert DeviceState.load(path, c).charged == 0  # nothing was changed
    with pytest.raises(LockTimeout, match=str(path)), holder.locked():  # opening waits as well
        DeviceState.open(path, c, lock_timeout=0)
    assert waiter.fresh(c, period=1) is ReportStatus.SENT  # once released, the lock is free


def test_the_lock_of_a_process_killed_while_holding_it_is_free(tmp_path: Path) -> None:
    c = collection({"report_period": "1h"})
    path = tmp_path / "phone.state"
    state = DeviceState.open(path, c, lock_timeout=WAIT_S)
    # a child takes the lock, says so, and is killed while it holds it
    code = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(file_lock.lock_file(path))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == "held\n"
            with pytest.raises(LockTimeout):
                state.fresh(c, period=1)
        finally:
            child.send_signal(signal.SIGKILL)
    assert child.returncode == -signal.SIGKILL
    assert state.fresh(c, period=1) is ReportStatus.SENT


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ENOLCK, "No locks available"),
        (errno.ENOSYS, "Function not implemented"),
        (errno.EOPNOTSUPP, "Operation not supported"),
        (errno.EINVAL, "Invalid argument"),
    ],
)
def test_a_file_system_that_cannot_lock_is_refused_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, reason: str
) -> None:
    def cannot(fd: int, operation: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", cannot)
    path = tmp_path / "phone.state"
    with pytest.raises(InvalidDeviceState) as refused:
        Collector(collection({"memoize": True}), "unused:9092", state_path=path)
    message = str(refused.value)
    assert message == (
        f"device state {path}: the file system cannot lock {path}.lock ({reason}); "
        "keep the state on a local file system"
    )
    assert not path.exists()


def test_a_file_system_that_ignores_locks_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mount that grants every lock (as some FUSE and network mounts do) is caught when
    the state is opened: a second lock of the held lock file must be refused."""
    monkeypatch.setattr(fcntl, "flock", lambda fd, operation: None)
    path = tmp_path / "phone.state"
    for opening in (
        lambda: DeviceState.open(path, collection({"memoize": True})),
        lambda: Collector(collection({"memoize": True}), "unused:9092", state_path=path),
    ):
        with pytest.raises(InvalidDeviceState) as refused:
            opening()
        message = str(refused.value)
        assert message.startswith(f"device state {path}: the file system does not enforce locks")
        assert f"a second lock of {path}.lock was granted while one was held" in message
        assert "\n" not in message and not path.exists()


def test_a_platform_without_flock_refuses_a_state_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_lock, "fcntl", None)  # as on Windows
    path = tmp_path / "phone.state"
    with pytest.raises(InvalidDeviceState, match=f"^device state {path}: this platform has no fcntl.flock"):
        Collector(collection({"memoize": True}), "unused:9092", state_path=path)
    in_memory = Collector(collection({"memoize": True}), "unused:9092", producer=FakeProducer())  # type: ignore[arg-type]
    assert asyncio.run(in_memory.report({"a": 1.0})) is ReportStatus.SENT
    assert list(tmp_path.iterdir()) == []


def test_a_fleet_directory_keeps_one_locked_file_per_device(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A gateway's (or kvldp produce's) devices with ``state_dir``: one state file each,
    named for the collection and a digest of the id (any id makes a safe name), the id
    inside; a second collector on the directory sees what the first spent."""
    c = parse_collection(
        {
            "name": "tills",
            "mechanism": "pckv_grr",
            "epsilon": 1.5,
            "keys": ["a", "b"],
            "value_range": [0.0, 10.0],
            # the aggregator takes one report per device and period: in memory, a warning
            "privacy": {"memoize": True, "report_period": "1h"},
        }
    )
    ids = ["till-1", "../../etc/passwd", "a/b", "ü" * 300, ".lock", "x\x00y"]
    directory = tmp_path / "states" / "deeper"  # created if missing

    def gateway() -> tuple[Collector, FakeProducer]:
        fake = FakeProducer()
        collector = Collector(
            c,
            "unused:9092",
            producer=fake,  # type: ignore[arg-type]
            clock=lambda: NOW,
            state_dir=directory,
        )
        return collector, fake

    with caplog.at_level("WARNING", logger="kvldp.producer"):
        (first, first_sent), (second, second_sent) = gateway(), gateway()
        summary = asyncio.run(first.report_many([{"a": 1.0}] * len(ids), ids))
        assert summary.sent == len(ids) and len(first_sent.sent) == len(ids)
        again = asyncio.run(second.report_many([{"a": 1.0}] * len(ids), ids))
        assert again.skipped_period == len(ids) and second_sent.sent == []
    assert not caplog.records  # nothing is kept in memory only: no warning
    files = sorted(p.name for p in directory.iterdir())
    assert len(files) == 2 * len(ids)
    names = [f for f in files if not f.endswith(".lock")]
    assert all(
        f.startswith("tills.") and f.endswith(".state") and len(f) == len("tills.") + 64 + 6 for f in names
    )
    stored = {DeviceState.load(directory / f, c).device_id for f in names}
    assert stored == set(ids)
    for device in ids:  # what the first spent, read from the files by a collector that never sent
        assert second.privacy_spent(device) == pytest.approx(c.epsilon)
        assert gateway()[0].privacy_spent(device) == pytest.approx(c.epsilon)
    assert gateway()[0].privacy_spent("never-seen") == 0.0
    assert not (directory / f"tills.{'0' * 64}.state").exists()


def test_an_unusable_fleet_directory_is_refused_up_front(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(InvalidDeviceState) as refused:
        Collector(collection({"memoize": True}), "unused:9092", state_dir=a_file)
    assert str(refused.value) == f"device state directory {a_file}: is not a directory"


def test_a_report_for_a_period_before_the_files_last_one_is_skipped(tmp_path: Path) -> None:
    """Processes sharing a file take its lock in any order: one whose clock is behind (its
    report is for period p) may come after another already reported in p + 1, having
    reported in p too. Only periods after the last one reported are open, so the periods
    of the reports sent strictly increase: never two in one. The same holds for the
    aggregator's budget windows the device mirrors."""
    c = collection({"memoize": True, "report_period": "1h"})
    path = tmp_path / "phone.state"
    state = DeviceState.open(path, c)
    keys, values = np.array([0]), np.array([0.2])
    assert state.fresh(c, period=10) is ReportStatus.SENT
    assert state.fresh(c, period=11) is ReportStatus.SENT
    assert state.fresh(c, period=10) is ReportStatus.SKIPPED_PERIOD
    assert state.memoized(c, keys, values, period=11)[0] is ReportStatus.SKIPPED_PERIOD
    assert state.memoized(c, keys, values, period=12)[0] is ReportStatus.SENT
    assert state.memoized(c, keys, values, period=11)[0] is ReportStatus.SKIPPED_PERIOD
    assert DeviceState.load(path, c).charged == 3

    budgeted = parse_collection(
        {
            "name": "budgeted",
            "mechanism": "pckv_grr",
            "epsilon": 1.5,
            "keys": ["a"],
            "value_range": [0.0, 10.0],
            "aggregate": {"max_reports_per_device": 2, "budget_window": "1d"},
        }
    )
    state = DeviceState.open(tmp_path / "budgeted.state", budgeted)
    assert [state.fresh(budgeted, None, window=w) for w in (5, 6, 5, 6, 6)] == [
        ReportStatus.SENT,
        ReportStatus.SENT,
        ReportStatus.SKIPPED_BUDGET,  # window 5's count was left behind: not counted afresh
        ReportStatus.SENT,
        ReportStatus.SKIPPED_BUDGET,
    ]
