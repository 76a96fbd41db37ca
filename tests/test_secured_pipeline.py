"""A collection end to end over TLS (Apache Kafka's own SSL listener, the session's
``apache_kafka``) gives exactly the plaintext run's statistics; untrusted certificates
and refused SASL logins fail fast with one line; the ``broker`` command serves TLS.

SASL logins cannot succeed on the bundled broker (its in-memory storage keeps no SCRAM
users, see :mod:`kvldp.broker.tansu`), so SASL is tested here by its failure path against a real
``--authentication`` Tansu broker, by :mod:`tests.test_kafka_acls` for logins that succeed
(and are refused) on a secured Apache Kafka, and by :mod:`tests.test_kafka_config` for
the settings that reach every client.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import javaproperties
import numpy as np
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from cryptography.hazmat.primitives import serialization

from kvldp.aggregator.offline import fold_recording
from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.state import AggregatorState
from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.kafka.client_config import KafkaConfig, kafka_config
from kvldp.kafka.client_start import KafkaStartError
from kvldp.producer.collector import Collector
from kvldp.producer.gateway_client import REQUEST_TIMEOUT_S
from kvldp.sim import simulate
from kvldp.sim.record_replay import record

from support import run_kvldp
from support.pipeline import collection_toml, start, unique_collection, wait_for
from support.tls import TlsBroker, TlsEndpoint, TlsFiles

pytestmark = pytest.mark.asyncio

USERS = 3000
PASSWORD = "S3cret-not-for-logs"
#: A refused certificate or login ends a client's start within its first exchange with the
#: broker (a command takes about two seconds, mostly starting Python); a client that waits
#: for an answer instead gives up only when its request timeout fires. The shortest request
#: timeout of the clients below is the SDK's default, REQUEST_TIMEOUT_S (the collector of
#: ``kvldp produce``; the aggregator's and the recorder's clients keep aiokafka's 40 s).
#: Failing fast is failing within half of it: a start that waited out a request timeout
#: fails the check, and a loaded machine has the other half less those two seconds
FAIL_FAST = REQUEST_TIMEOUT_S / 2


def tls_settings(tls: TlsEndpoint, ca: Path | None = None) -> KafkaConfig:
    return kafka_config(
        {
            "bootstrap.servers": tls.bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca or tls.certs.ca_pem),
        },
        source="test TLS settings",
    )


def properties(path: Path, entries: dict[str, str]) -> Path:
    """``entries`` written as a Java properties file (escaped as java.util.Properties.store does)."""
    path.write_text(javaproperties.dumps(entries, timestamp=False), encoding="ascii")
    return path


def one_error(stderr: str) -> str:
    """The one error line of a failed command (the aggregator may say before it that its
    state is in memory only); nothing else went wrong on the way out."""
    assert "Traceback" not in stderr and "Unclosed" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("kvldp: error:")]
    assert len(errors) == 1, stderr
    assert all(line.startswith(("kvldp: error:", "no --state-dir")) for line in stderr.splitlines()), stderr
    return errors[0]


async def collect(collection: Collection, kafka: KafkaConfig, seed: int = 5) -> AggregatorState:
    """Aggregate ``collection`` while simulated devices publish to it; the folded state."""
    aggregator = Aggregator(collection, kafka, metrics_port=0, log=lambda _: None)
    stop, task = await start(aggregator)
    try:
        users = simulate.simulate(collection, "gaussian_pckv", USERS, seed=seed)
        async with Collector(collection, kafka_config=kafka, rng=np.random.default_rng(seed)) as sdk:
            await sdk.publish_users(users, simulate.device_ids(USERS), batch_size=1)
        await wait_for(lambda: aggregator.state.reports_total == USERS, 60, "every report folded")
    finally:
        stop.set()
        await task
    return aggregator.state


async def delete_every_record(bootstrap: str, collection: Collection) -> None:
    """Empty ``collection``'s reports topic: its log start moves to its end (Kafka's
    delete-records up to the high watermark, offset -1)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        partitions = range(collection.aggregate.partitions)
        await admin.delete_records(
            {
                TopicPartition(collection.reports_topic, p): RecordsToDelete(before_offset=-1)
                for p in partitions
            },
            timeout_ms=10_000,
        )
    finally:
        await admin.close()


