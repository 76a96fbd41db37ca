"""``kvldp produce`` says what Kafka acknowledged on every exit path: stopped by Ctrl-C or
SIGTERM (exit 128 + signal), or cut off by a broker that stops answering (exit 2 within
its ``--delivery-timeout``). The acknowledged count is checked against the records the
reports topic holds, on Apache Kafka."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvldp.broker.apache_kafka import ApacheKafka

from support.gateway_double import GatewayDouble, reports_in
from support.pipeline import collection_toml, eventually, records_in, topic_size, unique_collection

pytestmark = pytest.mark.asyncio

USERS = 200_000
COUNTS = re.compile(
    r"(\d+) reports? acknowledged by (?:Kafka|the gateway), (\d+) sent but not acknowledged, (\d+) not sent"
)


def start_produce(toml: Path, *flags: str) -> subprocess.Popen[str]:
    """``kvldp produce`` of ``USERS`` simulated devices at 20,000 reports per second (to
    where ``flags`` say): it runs for seconds, long enough to be stopped part way."""
    return subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "kvldp",
            "produce",
            "--collection",
            str(toml),
            "--simulate",
            "uniform",
            "--users",
            str(USERS),
            "--rate",
            "20000",
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


async def some_reports_in(bootstrap: str, topic: str, proc: subprocess.Popen[str]) -> None:
    async def arrived() -> bool:
        assert proc.poll() is None, "produce ended before it could be stopped"
        return await topic_size(bootstrap, topic) > 0

    await eventually(arrived, 60, f"the first reports in {topic}")


def summary(stderr: str) -> tuple[int, int, int]:
    found = COUNTS.search(stderr)
    assert found is not None, stderr
    acknowledged, unacknowledged, not_sent = (int(n) for n in found.groups())
    return acknowledged, unacknowledged, not_sent


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
async def test_a_stopped_produce_counts_what_kafka_holds(
    apache_kafka: ApacheKafka, tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    """Stopped part way, produce waits for the messages in flight: every report it handed
    over is acknowledged (none pending), the acknowledged count is exactly what the topic
    holds, and the rest is counted as not sent."""
    collection = unique_collection()
    toml = collection_toml(collection, tmp_path / "c.toml")
    bootstrap = apache_kafka.bootstrap_servers
    proc = start_produce(toml, "--bootstrap-servers", bootstrap)
    try:
        await some_reports_in(bootstrap, collection.reports_topic, proc)
        proc.send_signal(sig)
        _, stderr = await asyncio.to_thread(proc.communicate, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, stderr
    assert "interrupted: " in stderr and "Traceback" not in stderr
    acknowledged, unacknowledged, not_sent = summary(stderr)
    assert unacknowledged == 0
    assert acknowledged == await records_in(bootstrap, collection.reports_topic)
    assert 0 < acknowledged < USERS and acknowledged + not_sent == USERS


async def test_a_stopped_produce_counts_what_the_gateway_took(tmp_path: Path) -> None:
    """Through ``--endpoint`` the same: what the gateway accepted is what produce counts
    as acknowledged."""
    toml = collection_toml(unique_collection(), tmp_path / "c.toml")
    token_file = tmp_path / "token"
    token_file.write_text("t0")
    double = GatewayDouble(tokens={"t0"})
    url = await double.start()
    proc = start_produce(toml, "--endpoint", url, "--token-file", str(token_file), "--batch-size", "64")
    try:

        async def arrived() -> bool:
            assert proc.poll() is None, "produce ended before it could be stopped"
            return bool(double.received)

        await eventually(arrived, 60, "the first reports at the gateway")
        proc.send_signal(signal.SIGINT)
        _, stderr = await asyncio.to_thread(proc.communicate, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await double.stop()
    assert proc.returncode == 130, stderr
    assert "interrupted: " in stderr and "acknowledged by the gateway" in stderr
    acknowledged, unacknowledged, not_sent = summary(stderr)
    assert unacknowledged == 0
    assert acknowledged == sum(reports_in(request.body) for request in double.received)
    assert 0 < acknowledged < USERS and acknowledged + not_sent == USERS


@pytest.fixture
def own_kafka() -> Iterator[ApacheKafka]:
    """An Apache Kafka node of this test alone: it is paused."""
    with ApacheKafka(1) as running:
        yield running


async def test_a_broker_that_stops_answering_ends_produce_with_the_counts(
    own_kafka: ApacheKafka, tmp_path: Path
) -> None:
    """The broker freezes mid-run (SIGSTOP): produce gives up after its delivery timeout
    with one error line and status 2; the reports it counts as acknowledged are in the
    topic, and the topic holds no more than those plus the ones it counts as sent but not
    acknowledged (a frozen broker may still store what it had received)."""
    collection = unique_collection()
    toml = collection_toml(collection, tmp_path / "c.toml")
    bootstrap = own_kafka.bootstrap_servers
    node = own_kafka.pids[1]
    proc = start_produce(toml, "--bootstrap-servers", bootstrap, "--delivery-timeout", "0.5")
    try:
        await some_reports_in(bootstrap, collection.reports_topic, proc)
        os.kill(node, signal.SIGSTOP)
        _, stderr = await asyncio.to_thread(proc.communicate, timeout=60)
    finally:
        os.kill(node, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("kvldp: error: ") and "Traceback" not in stderr, stderr
    acknowledged, unacknowledged, not_sent = summary(lines[-1])
    assert unacknowledged > 0 and acknowledged + unacknowledged + not_sent == USERS
    held = await records_in(bootstrap, collection.reports_topic)
    assert acknowledged <= held <= acknowledged + unacknowledged
