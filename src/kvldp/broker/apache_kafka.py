"""A real Apache Kafka cluster on loopback, in KRaft mode, run by kvldp as child processes.

Tansu (:mod:`kvldp.broker.tansu`) is the quick broker of demos and tests; users run Apache
Kafka, whose replication, fencing and protocol versions Tansu does not have. This module
runs the real thing on one machine: ``nodes`` combined broker-and-controller nodes, each
``java -cp LIBS/* kafka.Kafka server.properties`` with its own storage in a fresh
temporary directory, formatted first by ``kafka.tools.StorageTool`` with a random cluster
id (one node ``--standalone``; several with every controller in ``--initial-controllers``).
The jars come from Maven Central through ``make kafka`` (:mod:`kvldp.broker.kafka_install`).

Ports: each node gets a client (broker) port and a controller port, found free (node 1's
client port may be asked for, as Kafka's usual 9092) and trusted only once that node's
own process listens on them (:func:`wait_listening`); when another process took one
first, the whole cluster is formatted again on fresh ports (a port asked for that another
process holds fails with :class:`PortTaken` instead).
Replication suits tests: with 3 nodes or more every topic and Kafka's internal topics
have 3 replicas and need 2 in sync; with fewer, what the nodes allow.

Security (``security=KafkaSecurity(...)``): each node also serves a SASL_PLAINTEXT
listener, ``CLIENT``, where clients log in with SCRAM-SHA-512, and authorizes every
request with KRaft's ``StandardAuthorizer`` (no ACL, no access). The SCRAM users are
written into the metadata log when the storage is formatted (``StorageTool format
--add-scram``), so they exist before the first request. The plaintext listener stays, on
loopback, as the admin listener, as in deploy/'s broker: its principal ``User:ANONYMOUS``
(like the controller's and the inter-broker traffic's) is a super user, which the
readiness probe, :meth:`ApacheKafka.allow` (``AclCommand``) and the tools of
:meth:`ApacheKafka.tool_command` use. :attr:`ApacheKafka.sasl_bootstrap_servers` is what
clients with a user's :meth:`ApacheKafka.client_properties` connect to.

TLS (``tls=KafkaTls(cert, key)``): each node also serves an SSL listener, ``SSL``, with
the PEM certificate and private key given, as Kafka reads them natively
(``ssl.keystore.type=PEM``, no Java keystore to build); clients check the certificate
against the CA that signed it, and :attr:`ApacheKafka.tls_bootstrap_servers` is where
they connect. Kafka's PEM keystore takes PKCS#8 keys only: a key in another unencrypted
PEM form (OpenSSL's traditional ``BEGIN EC/RSA PRIVATE KEY``, which stunnel and the
embedded broker take) is converted when the node's settings are written. The plaintext
listener stays, as the admin and inter-broker listener.

The cluster counts as started once it accepts writes (:mod:`kvldp.broker.kafka_ready`):
every node is a registered broker and a record produced with ``acks=all`` to
:data:`~kvldp.broker.kafka_ready.PROBE_TOPIC` is acknowledged. Stopping terminates every
node at once, waits, and kills what is left after a grace period. Nothing outlives kvldp:
the context manager, a failed start (even interrupted by a signal) and ``atexit`` stop
the nodes, and where util-linux's ``setpriv`` exists (every Debian) each node is started
with a parent-death signal, so that even a kvldp killed with SIGKILL takes its nodes with
it. That signal follows the thread that started the node, not the process, so only nodes
started from the main thread get it.
"""

from __future__ import annotations

import atexit
import base64
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

import javaproperties
from cryptography.hazmat.primitives import serialization

from kvldp.broker.child_process import (
    HOST,
    BrokerError,
    PortTaken,
    file_tail,
    free_port,
    port_in_use,
    wait_listening,
)
from kvldp.broker.kafka_install import java_binary, kafka_libs
from kvldp.broker.kafka_ready import wait_accepts_writes