async def test_a_collection_over_tls_equals_the_plaintext_run(
    apache_kafka: ApacheKafka, apache_kafka_tls: TlsEndpoint, tmp_path: Path
) -> None:
    """The SDK, the aggregator, record and replay (the CLI, with a properties file) all
    through the TLS listener: the same statistics as over plaintext, exactly. The
    plaintext run has a collection of its own (the same but for the name); the recording
    is replayed into its own topic once that is emptied."""
    plain_collection, collection = (unique_collection("pckv_grr", 5, windows=["all"]) for _ in range(2))
    plain = await collect(plain_collection, KafkaConfig.plaintext(apache_kafka.bootstrap_servers))
    secure_settings = tls_settings(apache_kafka_tls)
    secure = await collect(collection, secure_settings)
    assert secure.all_stats() == plain.all_stats()
    assert secure.reports_total == plain.reports_total == USERS

    recording = tmp_path / "run.rec"
    messages = await record(collection, secure_settings, recording, from_beginning=True, idle_timeout=1.5)
    assert messages == USERS
    assert fold_recording(collection, recording).all_stats() == plain.all_stats()

    await delete_every_record(apache_kafka.bootstrap_servers, collection)
    client = properties(
        tmp_path / "client.properties",
        {
            "bootstrap.servers": apache_kafka_tls.bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(apache_kafka_tls.certs.ca_pem),
        },
    )
    aggregator = Aggregator(collection, secure_settings, metrics_port=0, log=lambda _: None)
    stop, task = await start(aggregator)
    try:
        done = await asyncio.to_thread(run_kvldp, "replay", str(recording), "--kafka-config", str(client))
        assert done.returncode == 0, done.stderr
        assert f"replayed {USERS} messages" in done.stderr
        await wait_for(lambda: aggregator.state.reports_total == USERS, 60, "the replayed reports folded")
    finally:
        stop.set()
        await task
    assert aggregator.state.all_stats() == plain.all_stats()


async def test_an_untrusted_broker_certificate_is_one_clear_line(
    apache_kafka_tls: TlsEndpoint, tmp_path: Path
) -> None:
    collection = unique_collection("kvue", 3)
    toml = collection_toml(collection, tmp_path / "c.toml")
    wrong_ca = properties(
        tmp_path / "wrong-ca.properties",
        {
            "bootstrap.servers": apache_kafka_tls.bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(apache_kafka_tls.certs.other_ca_pem),
        },
    )
    commands = [
        ["produce", "--collection", str(toml), "--simulate", "uniform", "--users", "10"],
        ["aggregate", "--collection", str(toml), "--metrics-port", "0"],
        ["record", "--collection", str(toml), "--out", str(tmp_path / "r.rec")],
    ]
    for argv in commands:
        began = time.monotonic()
        done = await asyncio.to_thread(
            run_kvldp, *argv, "--kafka-config", str(wrong_ca), timeout=2 * REQUEST_TIMEOUT_S
        )
        assert time.monotonic() - began < FAIL_FAST, argv
        assert done.returncode == 2, (argv, done.stderr)
        line = one_error(done.stderr)
        assert "is not trusted (unable to get local issuer certificate)" in line, line
        assert "ssl.ca.location" in line, line
    with pytest.raises(KafkaStartError, match="is not trusted"):
        async with Collector(
            collection, kafka_config=tls_settings(apache_kafka_tls, apache_kafka_tls.certs.other_ca_pem)
        ):
            pass


@pytest.mark.parametrize("over_tls", [False, True], ids=["SASL_PLAINTEXT", "SASL_SSL"])
async def test_a_refused_sasl_login_is_one_clear_line_never_a_hang(
    sasl_broker: EmbeddedBroker, sasl_tls_broker: TlsBroker, tmp_path: Path, over_tls: bool
) -> None:
    """The bundled broker refuses every SCRAM login (no user can be stored), so this is the
    wrong-password case: each command fails within seconds, one line, no secret in it.
    (On Tansu: the refusal users of the embedded broker meet; tests/test_kafka_acls.py
    has Apache Kafka's.)"""
    collection = unique_collection("kvue", 3)
    toml = collection_toml(collection, tmp_path / "c.toml")
    entries = {
        "bootstrap.servers": sasl_broker.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "telemetry",
        "sasl.password": PASSWORD,
    }
    if over_tls:
        entries |= {
            "bootstrap.servers": sasl_tls_broker.broker.bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(sasl_tls_broker.certs.ca_pem),
        }
    client = properties(tmp_path / "sasl.properties", entries)
    for argv in (
        ["aggregate", "--collection", str(toml), "--metrics-port", "0"],
        ["produce", "--collection", str(toml), "--simulate", "uniform", "--users", "10"],
    ):
        began = time.monotonic()
        done = await asyncio.to_thread(
            run_kvldp, *argv, "--kafka-config", str(client), timeout=2 * REQUEST_TIMEOUT_S
        )
        assert time.monotonic() - began < FAIL_FAST, argv
        assert done.returncode == 2, (argv, done.stderr)
        line = one_error(done.stderr)
        assert "SASL authentication failed" in line and "as telemetry" in line, line
        assert PASSWORD not in done.stderr + done.stdout


