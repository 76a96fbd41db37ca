"""The Kafka client properties file: parsing, checks before connecting, secrets kept out
of every message, and the settings reaching every aiokafka client unchanged."""

from __future__ import annotations

import argparse
import dataclasses
import re
import ssl
from pathlib import Path

import pytest
import trustme

from kvldp.aggregator.control_publisher import ControlPublisher
from kvldp.aggregator.dlq import dlq_producer
from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.statetopic import StateFollower, StateTopic
from kvldp.aggregator.topics import under_replicated, wanted_topics
from kvldp.common.config.collection_file import parse_collection
from kvldp.kafka.client_config import (
    KNOWN_KEYS,
    InvalidKafkaConfig,
    KafkaConfig,
    kafka_config,
    load_kafka_config,
    resolve_kafka_config,
)
from kvldp.kafka.client_start import explain_failure
from kvldp.kafka.command_line import external_kafka, kafka_settings
from kvldp.kafka.properties_file import parse_properties
from kvldp.producer.collector import Collector
from kvldp.sim.record_replay import replay

from support.doc_blocks import first_block

SECRET = "pa55-W0rd-never-shown"


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, and a client certificate with its (encrypted) key."""
    where = tmp_path_factory.mktemp("pems")
    ca = trustme.CA()
    client = ca.issue_cert("device-1")
    paths = {"ca": where / "ca.pem", "cert": where / "client.pem", "key": where / "client.key"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_pem.write_to_path(str(paths["key"]))
    return {k: str(v) for k, v in paths.items()}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text, encoding="utf-8")
    return path


def sasl_ssl(pems: dict[str, str], **extra: str) -> dict[str, str]:
    return {
        "bootstrap.servers": "kafka-1.example:9093,kafka-2.example:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "telemetry",
        "sasl.password": SECRET,
        "ssl.ca.location": pems["ca"],
        **extra,
    }


def test_properties_file_syntax(tmp_path: Path, pems: dict[str, str]) -> None:
    path = write(
        tmp_path,
        "# provider file\n"
        "bootstrap.servers = broker.example:9092\n"
        "! another comment style\n\n"
        "security.protocol: SASL_SSL\n"
        "sasl.mechanisms=PLAIN\n"
        "sasl.username=key\\\n"
        "  123\n"
        f"sasl.password={SECRET}=x\n"
        f"ssl.ca.location={pems['ca']}\n"
        "client.id=acme-telemetry\n",
    )
    config = load_kafka_config(path)
    assert config.bootstrap_servers == "broker.example:9092"
    assert (config.security_protocol, config.sasl_mechanism) == ("SASL_SSL", "PLAIN")
    assert config.sasl_username == "key123"
    assert config.sasl_password == f"{SECRET}=x"  # only the first separator splits
    assert config.client_id == "acme-telemetry"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"sasl.password={SECRET}\nsasl.password={SECRET}2\n", "line 2: sasl.password is set twice"),
        (f"sasl.password={SECRET}é\n", "line 1: sasl.password: characters outside ASCII"),
        (f"sasl.password={SECRET}\\u12\n", "line 1: \\u must be followed by four hexadecimal digits"),
        ("just-a-word\n", "unknown key 'just-a-word'"),  # Java's reading: a key with an empty value
    ],
)
def test_a_file_kvldp_does_not_read_is_one_line_naming_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidKafkaConfig) as caught:
        load_kafka_config(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
    assert "\n" not in str(caught.value) and SECRET not in str(caught.value)


def test_jaas_config_gives_the_credentials(pems: dict[str, str]) -> None:
    entries = sasl_ssl(pems)
    del entries["sasl.username"], entries["sasl.password"]
    entries["sasl.jaas.config"] = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="telemetry" '
        f"password='{SECRET}';"
    )
    config = kafka_config(entries)
    assert (config.sasl_username, config.sasl_password) == ("telemetry", SECRET)
    entries["sasl.mechanism"] = "PLAIN"
    with pytest.raises(InvalidKafkaConfig, match="ScramLoginModule, which does not fit") as caught:
        kafka_config(entries)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"acks": "all"}, "acks: remove this line"),
        ({"linger.ms": "5"}, "unknown key 'linger.ms'"),
        ({"ssl.truststore.location": "/x.jks"}, "Java keystores are not read"),
        ({"security.protocol": "TLS"}, "security.protocol 'TLS' is not one of"),
        ({"sasl.mechanism": "GSSAPI"}, "sasl.mechanism 'GSSAPI' is not supported"),
        ({"sasl.password": ""}, "needs sasl.username and sasl.password"),
        ({"ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location '/nonexistent/ca.pem' does not exist"),
        ({"bootstrap.servers": "user:pw@host:9092"}, "give host:port only"),
        ({"bootstrap.servers": "host"}, "'host' is not host:port"),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "use https"),
    ],
)
def test_wrong_settings_are_named_in_one_line(
    pems: dict[str, str], change: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidKafkaConfig, match=message) as caught:
        kafka_config(sasl_ssl(pems, **change))
    text = str(caught.value)
    assert "\n" not in text
    assert SECRET not in text
    assert "pw@" not in text


def test_settings_that_do_not_fit_the_protocol(pems: dict[str, str]) -> None:
    with pytest.raises(InvalidKafkaConfig, match=re.escape("needs sasl.mechanism")):
        kafka_config({"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT"})
    with pytest.raises(InvalidKafkaConfig, match=re.escape("sasl.username is set but security.protocol=SSL")):
        kafka_config({"bootstrap.servers": "h:1", "security.protocol": "SSL", "sasl.username": "u"})
    with pytest.raises(
        InvalidKafkaConfig, match=re.escape("ssl.ca.location is set but security.protocol=PLAINTEXT")
    ):
        kafka_config({"bootstrap.servers": "h:1", "ssl.ca.location": pems["ca"]})
    with pytest.raises(
        InvalidKafkaConfig, match=re.escape("ssl.key.location needs ssl.certificate.location")
    ):
        kafka_config(
            {"bootstrap.servers": "h:1", "security.protocol": "SSL", "ssl.key.location": pems["key"]}
        )


def test_tls_files_are_loaded_before_connecting(tmp_path: Path, pems: dict[str, str]) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(InvalidKafkaConfig, match="not a PEM CA certificate"):
        kafka_config(
            {"bootstrap.servers": "h:1", "security.protocol": "SSL", "ssl.ca.location": str(not_pem)}
        )
    with pytest.raises(InvalidKafkaConfig, match="cannot load the client certificate"):
        kafka_config(
            {
                "bootstrap.servers": "h:1",
                "security.protocol": "SSL",
                "ssl.certificate.location": pems["cert"],
                "ssl.key.location": pems["ca"],  # not the key
            }
        )
    mutual = kafka_config(
        {
            "bootstrap.servers": "h:1",
            "security.protocol": "SSL",
            "ssl.ca.location": pems["ca"],
            "ssl.certificate.location": pems["cert"],
            "ssl.key.location": pems["key"],
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert mutual.ssl_context is not None
    assert mutual.ssl_context.check_hostname is False
    assert mutual.ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidKafkaConfig, match="does not exist"):
        load_kafka_config(tmp_path / "nope.properties")
    with pytest.raises(InvalidKafkaConfig, match="is a directory"):
        load_kafka_config(tmp_path)


def test_secrets_stay_out_of_repr_and_description(pems: dict[str, str]) -> None:
    config = kafka_config(sasl_ssl(pems, **{"ssl.key.password": SECRET}))
    for text in (repr(config), str(config), config.describe()):
        assert SECRET not in text
    assert config.describe() == (
        "kafka-1.example:9093,kafka-2.example:9093 (SASL_SSL SCRAM-SHA-512 as telemetry)"
    )


def cli_args(**values: object) -> argparse.Namespace:
    return argparse.Namespace(
        kafka_config=values.get("kafka_config"),
        kafka_option=values.get("kafka_option", []),
        bootstrap_servers=values.get("bootstrap_servers"),
    )


def test_command_line_and_environment(
    tmp_path: Path, pems: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KVLDP_KAFKA_CONFIG", raising=False)
    monkeypatch.delenv("KVLDP_BOOTSTRAP_SERVERS", raising=False)
    path = write(tmp_path, "\n".join(f"{k}={v}" for k, v in sasl_ssl(pems).items()))
    config = kafka_settings(cli_args(kafka_config=str(path), kafka_option=["client.id=cli"]))
    assert config.client_id == "cli"
    assert config.bootstrap_servers == "kafka-1.example:9093,kafka-2.example:9093"
    monkeypatch.setenv("KVLDP_BOOTSTRAP_SERVERS", "env-broker:9093")
    assert kafka_settings(cli_args(kafka_config=str(path))).bootstrap_servers == "env-broker:9093"
    assert (
        kafka_settings(cli_args(kafka_config=str(path), bootstrap_servers="flag:1")).bootstrap_servers
        == "flag:1"
    )
    monkeypatch.setenv("KVLDP_KAFKA_CONFIG", str(path))
    assert kafka_settings(cli_args()).security_protocol == "SASL_SSL"
    with pytest.raises(InvalidKafkaConfig, match="secrets do not go on the command line") as caught:
        kafka_settings(cli_args(kafka_option=[f"sasl.password={SECRET}"]))
    assert SECRET not in str(caught.value)
    monkeypatch.delenv("KVLDP_KAFKA_CONFIG")
    monkeypatch.delenv("KVLDP_BOOTSTRAP_SERVERS")
    assert external_kafka(cli_args()) is None
    with pytest.raises(Exception, match="no Kafka address"):
        kafka_settings(cli_args())


def test_sdk_takes_a_file_a_mapping_or_an_address(tmp_path: Path, pems: dict[str, str]) -> None:
    entries = sasl_ssl(pems)
    path = write(tmp_path, "\n".join(f"{k}={v}" for k, v in entries.items()))
    from_file, from_mapping = resolve_kafka_config(None, str(path)), resolve_kafka_config(None, entries)
    assert dataclasses.replace(from_mapping, source=from_file.source) == from_file
    assert resolve_kafka_config("other:1", entries).bootstrap_servers == "other:1"
    assert resolve_kafka_config("plain:1", None) == KafkaConfig.plaintext("plain:1")
    with pytest.raises(InvalidKafkaConfig, match="give bootstrap_servers or kafka_config"):
        resolve_kafka_config(None, None)


COLLECTION = parse_collection(
    {
        "name": "secured",
        "mechanism": "pckv_ue",
        "epsilon": 1.0,
        "key_count": 3,
        "value_range": [0.0, 1.0],
        "aggregate": {"replication_factor": 3, "min_insync_replicas": 2},
    },
    source="test",
)


def client_settings(client: object) -> dict[str, object]:
    """What aiokafka's client of a producer or consumer was built with."""
    inner = getattr(client, "client", None) or client._client  # type: ignore[attr-defined]
    return {
        "bootstrap_servers": inner._bootstrap_servers,
        "client_id": inner._client_id,
        "security_protocol": inner._security_protocol,
        "sasl_mechanism": inner._sasl_mechanism,
        "sasl_plain_username": inner._sasl_plain_username,
        "sasl_plain_password": inner._sasl_plain_password,
        "ssl_context": inner._ssl_context,
    }