__all__ = ["ApacheKafka", "KafkaNode", "KafkaSecurity", "KafkaTls", "ScramUser"]

#: the JVM options of every node and tool: a modest heap, and a start-up that favours
#: starting fast over peak throughput (docs: the times measured with and without)
JVM_OPTIONS = ("-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
#: times the cluster is formatted again on fresh ports when other processes take its ports
PORT_ATTEMPTS = 5
#: how long stopping waits for nodes to exit after SIGTERM before it kills them
STOP_GRACE_S = 10.0
#: Kafka's logging: warnings, and the line of each node saying it started
LOG4J2 = {
    "rootLogger.level": "WARN",
    "rootLogger.appenderRef.out.ref": "out",
    "appender.out.type": "Console",
    "appender.out.name": "out",
    "appender.out.layout.type": "PatternLayout",
    "appender.out.layout.pattern": "[%d] %p %m (%c)%n",
    "logger.started.name": "kafka.server.KafkaRaftServer",
    "logger.started.level": "INFO",
}


#: the SASL mechanism of a secured cluster (deploy/'s broker offers this one only)
SCRAM_MECHANISM = "SCRAM-SHA-512"
#: the authorizer of a secured cluster: KRaft's, with its ACLs in the metadata log
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
#: the principal of the plaintext (admin, inter-broker, controller) listeners, a super user
ADMIN_PRINCIPAL = "User:ANONYMOUS"
#: names and passwords StorageTool's ``--add-scram`` takes as they are (it splits on ``,``,
#: ``=`` and brackets, and has no escapes)
SCRAM_TEXT = re.compile(r"[A-Za-z0-9._-]+")
#: the time one admin tool run (a JVM) may take
TOOL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ScramUser:
    """A SCRAM-SHA-512 login of a secured cluster; its principal is ``User:<name>``."""

    name: str
    password: str

    @property
    def principal(self) -> str:
        return f"User:{self.name}"


@dataclass(frozen=True)
class KafkaSecurity:
    """What secures an :class:`ApacheKafka`: the SCRAM users created at format time.

    Every request on the SASL listener is authorized by ACLs (none at first: grant them
    with :meth:`ApacheKafka.allow`); the plaintext admin listener's principal is a super user.
    """

    users: tuple[ScramUser, ...]

    def __post_init__(self) -> None:
        names = [user.name for user in self.users]
        if len(set(names)) != len(names):
            raise BrokerError(f"SCRAM user names must differ: {', '.join(names)}")
        for user in self.users:
            for text in (user.name, user.password):
                if not SCRAM_TEXT.fullmatch(text):
                    raise BrokerError(
                        f"SCRAM user {user.name!r}: names and passwords take letters, digits, '.', '_' "
                        "and '-' only (StorageTool's --add-scram has no escapes)"
                    )

    def user(self, name: str) -> ScramUser:
        for user in self.users:
            if user.name == name:
                return user
        raise BrokerError(f"no SCRAM user {name!r} (users: {', '.join(u.name for u in self.users)})")

    def format_arguments(self) -> list[str]:
        """StorageTool's ``--add-scram`` arguments creating every user."""
        return [
            argument
            for user in self.users
            for argument in (
                "--add-scram",
                f"{SCRAM_MECHANISM}=[name={user.name},password={user.password}]",
            )
        ]


@dataclass(frozen=True)
class KafkaTls:
    """The SSL listener of an :class:`ApacheKafka`: its certificate (PEM, the chain a client
    checks against its CA) and the certificate's private key (PEM, unencrypted)."""

    cert: Path
    key: Path

    def keystore_properties(self) -> dict[str, str]:
        """The SSL listener's PEM keystore, inline: the certificate chain and the key as
        PKCS#8 (the only form Kafka's PEM keystore reads)."""
        for what, path in (("certificate", self.cert), ("private key", self.key)):
            if not path.is_file():
                raise BrokerError(f"the TLS {what} {path} does not exist (or is not a file)")
        chain = self.cert.read_text(encoding="ascii", errors="replace")
        if "-----BEGIN CERTIFICATE-----" not in chain:
            raise BrokerError(f"the TLS certificate {self.cert} holds no PEM certificate")
        try:
            key = serialization.load_pem_private_key(self.key.read_bytes(), password=None)
        except (ValueError, TypeError) as exc:
            raise BrokerError(
                f"the TLS private key {self.key} is no unencrypted PEM private key: {exc}"
            ) from None
        pkcs8 = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii")
        return {
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.certificate.chain": chain.strip(),
            "listener.name.ssl.ssl.keystore.key": pkcs8.strip(),
        }


def kafka_uuid() -> str:
    """A random id in Kafka's text form (``Uuid.toString``: 16 bytes, URL-safe base64,
    unpadded), drawn again while it starts with ``-`` as Kafka's ``Uuid.randomUuid`` does:
    the storage tool would read such an id as an option (1 draw in 64)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def write_properties(path: Path, entries: dict[str, str]) -> None:
    """A properties file Java reads back as ``entries`` (escaped, ISO-8859-1)."""
    path.write_text(javaproperties.dumps(entries, timestamp=None), encoding="iso-8859-1")


@dataclass
class KafkaNode:
    """One combined broker and controller: its id, ports, directory and running process."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    #: the SASL_PLAINTEXT listener's port of a secured cluster (0: none)
    sasl_port: int = 0
    #: the SSL listener's port of a cluster with TLS (0: none)
    tls_port: int = 0
    directory_id: str = field(default_factory=kafka_uuid)
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.directory / "server.properties"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BrokerError(f"Kafka node {self.node_id} is not running")
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, size: int = 500) -> str:
        return file_tail(self.log, size)