async def test_broker_command_serves_tls(tls_files: TlsFiles, tmp_path: Path) -> None:
    """``kvldp broker --tls-cert --tls-key``: a client trusting the CA publishes through it
    (the embedded broker's command: ``--apache`` serves plain TCP)."""
    certs = tls_files
    proc = subprocess.Popen(
        [
            *(sys.executable, "-P", "-m", "kvldp", "broker", "--port", "0"),
            *("--tls-cert", str(certs.server_cert_pem), "--tls-key", str(certs.server_key_pem)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.startswith("bootstrap=127.0.0.1:"), line + proc.stderr.read()
        assert (await asyncio.to_thread(proc.stdout.readline)).startswith("security.protocol=SSL")
        settings = kafka_config(
            {
                "bootstrap.servers": line.strip().split("=", 1)[1],
                "security.protocol": "SSL",
                "ssl.ca.location": str(certs.ca_pem),
            }
        )
        collection = unique_collection("kvue", 3)
        async with Collector(collection, kafka_config=settings) as sdk:
            await sdk.report({collection.keys[0]: 5.0})
        assert sdk.sent_reports == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0
        proc.stdout.close()
        proc.stderr.close()
    missing = await asyncio.to_thread(
        run_kvldp, "broker", "--port", "0", "--tls-cert", str(certs.server_cert_pem)
    )
    assert missing.returncode == 2 and "needs both a certificate and its private key" in missing.stderr


async def test_a_login_the_broker_drops_names_the_sasl_settings(sasl_broker: EmbeddedBroker) -> None:
    """A broker that closes the connection during the login (here: Tansu does not offer
    PLAIN, a refusal only Tansu gives) leaves aiokafka with "Unable to bootstrap"; the
    broker still accepts connections, so the error points at the SASL settings, not at
    the address."""
    settings = kafka_config(
        {
            "bootstrap.servers": sasl_broker.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "telemetry",
            "sasl.password": PASSWORD,
        }
    )
    began = time.monotonic()
    with pytest.raises(KafkaStartError, match="accepts connections but the client could not start") as caught:
        async with Collector(unique_collection("kvue", 3), kafka_config=settings):
            pass
    assert time.monotonic() - began < FAIL_FAST  # the collector's request timeout is the default
    assert "sasl.mechanism" in str(caught.value) and PASSWORD not in str(caught.value)


async def test_secrets_reach_no_log_checkpoint_or_metric(
    apache_kafka_tls: TlsEndpoint, tmp_path: Path
) -> None:
    """A client certificate whose key is encrypted with a passphrase: the aggregator runs
    with it, and the passphrase is in none of its log lines, its checkpoint (and its
    segments) or /metrics."""
    certs = apache_kafka_tls.certs
    key = serialization.load_pem_private_key(certs.client_key_pem.read_bytes(), None)
    encrypted = tmp_path / "client.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(PASSWORD.encode()),
        )
    )
    settings = kafka_config(
        {
            "bootstrap.servers": apache_kafka_tls.bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca_pem),
            "ssl.certificate.location": str(certs.client_cert_pem),
            "ssl.key.location": str(encrypted),
            "ssl.key.password": PASSWORD,
        }
    )
    collection = unique_collection("kvue", 3)
    said: list[str] = []
    aggregator = Aggregator(
        collection, settings, metrics_port=0, state_dir=tmp_path / "state", log=said.append
    )
    stop, task = await start(aggregator)
    try:
        async with Collector(collection, kafka_config=settings) as sdk:
            await sdk.report({collection.keys[0]: 5.0})
        await wait_for(lambda: aggregator.state.reports_total == 1, 30, "the report folded")
        assert aggregator.bound_port is not None
        metrics = await asyncio.to_thread(scrape_text, aggregator.bound_port)
    finally:
        stop.set()
        await task
    checkpoints = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]  # the segments too
    assert checkpoints
    for blob in [*(p.read_bytes() for p in checkpoints), metrics.encode(), "\n".join(said).encode()]:
        assert PASSWORD.encode() not in blob
    assert PASSWORD not in repr(settings) + settings.describe() + repr(aggregator.kafka)


def scrape_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


async def test_demo_runs_on_a_named_cluster_over_tls(apache_kafka_tls: TlsEndpoint, tmp_path: Path) -> None:
    """``kvldp demo --kafka-config``: no embedded broker; the demo's topics are its own."""
    client = properties(
        tmp_path / "client.properties",
        {
            "bootstrap.servers": apache_kafka_tls.bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(apache_kafka_tls.certs.ca_pem),
        },
    )
    done = await asyncio.to_thread(
        run_kvldp,
        *("demo", "--users", "500", "--periods", "2", "--rate", "50000", "--metrics-port", "0"),
        *("--kafka-config", str(client)),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"broker: {apache_kafka_tls.bootstrap_servers} (SSL) (external)" in done.stdout
    assert "1000/1000 reports folded" in done.stdout
