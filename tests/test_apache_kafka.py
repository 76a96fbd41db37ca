"""Apache Kafka run by kvldp (:mod:`kvldp.broker.apache_kafka`, ``kvldp broker --apache``):
the pinned jars, one-line errors without Java or jars, a node that accepts writes,
restarts on its storage after a crash, and a command that prints its address and nodes,
stops on SIGTERM leaving no process, and with ``--nodes 3`` forms one cluster of three
brokers that survives losing one."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import psutil
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kvldp.broker import apache_kafka as apache_kafka_module
from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.broker.child_process import HOST, BrokerError, free_port, listening_ports
from kvldp.broker.kafka_install import KAFKA_VERSION, LIBS_ENV, MAIN_JAR
from kvldp.cli import main

from support.package import REPO

#: how long the command may take to start a cluster (a 3-node one takes about 15 s)
#: the namespace of a Maven project file
MAVEN_NS = "http://maven.apache.org/POM/4.0.0"
START_TIMEOUT_S = 120


# ------------------------------------------------------------------ jars and errors
def test_the_pom_and_the_lock_pin_the_version_kvldp_runs() -> None:
    # Maven reads the pom as XML: it must parse as XML (a comment may not hold "--")
    pom = ElementTree.parse(REPO / "deploy" / "apache-kafka" / "pom.xml").getroot()
    assert pom.findtext("m:properties/m:kafka.version", namespaces={"m": MAVEN_NS}) == KAFKA_VERSION
    lock = (REPO / "deploy" / "apache-kafka" / "libs.sha256").read_text().splitlines()
    assert all(re.fullmatch(r"[0-9a-f]{64}  [\w.-]+\.jar", line) for line in lock), lock
    names = [line.split("  ")[1] for line in lock]
    assert MAIN_JAR in names and len(set(names)) == len(names)
    assert any(name.startswith("org.apache.logging.log4j.log4j-slf4j-impl-") for name in names)


def test_missing_jars_are_one_line_naming_make_kafka(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(LIBS_ENV, str(tmp_path))
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(BrokerError, match=r"holds no .*kafka_2\.13.*: run `make kafka`"):
        ApacheKafka(1).start()
    assert main(["broker", "--apache"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "make kafka" in err, err
    assert signal.getsignal(signal.SIGTERM) == handler  # the command's own handlers are gone


def test_missing_java_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError, match="needs Java 17 or newer on PATH: run `make kafka`"):
        ApacheKafka(1).start()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "3"], "--nodes is for Apache Kafka: add --apache"),
        (["--apache", "--tls-key", __file__], "serves plain TCP: drop --tls-cert and --tls-key"),
    ],
)
def test_broker_flags_that_do_not_go_together(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["broker", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_port_asked_for_that_another_process_holds_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server((HOST, 0)) as foreign:
        port = foreign.getsockname()[1]
        assert main(["broker", "--apache", "--port", str(port)]) == 2
    assert capsys.readouterr().err == f"kvldp: error: port {port} on {HOST} is already in use\n"


# ------------------------------------------------------------------ the session's node
async def produce(bootstrap: str, topic: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()


async def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The first ``count`` records of ``topic``, within 30 s."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        values: list[bytes] = []
        async with asyncio.timeout(30):
            while len(values) < count:
                values.append((await consumer.getone()).value)
        return values
    finally:
        await consumer.stop()


@pytest.mark.asyncio
async def test_a_node_restarts_on_its_ports_and_storage_after_a_crash(apache_kafka: ApacheKafka) -> None:
    (node,) = apache_kafka.nodes.values()
    first = apache_kafka.pids[1]
    assert listening_ports(first) == {node.port, node.controller_port, node.tls_port}
    await produce(apache_kafka.bootstrap_servers, "kvldp.test.restart", b"before")
    apache_kafka.kill(1)
    assert not psutil.pid_exists(first) and apache_kafka.pids == {}
    apache_kafka.restart(1)  # from the main thread: the session's node outlives this test
    assert apache_kafka.pids[1] != first and apache_kafka.alive()
    await produce(apache_kafka.bootstrap_servers, "kvldp.test.restart", b"after")
    assert await consume_all(apache_kafka.bootstrap_servers, "kvldp.test.restart", 2) == [b"before", b"after"]


def test_a_port_another_process_takes_first_is_traded_for_a_free_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first free port chosen turns out held by another process when node 1 binds it:
    the cluster is formatted again on fresh ports, and nobody ever connects to that process."""
    with socket.create_server((HOST, 0)) as foreign:
        foreign.setblocking(False)
        taken = foreign.getsockname()[1]
        chosen: list[int] = []

        def choose(host: str = HOST) -> int:
            chosen.append(taken if not chosen else free_port(host))
            return chosen[-1]

        monkeypatch.setattr(apache_kafka_module, "free_port", choose)
        with ApacheKafka(1) as cluster:
            assert chosen[0] == taken and taken not in (
                cluster.nodes[1].port,
                cluster.nodes[1].controller_port,
            )
            assert listening_ports(cluster.pids[1]) == {
                cluster.nodes[1].port,
                cluster.nodes[1].controller_port,
            }
        with pytest.raises(BlockingIOError):
            foreign.accept()