@pytest.mark.asyncio
async def test_settings_reach_every_client_unchanged(pems: dict[str, str]) -> None:
    """Every kvldp client is built from the same settings: address, protocol, mechanism,
    credentials and the very TLS context (the bundled broker cannot check SASL logins, so
    this is where correct SASL wiring is shown)."""
    config = kafka_config(sasl_ssl(pems))
    expected = {
        "bootstrap_servers": config.bootstrap_servers,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "telemetry",
        "sasl_plain_password": SECRET,
        "ssl_context": config.ssl_context,
    }
    sdk = Collector(COLLECTION, kafka_config=config)
    aggregator = Aggregator(COLLECTION, config, metrics_port=0)
    clients = {
        "sdk": sdk.transport.producer,
        "state": StateTopic(COLLECTION, config)._producer,
        "state reader": StateFollower(COLLECTION, config)._consumer,
        "dlq": dlq_producer(config),
        "control": ControlPublisher(COLLECTION, config)._producer,
    }
    lowered = Collector(COLLECTION, kafka_config=config, acks=1)
    named = Collector(COLLECTION, kafka_config=kafka_config(sasl_ssl(pems, **{"client.id": "acme"})))
    try:
        for name, client in clients.items():
            got = client_settings(client)
            assert {k: got[k] for k in expected} == expected, name
        assert client_settings(sdk.transport.producer)["client_id"] == "kvldp-producer"
        assert client_settings(named.transport.producer)["client_id"] == "acme"
        assert sdk.transport.producer._sender._acks == -1  # acks="all"
        assert lowered.transport.producer._sender._acks == 1
        assert aggregator.kafka is config
        for durable in (clients["state"], clients["dlq"], clients["control"]):
            assert durable._sender._acks == -1
    finally:
        for client in [*clients.values(), lowered.transport.producer, named.transport.producer]:
            await client.stop()


