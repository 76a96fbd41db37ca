"""The compose stack's Kafka part, run without Docker: deploy/'s broker settings on Apache
Kafka (fetched by ``make kafka``), deploy/kafka/kafka-start.sh unchanged against it, and
kvldp's services logging in with deploy/'s own client files.

One secured node for the module, started with the broker settings of docker-compose.yml
that apply on this machine's loopback (its authorizer among them: no ACL, no access). Its
only user at first is ``device``, a credential a device could have been given. The start
script, with ``kafka-configs.sh`` and ``kafka-acls.sh`` thin wrappers of the fetched jars
and the broker's ``KVLDP_COLLECTIONS``, creates the users of deploy/kafka-clients and
grants their ACLs over the admin listener; its health check fails before and passes
after, and a restart grants the same ACLs again. Then, each client file pointed at this
node's SASL listener: the stack's aggregators (``demo`` in role all, ``checkout``'s worker
and exporter) create their topics with their collections' settings, fold what the gateway and a simulated fleet write as
the ingestion principal, write dead letters and hand state over; writes to a reports
topic as the device or as the aggregators are refused with kvldp's one line, and the
ingestion principal writes nothing but the reports topics.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import javaproperties
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import TopicAuthorizationFailedError

from kvldp.aggregator.topics import ensure_topics, wanted_topics
from kvldp.broker.apache_kafka import ApacheKafka, KafkaSecurity, ScramUser
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import load_collection
from kvldp.gateway.signing import load_private_key, sign_token
from kvldp.kafka.client_config import KafkaConfig, kafka_config
from kvldp.kafka.client_start import KafkaStartError, start_or_close
from kvldp.producer.collector import Collector
from kvldp.reliability.processes import AggregatorProcess, total

from support import run, run_kvldp
from support.deploy import (
    CLIENT_DIR,
    CLIENT_FILES,
    DEPLOY,
    SERVICES,
    START_SCRIPT,
    broker_env,
    client_properties,
    client_role,
    collections_with_acls,
    command_args,
    deploy_settings,
    option,
)
from support.gateway_process import GatewayProcess
from support.pipeline import eventually

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="no bash"),
    # the module's secured node and start-script run cost 14 s: one xdist worker sets them up once
    pytest.mark.xdist_group("deploy-acls"),
]

DEVICE = ScramUser("device", "device-secret")
AUDIENCE = "kvldp-gateway"  # the stack's gateway's --audience
DEVICES = 20
#: the tools kafka-start.sh runs, by the Java main class each of Kafka's scripts runs
TOOLS = {
    "kafka-configs.sh": "kafka.admin.ConfigCommand",
    "kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
}
USERS = 50


@dataclass
class Stack:
    """The secured node and what the start script did to it."""

    kafka: ApacheKafka
    env: dict[str, str]
    #: the health check's stderr before the start script ran
    check_before: str
    #: what the start script said
    output: str
    directory: Path

    def start(self) -> str:
        """Run the start script (the broker's start) until it says the ACLs are granted;
        what it said."""
        log = self.directory / "kafka-start.log"
        with log.open("w") as out:
            script = subprocess.Popen(
                ["bash", str(START_SCRIPT)], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        try:

            async def done() -> bool:
                said = log.read_text()
                return "ACLs granted" in said or "failed" in said or script.poll() is not None

            asyncio.run(eventually(done, 120, "deploy's start script to grant the ACLs"))
        finally:
            script.kill()  # the image's entrypoint; the step that granted the ACLs has ended
            script.wait(timeout=30)
        return log.read_text()

    def check(self, **env: str) -> subprocess.CompletedProcess[str]:
        return run(["bash", str(START_SCRIPT), "--check"], env={**self.env, **env}, timeout=120)

    def client_file(self, role: str) -> Path:
        """deploy/'s client file of ``role`` as a client here uses it: this node's SASL
        listener (no TLS on it, so no CA), the file's user and password."""
        entries = {k: v for k, v in client_properties(role).items() if not k.startswith("ssl.")}
        entries |= {
            "bootstrap.servers": self.kafka.sasl_bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
        }
        path = self.directory / f"{role}.properties"
        path.write_text(javaproperties.dumps(entries, timestamp=None))
        return path

    def config(self, role: str) -> KafkaConfig:
        """kvldp's settings from :meth:`client_file`."""
        return kafka_config(javaproperties.loads(self.client_file(role).read_text()))


def wrapper(kafka: ApacheKafka, directory: Path, script: str) -> None:
    """``directory/script``: the Kafka distribution's command, running its Java main class
    from the fetched jars."""
    path = directory / script
    path.write_text(f'#!/usr/bin/env bash\nexec {shlex.join(kafka.tool_command(TOOLS[script]))} "$@"\n')
    path.chmod(0o755)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("deploy-acls")
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    entrypoint = directory / "run"  # the image's entrypoint: this broker already runs
    entrypoint.write_text("#!/usr/bin/env bash\nexec sleep 600\n")
    entrypoint.chmod(0o755)
    with ApacheKafka(1, security=KafkaSecurity((DEVICE,)), extra_properties=deploy_settings()) as kafka:
        print(f"secured Apache Kafka with deploy/'s settings started in {kafka.started_in_s:.1f} s")
        for script in TOOLS:
            wrapper(kafka, bin_dir, script)
        env = {
            **os.environ,
            "KVLDP_CLIENT_DIR": str(CLIENT_DIR),
            "KVLDP_COLLECTIONS": broker_env()["KVLDP_COLLECTIONS"],
            "KVLDP_KAFKA_BIN": str(bin_dir),
            "KVLDP_KAFKA_RUN": str(entrypoint),
            "KVLDP_KAFKA_ADMIN": kafka.bootstrap_servers,
        }
        before = run(["bash", str(START_SCRIPT), "--check"], env=env, timeout=120)
        assert before.returncode == 1, before.stderr
        stack = Stack(kafka, env, before.stderr, "", directory)
        started = time.monotonic()
        stack.output = stack.start()
        print(f"deploy's users and ACLs: {time.monotonic() - started:.1f} s")
        checked = stack.check()
        assert checked.returncode == 0, (checked.stderr, stack.output)
        print(f"... and its health check: {time.monotonic() - started:.1f} s")
        yield stack


def test_the_compose_file_grants_acls_on_every_collection_it_runs() -> None:
    """KVLDP_COLLECTIONS names the collections the aggregators fold and the gateway
    serves; the ingestion principal's file is the gateway's and the simulated fleets',
    the aggregator principal's file every aggregator's."""
    served = {
        load_collection(DEPLOY / "collections" / path.removeprefix("/collections/")).name
        for service in SERVICES.values()
        for path in (a.split("=", 1)[1] for a in command_args(service) if a.startswith("--collection="))
    }
    assert sorted(collections_with_acls()) == sorted(served)
    roles = {name: client_role(s) for name, s in SERVICES.items() if option(s, "kafka-config")}
    assert roles == {
        "aggregator": "aggregator",
        "checkout-worker": "aggregator",
        "checkout-exporter": "aggregator",
        "gateway": "ingest",
        "producer": "ingest",
        "producer-checkout": "ingest",
    }


def test_the_start_script_creates_each_roles_user_and_grants_its_acls(stack: Stack) -> None:
    """Before: the health check fails in one line. After: it passes, and the ACLs listed
    are the script's, the ingestion principal's the only writes on a reports topic."""
    assert stack.check_before.startswith("kafka-start: user ingest (ingest) has no SCRAM-SHA-512 credentials")
    assert stack.check_before.count("\n") == 1, stack.check_before
    assert "SCRAM-SHA-512 users ingest and aggregator are set; ACLs granted on collections demo checkout" in (
        stack.output
    )
    assert_the_stacks_acls(stack.kafka)


def test_a_restart_grants_the_same_acls_again(stack: Stack) -> None:
    """The script sets the users and grants the ACLs at every start: a second start
    succeeds and leaves the same ACLs."""
    output = stack.start()
    assert "ACLs granted on collections demo checkout" in output and "failed" not in output, output
    assert_the_stacks_acls(stack.kafka)


def assert_the_stacks_acls(kafka: ApacheKafka) -> None:
    """The cluster's ACLs are those of deploy/README.md's table, for each collection."""
    listed = acls(kafka)
    for name in collections_with_acls():
        reports = f"kvldp.{name}.reports"
        assert {(p, op) for t, r, p, op in listed if (t, r) == ("TOPIC", reports)} == {
            ("User:ingest", "WRITE"),
            ("User:ingest", "DESCRIBE"),
            ("User:aggregator", "READ"),
            ("User:aggregator", "DESCRIBE"),
            ("User:aggregator", "CREATE"),
        }
        for own in ("dlq", "state", "control"):
            assert {(p, op) for t, r, p, op in listed if (t, r) == ("TOPIC", f"kvldp.{name}.{own}")} == {
                ("User:aggregator", op) for op in ("READ", "WRITE", "DESCRIBE", "CREATE")
            }
        group = f"kvldp.{name}.aggregator"
        assert {(p, op) for t, r, p, op in listed if (t, r) == ("GROUP", group)} == {
            ("User:aggregator", "READ")
        }
    assert len(listed) == 18 * len(collections_with_acls()), "an ACL beyond the table"


def acls(kafka: ApacheKafka) -> set[tuple[str, str, str, str]]:
    """Every ACL of the cluster as (resource type, name, principal, operation); all are
    literal and allowed from any host."""
    listing = kafka.run_tool(
        "org.apache.kafka.tools.AclCommand", ["--bootstrap-server", kafka.bootstrap_servers, "--list"]
    )
    found = set()
    resource = ("", "")
    for line in listing.splitlines():
        if line.startswith("Current ACLs for resource "):
            pattern = line.split("ResourcePattern(", 1)[1].split(")`", 1)[0]
            fields = dict(item.split("=", 1) for item in pattern.split(", "))
            assert fields["patternType"] == "LITERAL", line
            resource = (fields["resourceType"], fields["name"])
        elif line.strip().startswith("(principal="):
            fields = dict(item.split("=", 1) for item in line.strip()[1:-1].split(", "))
            assert fields["host"] == "*" and fields["permissionType"] == "ALLOW", line
            found.add((*resource, fields["principal"], fields["operation"]))
    return found


@pytest.mark.asyncio
async def test_each_client_file_logs_in_with_its_own_password_only(stack: Stack) -> None:
    for role in CLIENT_FILES:
        assert await logs_in(stack.config(role)), role
        wrong = {**javaproperties.loads(stack.client_file(role).read_text())}
        wrong["sasl.password"] = "not-" + wrong["sasl.password"]
        assert not await logs_in(kafka_config(wrong)), role


async def logs_in(settings: KafkaConfig) -> bool:
    """Whether the SCRAM login of ``settings`` is accepted (a request after it answers)."""
    admin = AIOKafkaAdminClient(**settings.client_options("kvldp-test"))
    try:
        await start_or_close(admin, settings)
    except KafkaStartError:
        return False
    try:
        await admin.describe_cluster()
        return True
    finally:
        await admin.close()


def test_the_health_check_names_a_missing_acl(stack: Stack) -> None:
    """A collection without its ACLs (here one the script was never told of) fails the
    check, which names the first missing ACL."""
    checked = stack.check(KVLDP_COLLECTIONS="demo absent")
    assert checked.returncode == 1
    assert (
        checked.stderr == "kafka-start: ACL missing: User:ingest may not Write topic kvldp.absent.reports\n"
    )


def produce(stack: Stack, role: str, collection: str) -> subprocess.CompletedProcess[str]:
    """``kvldp produce`` of simulated devices with ``role``'s client file."""
    simulate = "conditional" if collection == "checkout" else "gaussian"
    config = stack.client_file(role) if role != DEVICE.name else device_file(stack)
    return run_kvldp(
        "produce",
        "--collection",
        str(DEPLOY / "collections" / f"{collection}.toml"),
        "--simulate",
        simulate,
        "--users",
        str(USERS),
        "--kafka-config",
        str(config),
        timeout=120,
    )


def device_file(stack: Stack) -> Path:
    path = stack.directory / "device.properties"
    path.write_text(javaproperties.dumps(stack.kafka.client_properties(DEVICE.name), timestamp=None))
    return path


@pytest.mark.asyncio
async def test_the_stacks_services_run_as_their_principals(stack: Stack) -> None:
    """As in the stack: ``demo``'s aggregator (role all) and ``checkout``'s worker and
    exporter log in with the aggregator principal's file and create their topics; the
    gateway, serving both collections, and checkout's simulated fleet log in with the
    ingestion principal's. Devices' reports through the gateway and the fleet's reach the
    aggregators; a malformed record goes to the dead letters, which the aggregator wrote;
    the worker hands its state over to the exporter through the state topic."""
    assert option(SERVICES["gateway"], "audience") == AUDIENCE
    bootstrap = stack.kafka.sasl_bootstrap_servers
    logs = stack.directory / "logs"
    as_aggregator = {"KVLDP_KAFKA_CONFIG": str(stack.client_file("aggregator"))}
    demo_file, checkout_file = (DEPLOY / "collections" / f"{name}.toml" for name in ("demo", "checkout"))
    demo = AggregatorProcess(
        demo_file, bootstrap, logs, "demo", state_dir=stack.directory / "state", env=as_aggregator
    )
    worker = AggregatorProcess(checkout_file, bootstrap, logs, "worker", role="worker", env=as_aggregator)
    exporter = AggregatorProcess(
        checkout_file, bootstrap, logs, "exporter", role="exporter", env=as_aggregator
    )
    keygen = run_kvldp("devices", "keygen", "--out", str(stack.directory / "keys"))
    assert keygen.returncode == 0, keygen.stderr
    key, kid = load_private_key(stack.directory / "keys" / "private.pem")
    gateway = GatewayProcess(
        [demo_file, checkout_file],
        stack.directory / "keys" / "jwks.json",
        AUDIENCE,
        bootstrap,
        logs,
        ["--kafka-config", str(stack.client_file("ingest"))],
    )
    aggregators = (demo, worker, exporter)
    try:
        for process in aggregators:
            process.start()
        await asyncio.gather(*(process.ready() for process in aggregators))
        url = await gateway.start()
        collection = load_collection(demo_file)
        names = [f"till-{i}" for i in range(DEVICES)]
        sent, fleet = await asyncio.gather(
            asyncio.gather(
                *(
                    one_device(collection, url, name, sign_token(key, kid, name, AUDIENCE, 600), i)
                    for i, name in enumerate(names)
                )
            ),
            asyncio.to_thread(produce, stack, "ingest", "checkout"),
        )
        assert sent == [1] * DEVICES
        assert fleet.returncode == 0, fleet.stderr
        ingest = AIOKafkaProducer(**stack.config("ingest").client_options("kvldp-test"), acks="all")
        await start_or_close(ingest, stack.config("ingest"))
        try:
            await ingest.send_and_wait(collection.reports_topic, b"not a report", key=b"till-x")
        finally:
            await ingest.stop()

        async def folded() -> bool:
            demo_samples, exported = await asyncio.gather(
                asyncio.to_thread(demo.samples), asyncio.to_thread(exporter.samples)
            )
            return (
                total(demo_samples, "kvldp_reports_total") >= DEVICES
                and total(demo_samples, "kvldp_reports_rejected_total") >= 1
                and total(exported, "kvldp_reports_total") >= USERS
            )

        await eventually(folded, 90, "demo's aggregator and checkout's exporter to fold the reports")
        assert total(demo.samples(), "kvldp_reports_total") == DEVICES
        assert await dead_letters(stack.config("aggregator"), collection.dlq_topic) == 1
        await topics_have_their_collections_settings(stack, {demo_file: False, checkout_file: True})
        assert gateway.stop() == 0, gateway.log_tail()
        for process in aggregators:
            assert process.stop() == 0, process.log_tail()
    finally:
        gateway.kill()
        for process in aggregators:
            process.kill()


async def topics_have_their_collections_settings(stack: Stack, files: dict[Path, bool]) -> None:
    """The topics the aggregator principal created (with a state topic where ``files``
    says so) have their collection's partitions and topic settings, as the broker
    describes them."""
    described = await asyncio.to_thread(
        stack.kafka.run_tool,
        "kafka.admin.ConfigCommand",
        ["--bootstrap-server", stack.kafka.bootstrap_servers, "--describe", "--entity-type", "topics"],
    )
    # "Dynamic configs for topic NAME are:", then "  KEY=VALUE sensitive=... synonyms=..."
    configs: dict[str, dict[str, str]] = {}
    for line in described.splitlines():
        if line.startswith("Dynamic configs for topic "):
            topic = configs.setdefault(line.split()[4], {})
        elif line.startswith("  "):
            key, _, value = line.split(" sensitive=", 1)[0].strip().partition("=")
            topic[key] = value
    settings = stack.config("aggregator")
    admin = AIOKafkaAdminClient(**settings.client_options("kvldp-test"))
    await start_or_close(admin, settings)
    try:
        partitions = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics()}
    finally:
        await admin.close()
    for path, state in files.items():
        for wanted in wanted_topics(load_collection(path), state):
            assert configs[wanted.name] == wanted.topic_configs, wanted.name
            assert partitions[wanted.name] == wanted.num_partitions, wanted.name