# ------------------------------------------------------------------ kvldp broker --apache
class BrokerCommand:
    """``kvldp broker --apache`` as a child process, its output read line by line with a bound."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "kvldp", "broker", "--apache", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    async def line(self, timeout: float, stream: str = "stdout") -> str:
        pipe = self.proc.stdout if stream == "stdout" else self.proc.stderr
        assert pipe is not None
        try:
            return await asyncio.wait_for(asyncio.to_thread(pipe.readline), timeout)
        except TimeoutError:
            self.proc.kill()  # ends the blocked read too
            raise

    async def started(self) -> tuple[str, dict[int, int]]:
        """The bootstrap address and the node ids and pids the command prints, in order."""
        first = await self.line(START_TIMEOUT_S)
        assert first.startswith("bootstrap=127.0.0.1:"), (first, self.proc.poll())
        pids: dict[int, int] = {}
        while (line := await self.line(5)).startswith("node="):
            node, pid = re.fullmatch(r"node=(\d+) pid=(\d+)\n", line).groups()  # type: ignore[union-attr]
            pids[int(node)] = int(pid)
        assert line.startswith(f"ready: {len(pids)} node(s) accept writes, started in "), line
        return first.strip().split("=", 1)[1], pids

    async def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(self.proc.wait, 30)
        for pipe in (self.proc.stdout, self.proc.stderr):
            assert pipe is not None
            pipe.close()
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def gone(pids: list[int], timeout: float = 10) -> bool:
    """Whether none of ``pids`` runs any longer, waiting up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.asyncio
async def test_the_command_prints_its_address_and_node_accepts_writes_and_stops_on_sigterm() -> None:
    command = BrokerCommand()
    try:
        bootstrap, pids = await command.started()
        assert list(pids) == [1] and bootstrap.count(",") == 0
        await produce(bootstrap, "kvldp.test.cli", b"hello")
        assert await consume_all(bootstrap, "kvldp.test.cli", 1) == [b"hello"]
        assert await command.terminate() == 0
        assert gone(list(pids.values()))
    finally:
        command.close()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_three_nodes_form_one_cluster_that_survives_losing_one() -> None:
    command = BrokerCommand("--nodes", "3")
    try:
        bootstrap, pids = await command.started()
        assert list(pids) == [1, 2, 3] and len(bootstrap.split(",")) == 3
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            cluster = await admin.describe_cluster()
            assert sorted(b["node_id"] for b in cluster["brokers"]) == [1, 2, 3]
            await admin.create_topics([NewTopic("kvldp.test.three", 1, 3)])
        finally:
            await admin.close()
        await produce(bootstrap, "kvldp.test.three", b"three")
        psutil.Process(pids[2]).kill()
        assert await command.line(30, "stderr") == "kvldp: node 2 exited; the others keep running\n"
        assert command.proc.poll() is None
        await produce(bootstrap, "kvldp.test.three", b"two")  # acks=all: 2 in sync suffice
        assert await consume_all(bootstrap, "kvldp.test.three", 2) == [b"three", b"two"]
        assert await command.terminate() == 0
        assert gone(list(pids.values()))
    finally:
        command.close()


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """An id starting with ``-`` would be read by the storage tool as an option: such a
    draw (first byte 0xf8, 1 in 64) is drawn again, as Kafka's ``Uuid.randomUuid`` does."""
    import uuid

    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" + bytes(15))])
    monkeypatch.setattr(apache_kafka_module.uuid, "uuid4", lambda: next(draws))
    assert apache_kafka_module.kafka_uuid() == "AQAAAAAAAAAAAAAAAAAAAA"