def test_topics_carry_the_replication_settings() -> None:
    topics = wanted_topics(COLLECTION, state=True)
    assert [t.name for t in topics] == ["kvldp.secured.reports", "kvldp.secured.dlq", "kvldp.secured.state"]
    for topic in topics:
        assert topic.replication_factor == 3
        assert topic.topic_configs["min.insync.replicas"] == "2"
    assert topics[2].topic_configs["cleanup.policy"] == "compact"
    described = [
        {"topic": "kvldp.secured.reports", "partitions": [{"replicas": [1, 2, 3]}, {"replicas": [1]}]},
        {"topic": "kvldp.secured.dlq", "partitions": [{"replicas": [1, 2, 3]}]},
    ]
    (line,) = under_replicated(COLLECTION, described)
    assert (
        "kvldp.secured.reports has 1 replica(s) per partition, fewer than aggregate.replication_factor=3"
        in line
    )


@pytest.mark.asyncio
async def test_failure_explanations_name_the_setting(pems: dict[str, str]) -> None:
    config = kafka_config(sasl_ssl(pems))

    class SaslAuthenticationFailedError(Exception):
        pass

    said = await explain_failure(SaslAuthenticationFailedError("Authentication failed"), config)
    assert said is not None and "SASL authentication failed: check sasl.username and sasl.password" in said
    said = await explain_failure(KeyError("v"), config)  # aiokafka's SCRAM client on an e= reply
    assert said is not None and "SASL authentication failed" in said
    assert await explain_failure(KeyError("v"), KafkaConfig.plaintext("h:1")) is None
    assert await explain_failure(RuntimeError("other"), config) is None
    assert SECRET not in said


@pytest.mark.asyncio
async def test_replay_checks_the_file_before_connecting(tmp_path: Path) -> None:
    not_a_recording = tmp_path / "notarecording.rec"
    not_a_recording.write_bytes(b"hello")
    # port 9 (discard) on loopback: nothing listens, but the file is refused first
    with pytest.raises(Exception, match="not a kvldp recording"):
        await replay(not_a_recording, "127.0.0.1:9")


def test_the_readme_documents_every_key_with_a_file_that_reads() -> None:
    text = (Path(__file__).parents[1] / "README.md").read_text()
    missing = [key for key in KNOWN_KEYS if key not in text]
    assert not missing, f"README.md does not document {missing}"
    entries = parse_properties(first_block("README.md", "properties").encode(), "README.md")
    assert entries.pop("ssl.ca.location") == "/etc/kvldp/ca.pem"  # a path on the reader's machine
    config = kafka_config(entries, "README.md")
    assert (config.security_protocol, config.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