async def one_device(collection: Collection, url: str, name: str, token: str, index: int) -> int:
    """One device reporting through the gateway; the reports its collector sent."""
    async with Collector(collection, endpoint=url, token=token, device_id=name) as collector:
        await collector.report({collection.keys[index % collection.d]: float(index % 11)})
        await collector.flush()
        return collector.sent_reports


async def dead_letters(settings: KafkaConfig, topic: str) -> int:
    """The records of ``topic``'s one partition, read outside any group."""
    consumer = AIOKafkaConsumer(**settings.client_options("kvldp-test"), enable_auto_commit=False)
    await start_or_close(consumer, settings)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        return int((await consumer.end_offsets([partition]))[partition])
    finally:
        await consumer.stop()


@pytest.mark.parametrize("role", ["device", "aggregator"])
def test_only_the_ingestion_principal_writes_a_reports_topic(stack: Stack, role: str) -> None:
    """A device's credential, and the aggregators' (which read the topic), are refused in
    one line, with no traceback (after the producer's warning about demo's budget)."""
    # the topic exists (the aggregator principal creates it), so the refusal is the ACL's
    asyncio.run(
        ensure_topics(stack.config("aggregator"), load_collection(DEPLOY / "collections" / "demo.toml"))
    )
    produced = produce(stack, role, "demo")
    assert produced.returncode == 2, produced.stderr
    assert "Traceback" not in produced.stderr
    lines = produced.stderr.strip().splitlines()
    (error,) = [line for line in lines if not line.startswith("kvldp: WARNING ")]
    # the aggregator's is refused once its producer sends, and the line then ends with the counts
    assert error.startswith(
        f"kvldp: error: Kafka at {stack.kafka.sasl_bootstrap_servers} (SASL_PLAINTEXT SCRAM-SHA-512 as {role}) "
        "refused: not authorized for topic kvldp.demo.reports (the cluster's ACLs give this principal no such right)"
    ), produced.stderr
    print(error)  # the line a user sees, with -s


@pytest.mark.asyncio
async def test_the_ingestion_principal_writes_nothing_but_the_reports(stack: Stack) -> None:
    await ensure_topics(stack.config("aggregator"), load_collection(DEPLOY / "collections" / "demo.toml"))
    settings = stack.config("ingest")
    producer = AIOKafkaProducer(**settings.client_options("kvldp-test"), acks="all")
    await start_or_close(producer, settings)
    try:
        for topic in ("kvldp.demo.dlq", "kvldp.demo.state"):
            with pytest.raises(TopicAuthorizationFailedError):
                await producer.send_and_wait(topic, b"x", key=b"till-7")
    finally:
        await producer.stop()