class ApacheKafka:
    """Apache Kafka on 127.0.0.1: ``nodes`` KRaft nodes, each broker and controller, as
    child processes; a context manager, like :class:`kvldp.broker.tansu.EmbeddedBroker`.

    Node 1 serves clients on ``port`` (0: a free one), the others on free ports. Once
    started, :attr:`bootstrap_servers` lists every node's client address and
    :attr:`pids` maps node ids (1, 2, ...) to process ids; :meth:`kill` and
    :meth:`restart` take one node down and bring it back on its ports and storage.
    """

    def __init__(
        self,
        nodes: int = 1,
        port: int = 0,
        startup_timeout: float = 120.0,
        security: KafkaSecurity | None = None,
        extra_properties: dict[str, str] | None = None,
        tls: KafkaTls | None = None,
    ) -> None:
        if nodes < 1:
            raise BrokerError(f"an Apache Kafka cluster needs at least one node, not {nodes}")
        self.security = security
        self.tls = tls
        #: server properties merged over kvldp's own into every node's (e.g. deploy/'s broker settings)
        self.extra_properties = dict(extra_properties or {})
        self.node_count = nodes
        self.requested_port = port
        self.startup_timeout = startup_timeout
        self.nodes: dict[int, KafkaNode] = {}
        self.started_in_s = 0.0
        self._directory: Path | None = None
        self._command: list[str] = []

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.address for node in self.nodes.values())

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL listeners' addresses of a secured cluster."""
        if self.security is None:
            raise BrokerError("this Apache Kafka cluster is not secured: it has no SASL listener")
        return ",".join(f"{HOST}:{node.sasl_port}" for node in self.nodes.values())

    @property
    def tls_bootstrap_servers(self) -> str:
        """The SSL listeners' addresses of a cluster with TLS."""
        if self.tls is None:
            raise BrokerError("this Apache Kafka cluster has no TLS listener")
        return ",".join(f"{HOST}:{node.tls_port}" for node in self.nodes.values())

    def client_properties(self, user: str) -> dict[str, str]:
        """A kvldp client file's settings logging in as SCRAM user ``user`` on the SASL listener."""
        if self.security is None:
            raise BrokerError("this Apache Kafka cluster is not secured: it has no SCRAM users")
        login = self.security.user(user)
        return {
            "bootstrap.servers": self.sasl_bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": login.name,
            "sasl.password": login.password,
        }

    def tool_command(self, main_class: str) -> list[str]:
        """The command running one of Kafka's admin tools from the fetched jars, e.g.
        ``org.apache.kafka.tools.AclCommand`` (``kafka-acls.sh``) or
        ``kafka.admin.ConfigCommand`` (``kafka-configs.sh``)."""
        return [java_binary(), *JVM_OPTIONS, "-cp", str(kafka_libs() / "*"), main_class]

    def run_tool(self, main_class: str, arguments: Sequence[str]) -> str:
        """Run an admin tool to its end and return what it printed; a failure is a
        :class:`BrokerError` with the tool's last words."""
        try:
            done = subprocess.run(
                [*self.tool_command(main_class), *arguments],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=TOOL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BrokerError(f"{main_class} took more than {TOOL_TIMEOUT_S:.0f} s") from None
        output = (done.stdout + done.stderr).decode(errors="replace")
        if done.returncode != 0:
            raise BrokerError(f"{main_class} failed (status {done.returncode}): {output.strip()[-500:]}")
        return output

    def allow(
        self,
        principal: str,
        operations: Sequence[str],
        *,
        topics: Sequence[str] = (),
        groups: Sequence[str] = (),
        cluster: bool = False,
        prefixed: bool = False,
    ) -> None:
        """Grant ``principal`` (``User:<name>``) the ``operations`` (``Write``, ``Read``,
        ``Describe``, ``Create``, ...) on every named topic and group, and on the cluster,
        through ``AclCommand`` over the admin listener (one JVM run). ``prefixed``: the
        names are prefixes."""
        if not (topics or groups or cluster):
            raise BrokerError("an ACL needs a resource: topics, groups or the cluster")
        arguments = ["--bootstrap-server", self.bootstrap_servers, "--add", "--allow-principal", principal]
        for operation in operations:
            arguments += ["--operation", operation]
        for topic in topics:
            arguments += ["--topic", topic]
        for group in groups:
            arguments += ["--group", group]
        if cluster:
            arguments.append("--cluster")
        if prefixed:
            arguments += ["--resource-pattern-type", "prefixed"]
        self.run_tool("org.apache.kafka.tools.AclCommand", arguments)

    @property
    def pids(self) -> dict[int, int]:
        """The process id of each running node, by node id."""
        return {i: node.pid for i, node in self.nodes.items() if node.alive()}

    def start(self) -> ApacheKafka:
        """Format and start every node and wait until the cluster accepts writes.

        Whatever interrupts it (an error, a time-out, a signal's exception) stops what it
        started before it propagates.
        """
        began = time.monotonic()
        deadline = began + self.startup_timeout
        self._command = [java_binary(), *JVM_OPTIONS, "-cp", str(kafka_libs() / "*")]
        if self.requested_port and port_in_use(self.requested_port):
            raise PortTaken(self.requested_port)
        atexit.register(self.stop)
        try:
            for _ in range(PORT_ATTEMPTS):
                try:
                    self._start_once(deadline)
                    break
                except PortTaken:
                    self._stop_nodes()  # another process took a port first: fresh ports, fresh storage
                    if self.requested_port and port_in_use(self.requested_port):
                        raise PortTaken(self.requested_port) from None
            else:
                raise BrokerError(
                    f"Apache Kafka found no free ports on {HOST}: other processes took some each of "
                    f"{PORT_ATTEMPTS} times"
                )
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    def _start_once(self, deadline: float) -> None:
        directory = Path(tempfile.mkdtemp(prefix="kvldp-kafka-"))
        self._directory = directory
        self.nodes = {
            i: KafkaNode(
                i,
                self.requested_port if i == 1 and self.requested_port else free_port(),
                free_port(),
                directory / f"node-{i}",
                sasl_port=free_port() if self.security is not None else 0,
                tls_port=free_port() if self.tls is not None else 0,
            )
            for i in range(1, self.node_count + 1)
        }
        write_properties(directory / "log4j2.properties", LOG4J2)
        for node in self.nodes.values():
            node.directory.mkdir()
            write_properties(node.config_file, self._server_properties(node))
        self._format(deadline)
        for node in self.nodes.values():
            self._launch(node)
        for node in self.nodes.values():
            self._wait_listening(node, deadline)

    def _server_properties(self, node: KafkaNode) -> dict[str, str]:
        replicas = min(self.node_count, 3)
        in_sync = min(replicas, 2)
        # (name, security protocol, port) of each listener clients reach, the admin's first
        listeners = [("PLAINTEXT", "PLAINTEXT", node.port)]
        if node.sasl_port:
            listeners.append(("CLIENT", "SASL_PLAINTEXT", node.sasl_port))
        if node.tls_port:
            listeners.append(("SSL", "SSL", node.tls_port))
        advertised = ",".join(f"{name}://{HOST}:{port}" for name, _, port in listeners)
        protocols = ",".join(f"{name}:{protocol}" for name, protocol, _ in listeners)
        return {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "listeners": f"{advertised},CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": advertised,
            "listener.security.protocol.map": f"{protocols},CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": ",".join(
                f"{HOST}:{n.controller_port}" for n in self.nodes.values()
            ),
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(replicas),
            "min.insync.replicas": str(in_sync),
            "offsets.topic.replication.factor": str(replicas),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(in_sync),
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(in_sync),
            # a consumer group's first member gets its partitions at once (tests start groups often)
            "group.initial.rebalance.delay.ms": "0",
            # a killed node is fenced, and may register again after a restart, within 3 s (not 9)
            "broker.session.timeout.ms": "3000",
            "broker.heartbeat.interval.ms": "500",
            **self._security_properties(),
            **(self.tls.keystore_properties() if self.tls is not None else {}),
            **self.extra_properties,
        }

    def _security_properties(self) -> dict[str, str]:
        """A secured node's SCRAM login on its SASL listener ``CLIENT``, and the authorizer."""
        if self.security is None:
            return {}
        return {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.client.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "authorizer.class.name": AUTHORIZER,
            "super.users": ADMIN_PRINCIPAL,
            "allow.everyone.if.no.acl.found": "false",
        }

    def _format(self, deadline: float) -> None:
        """Format every node's storage, all at once (each is a JVM start)."""
        cluster_id = kafka_uuid()
        if self.node_count == 1:
            quorum = ["--standalone"]
        else:
            voters = ",".join(
                f"{n.node_id}@{HOST}:{n.controller_port}:{n.directory_id}" for n in self.nodes.values()
            )
            quorum = ["--initial-controllers", voters]
        formats = {
            node.node_id: subprocess.Popen(
                [
                    *self._command,
                    "kafka.tools.StorageTool",
                    "format",
                    "--config",
                    str(node.config_file),
                    "--cluster-id",
                    cluster_id,
                    *quorum,
                    *(self.security.format_arguments() if self.security is not None else []),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for node in self.nodes.values()
        }
        for node_id, proc in formats.items():
            try:
                output, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for running in formats.values():
                    running.kill()
                    running.wait()
                raise BrokerError(f"formatting Kafka node {node_id}'s storage took too long") from None
            if proc.returncode != 0:
                tail = output.decode(errors="replace").strip()[-500:]
                raise BrokerError(f"formatting Kafka node {node_id}'s storage failed: {tail}")

    def _launch(self, node: KafkaNode) -> None:
        assert self._directory is not None
        log4j = f"-Dlog4j2.configurationFile={self._directory / 'log4j2.properties'}"
        java, *rest = self._command
        command = [java, log4j, *rest, "kafka.Kafka", str(node.config_file)]
        # the signal comes when the starting thread ends: only the main thread lasts as long as kvldp
        if threading.current_thread() is threading.main_thread() and (setpriv := shutil.which("setpriv")):
            command = [setpriv, "--pdeathsig", "KILL", "--", *command]
        if node.log is None:
            # a pipe nobody reads could fill and stall the node; the file lives as long as it
            node.log = open(node.directory / "node.log", "ab")  # noqa: SIM115
        node.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=node.log,
            stderr=node.log,
            start_new_session=True,  # a Ctrl-C in the terminal reaches kvldp, which stops the nodes
        )

    def _wait_listening(self, node: KafkaNode, deadline: float) -> None:
        assert node.process is not None and node.log is not None
        for port in (node.controller_port, node.port, *(p for p in (node.sasl_port, node.tls_port) if p)):
            wait_listening(
                node.process,
                node.log,
                port,
                max(1.0, deadline - time.monotonic()),
                f"Kafka node {node.node_id}",
                node.log_tail,
            )

    def _wait_ready(self, deadline: float) -> None:
        wait_accepts_writes(self.bootstrap_servers, len(self.nodes), deadline, self._dead_node)

    def _dead_node(self) -> str | None:
        """What a node that died said, if one did (the readiness wait stops at once then)."""
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is not None:
                return (
                    f"Kafka node {node.node_id} exited (status {node.process.returncode}): {node.log_tail()}"
                )
        return None

    def kill(self, node_id: int) -> None:
        """Kill one node at once (SIGKILL), as a crash would; its storage stays."""
        node = self._node(node_id)
        if node.process is not None and node.alive():
            node.process.send_signal(signal.SIGKILL)
            node.process.wait()

    def restart(self, node_id: int, timeout: float = 60.0) -> None:
        """Start a killed node again on its ports and storage, and wait until the cluster,
        that node included, accepts writes again."""
        self.relaunch(node_id)
        self.wait_rejoined(node_id, timeout)

    def relaunch(self, node_id: int) -> None:
        """Start a killed node again on its ports and storage without waiting for it: the
        first half of :meth:`restart`, for callers that wait in another thread (the node's
        parent-death signal follows the thread that launches it)."""
        node = self._node(node_id)
        if node.alive():
            raise BrokerError(f"Kafka node {node_id} is still running: kill it first")
        self._launch(node)

    def wait_rejoined(self, node_id: int, timeout: float = 60.0) -> None:
        """Wait until a relaunched node listens and the cluster, that node included,
        accepts writes again: the second half of :meth:`restart`."""
        deadline = time.monotonic() + timeout
        self._wait_listening(self._node(node_id), deadline)
        self._wait_ready(deadline)

    def _node(self, node_id: int) -> KafkaNode:
        if node_id not in self.nodes:
            raise BrokerError(f"no Kafka node {node_id} (nodes: {', '.join(map(str, self.nodes))})")
        return self.nodes[node_id]

    def alive(self) -> bool:
        """Whether every node still runs."""
        return bool(self.nodes) and all(node.alive() for node in self.nodes.values())

    def stop(self) -> None:
        """Stop every node (SIGTERM to all, SIGKILL to those still there after
        :data:`STOP_GRACE_S`) and remove the cluster's directory."""
        atexit.unregister(self.stop)
        self._stop_nodes()

    def _stop_nodes(self) -> None:
        nodes, self.nodes = list(self.nodes.values()), {}
        running = [n.process for n in nodes if n.process is not None and n.process.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for node in nodes:
            if node.log is not None:
                node.log.close()
        directory, self._directory = self._directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> ApacheKafka:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
