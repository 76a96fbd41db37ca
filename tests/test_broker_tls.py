"""Brokers secured (real aiokafka clients against real brokers, no mocks): TLS clients on
Apache Kafka's own SSL listener (the session's ``apache_kafka``, with a PEM keystore)
and that listener's settings; the TLS front of the embedded broker (stunnel in front of
Tansu, what ``kvldp broker --tls-cert`` runs) by its start-up and its errors; and SASL
required by Tansu, which refuses every login (these stay on Tansu: Apache Kafka's SCRAM
logins, and refusals, are tested in tests/test_kafka_acls.py).

aiokafka's own failures are pinned here, since kvldp turns them into one-line errors: an
untrusted certificate and a plain client on the TLS port both end in
``KafkaConnectionError("Unable to bootstrap from [...]")`` (the certificate's reason is
only in aiokafka's log), and a SCRAM login Tansu refuses ends in ``KeyError('v')``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from cryptography.hazmat.primitives import serialization

from kvldp.broker.apache_kafka import ApacheKafka, KafkaTls
from kvldp.broker.tansu import BrokerError, EmbeddedBroker

from support.tls import TlsBroker, TlsEndpoint, TlsFiles

#: the request timeout of the clients that must not start: aiokafka bounds each step of a
#: start by it (the connection with its TLS handshake, the version lookup, each SASL
#: exchange, the metadata request)
REQUEST_TIMEOUT_S = 10.0
#: a refusal ends the start within the first exchange, in milliseconds; a client that waits
#: for an answer that never comes only gives up when a request timeout fires. "Fast" is
#: therefore before the first request timeout could have fired: the margin left to a
#: loaded machine is the whole request timeout
FAIL_FAST = REQUEST_TIMEOUT_S


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def trusting(cafile: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cafile))


async def start_fails(**options: Any) -> tuple[BaseException, float]:
    """Starts a producer that must not start; returns what it raised and after how long
    (the producer is always closed, started or not). A start still going after two
    request timeouts is given up: it raises TimeoutError, after longer than ``FAIL_FAST``."""
    producer = AIOKafkaProducer(request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000), **options)
    began = time.monotonic()
    try:
        async with asyncio.timeout(2 * REQUEST_TIMEOUT_S):
            await producer.start()
    except Exception as exc:
        return exc, time.monotonic() - began
    finally:
        await producer.stop()
    raise AssertionError("the producer started")


# ---------------------------------------------------------------------- TLS
@pytest.mark.asyncio
async def test_messages_round_trip_over_tls(apache_kafka_tls: TlsEndpoint) -> None:
    topic = unique_topic("tls-round-trip")
    sent = [f"message {i}".encode() for i in range(3)]
    context = trusting(apache_kafka_tls.certs.ca_pem)
    options: dict[str, Any] = {
        "bootstrap_servers": apache_kafka_tls.bootstrap_servers,
        "security_protocol": "SSL",
        "ssl_context": context,
        "request_timeout_ms": 10_000,
    }
    async with asyncio.timeout(60):
        producer = AIOKafkaProducer(**options)
        try:
            await producer.start()
            for value in sent:
                await producer.send_and_wait(topic, value, partition=0)  # one partition: in order
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options)
        received: list[bytes] = []
        try:
            await consumer.start()
            while len(received) < len(sent):
                batches = await consumer.getmany(timeout_ms=1000)
                received += [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()
    assert received == sent


@pytest.mark.asyncio
async def test_a_client_trusting_another_ca_fails_fast(
    apache_kafka_tls: TlsEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="aiokafka"):
        exc, seconds = await start_fails(
            bootstrap_servers=apache_kafka_tls.bootstrap_servers,
            security_protocol="SSL",
            ssl_context=trusting(apache_kafka_tls.certs.other_ca_pem),
        )
    assert seconds < FAIL_FAST
    assert type(exc) is KafkaConnectionError
    assert str(exc).startswith("KafkaConnectionError: Unable to bootstrap from [('127.0.0.1',")
    # the reason is only in aiokafka's log
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text


@pytest.mark.asyncio
async def test_a_plain_client_on_the_tls_port_fails_fast(apache_kafka_tls: TlsEndpoint) -> None:
    exc, seconds = await start_fails(
        bootstrap_servers=apache_kafka_tls.bootstrap_servers, security_protocol="PLAINTEXT"
    )
    assert seconds < FAIL_FAST
    assert type(exc) is KafkaConnectionError
    assert "Unable to bootstrap from" in str(exc)


def test_an_apache_tls_listener_needs_a_certificate_and_a_plain_pem_key(
    tls_files: TlsFiles, tmp_path: Path
) -> None:
    """Checked as the nodes' settings are written, before any JVM starts: one line each."""
    missing = tmp_path / "nowhere.pem"
    encrypted = tmp_path / "encrypted.key"
    key = serialization.load_pem_private_key(tls_files.server_key_pem.read_bytes(), None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    for tls, message in [
        (KafkaTls(missing, tls_files.server_key_pem), f"the TLS certificate {missing} does not exist"),
        (KafkaTls(tls_files.server_key_pem, tls_files.server_key_pem), "holds no PEM certificate"),
        (KafkaTls(tls_files.server_cert_pem, encrypted), "is no unencrypted PEM private key"),
    ]:
        cluster = ApacheKafka(1, tls=tls)
        with pytest.raises(BrokerError, match=message) as caught:
            cluster.start()
        assert "\n" not in str(caught.value)
        assert not cluster.nodes  # nothing left running


# ------------------------------------------- the embedded broker's TLS front (Tansu only:
# stunnel in front of Tansu is what `kvldp broker --tls-cert` and `make demo` users run)
def test_a_certificate_needs_its_key(tls_files: TlsFiles) -> None:
    with pytest.raises(BrokerError, match="both a certificate and its private key") as caught:
        EmbeddedBroker(tls_cert=tls_files.server_cert_pem)
    assert "\n" not in str(caught.value)
    with pytest.raises(BrokerError, match="both a certificate and its private key"):
        EmbeddedBroker(tls_key=tls_files.server_key_pem)


def test_a_missing_certificate_is_named(tls_files: TlsFiles, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    broker = EmbeddedBroker(tls_cert=missing, tls_key=tls_files.server_key_pem)
    with pytest.raises(BrokerError) as caught:
        broker.start()
    assert str(caught.value) == f"the TLS certificate {missing} does not exist (or is not a file)"
    assert broker.process is None  # nothing was started


def test_a_key_that_does_not_match_is_refused_on_one_line(tls_files: TlsFiles) -> None:
    # the client's key with the server's certificate: stunnel refuses to start
    broker = EmbeddedBroker(tls_cert=tls_files.server_cert_pem, tls_key=tls_files.client_key_pem)
    with pytest.raises(BrokerError) as caught:
        broker.start()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("stunnel (the TLS proxy) exited at start (status 1): ")
    assert "key values mismatch" in message
    assert broker.process is None and broker.proxy is None  # Tansu was stopped again


def test_a_file_that_is_no_certificate_is_refused_on_one_line(tls_files: TlsFiles, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(BrokerError, match=r"^stunnel \(the TLS proxy\) exited at start") as caught:
        EmbeddedBroker(tls_cert=junk, tls_key=tls_files.server_key_pem).start()
    assert "\n" not in str(caught.value)


def test_without_stunnel_tls_is_one_clear_line(
    tls_files: TlsFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no stunnel on it
    broker = EmbeddedBroker(tls_cert=tls_files.server_cert_pem, tls_key=tls_files.server_key_pem)
    with pytest.raises(BrokerError) as caught:
        broker.start()
    assert str(caught.value) == "--tls-cert needs stunnel: install Debian's stunnel4 (make stunnel)"
    assert broker.process is None


def test_the_tls_front_advertises_its_proxy_and_stops_with_tansu(tls_files: TlsFiles) -> None:
    broker = EmbeddedBroker(tls_cert=tls_files.server_cert_pem, tls_key=tls_files.server_key_pem).start()
    assert broker.tls and broker.alive()
    assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
    assert broker.internal_port not in (0, broker.port)
    tansu, proxy = broker.process, broker.proxy
    assert tansu is not None and proxy is not None and proxy.process is not None
    stunnel = proxy.process
    assert proxy._dir is not None
    workdir = Path(proxy._dir.name)
    assert (workdir / "stunnel.conf").is_file()
    broker.stop()
    assert tansu.poll() is not None and stunnel.poll() is not None
    assert not workdir.exists()
    assert not broker.alive() and broker.log_tail() == ""
    broker.stop()  # twice is harmless


# ------------------------------------------ SASL (Tansu only: its refusal of every login)
async def _scram_fails(broker: EmbeddedBroker, **options: Any) -> None:
    exc, seconds = await start_fails(
        bootstrap_servers=broker.bootstrap_servers,
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="someone",
        sasl_plain_password="not-the-password",
        **options,
    )
    assert seconds < FAIL_FAST
    # Tansu answers the client's final SCRAM message with "e=unknown-user", which aiokafka
    # does not read: it looks for the server signature "v=" and raises KeyError('v')
    assert type(exc) is KeyError
    assert exc.args == ("v",)


@pytest.mark.asyncio
async def test_a_scram_login_to_the_sasl_broker_fails_fast(sasl_broker: EmbeddedBroker) -> None:
    assert sasl_broker.authentication and not sasl_broker.tls
    await _scram_fails(sasl_broker, security_protocol="SASL_PLAINTEXT")


@pytest.mark.asyncio
async def test_a_scram_login_over_tls_fails_fast(sasl_tls_broker: TlsBroker) -> None:
    broker, certs = sasl_tls_broker
    await _scram_fails(broker, security_protocol="SASL_SSL", ssl_context=trusting(certs.ca_pem))


@pytest.mark.asyncio
async def test_the_sasl_broker_refuses_clients_without_a_login(sasl_broker: EmbeddedBroker) -> None:
    exc, seconds = await start_fails(bootstrap_servers=sasl_broker.bootstrap_servers)
    assert seconds < FAIL_FAST
    assert type(exc) is KafkaConnectionError
