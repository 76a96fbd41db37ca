"""The untrusted-devices model on a real secured cluster: Apache Kafka with SCRAM-SHA-512
logins and KRaft's ``StandardAuthorizer`` (:class:`kvldp.broker.apache_kafka.KafkaSecurity`),
one node for the whole module, with deploy/'s broker settings merged in where they apply
outside a container.

Three principals and the ACLs docs/untrusted-devices.md gives a collection:
``ingest`` (the gateway's) alone may write the reports topic; ``aggregator`` reads it
and writes its own topics (dead letters, state); ``device`` (a credential a device could
hold) has none. A device's write is refused with one line; the gateway's writes reach
the aggregator, which folds them. The broker's start script of deploy/ runs unchanged
against this broker, with ``kafka-configs.sh`` a thin wrapper of the fetched jars.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import javaproperties
import pytest

from kvldp.aggregator.topics import ensure_topics
from kvldp.broker.apache_kafka import ApacheKafka, KafkaSecurity, ScramUser
from kvldp.common.collection import Collection
from kvldp.kafka.client_config import kafka_config

from support import run_kvldp
from support.deploy import broker_properties
from support.pipeline import collection_toml, unique_collection

INGEST = ScramUser("ingest", "ingest-secret")
AGGREGATOR = ScramUser("aggregator", "aggregator-secret")
DEVICE = ScramUser("device", "device-secret")
AUDIENCE = "kvldp-gateway"
DEVICES = 40

#: deploy/'s broker settings (docker-compose.yml's KAFKA_* as the image renders them) that
#: do not apply to a node on this machine's loopback, and why
NOT_APPLICABLE = {
    # the container's identity and storage: kvldp's node has its own id, a random
    # cluster id at format time and a temporary directory
    "node.id": "the node's id is kvldp's",
    "process.roles": "kvldp's nodes are broker and controller already",
    "log.dirs": "a path in the container's volume",
    # addresses: container host names and fixed ports; kvldp's node has the same listener
    # shape (a SASL listener CLIENT for clients, PLAINTEXT on loopback for the admin and
    # inter-broker traffic, CONTROLLER) on free loopback ports
    "listeners": "container host names and fixed ports",
    "advertised.listeners": "container host names and fixed ports",
    "listener.security.protocol.map": "SASL_SSL needs the certs volume; here CLIENT is SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL is kvldp's PLAINTEXT listener",
    "controller.listener.names": "the same name, CONTROLLER, on kvldp's port",
    "controller.quorum.voters": "kvldp's node bootstraps its quorum on its own controller port",
    "listener.name.external.scram-sha-512.sasl.jaas.config": "no EXTERNAL listener: one loopback SASL listener",
    # TLS: PEM files of the certs volume (their TLS is tested in test_deploy_scripts)
    "ssl.keystore.type": "no TLS listener here",
    "ssl.keystore.location": "a path in the certs volume",
    "ssl.truststore.type": "no TLS listener here",
    "ssl.truststore.location": "a path in the certs volume",
}


def deploy_settings() -> dict[str, str]:
    """deploy/'s broker properties that apply to a loopback node."""
    return {k: v for k, v in broker_properties().items() if k not in NOT_APPLICABLE}


@pytest.fixture(scope="module")
def secured() -> Iterator[ApacheKafka]:
    with ApacheKafka(
        1, security=KafkaSecurity((INGEST, AGGREGATOR, DEVICE)), extra_properties=deploy_settings()
    ) as kafka:
        print(f"secured Apache Kafka started in {kafka.started_in_s:.1f} s")
        yield kafka


def allow_collection(kafka: ApacheKafka, collection: Collection) -> None:
    """The ACLs of docs/untrusted-devices.md for one collection."""
    kafka.allow(INGEST.principal, ["Write", "Describe"], topics=[collection.reports_topic])
    kafka.allow(AGGREGATOR.principal, ["Read", "Describe", "Create"], topics=[collection.reports_topic])
    kafka.allow(
        AGGREGATOR.principal,
        ["Read", "Write", "Describe", "Create"],
        topics=[collection.dlq_topic, collection.state_topic],
    )
    kafka.allow(AGGREGATOR.principal, ["Read"], groups=[collection.consumer_group])


def client_file(kafka: ApacheKafka, user: ScramUser, path: Path) -> Path:
    path.write_text(javaproperties.dumps(kafka.client_properties(user.name), timestamp=None))
    return path


def test_deploy_settings_are_the_ones_a_node_here_cannot_take() -> None:
    """Every setting left out exists in deploy/ (a renamed one would silently apply)."""
    assert set(NOT_APPLICABLE) <= set(broker_properties())
    assert {"sasl.enabled.mechanisms", "auto.create.topics.enable", "min.insync.replicas"} <= set(
        deploy_settings()
    )


def test_the_secured_node_runs_deploys_settings(secured: ApacheKafka) -> None:
    """The broker took deploy/'s settings: its effective configuration shows them."""
    described = secured.run_tool(
        "kafka.admin.ConfigCommand",
        [
            "--bootstrap-server",
            secured.bootstrap_servers,
            "--describe",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--all",
        ],
    )
    for key, value in deploy_settings().items():
        if key.endswith("jaas.config"):
            continue  # a password setting: described as null
        assert f" {key}={value} " in described, key


def test_a_device_credential_cannot_write_the_reports_topic(secured: ApacheKafka, tmp_path: Path) -> None:
    collection = unique_collection()
    allow_collection(secured, collection)
    toml = collection_toml(collection, tmp_path / "c.toml")
    # the topic exists (the aggregator's principal creates it), so the refusal is the ACL's
    asyncio.run(create_topics(secured, collection))
    for user in (DEVICE, AGGREGATOR):
        produced = run_kvldp(
            "produce",
            "--collection",
            str(toml),
            "--simulate",
            "uniform",
            "--users",
            "10",
            "--kafka-config",
            str(client_file(secured, user, tmp_path / f"{user.name}.properties")),
            timeout=120,
        )
        assert produced.returncode != 0, produced.stderr
        lines = produced.stderr.strip().splitlines()
        assert len(lines) == 1, produced.stderr
        assert "Traceback" not in produced.stderr
        assert f"not authorized for topic {collection.reports_topic}" in lines[0], lines[0]
        assert f"as {user.name})" in lines[0], lines[0]


async def create_topics(kafka: ApacheKafka, collection: Collection) -> None:
    """The collection's topics, as the aggregator's principal creates them."""
    await ensure_topics(kafka_config(kafka.client_properties(AGGREGATOR.name)), collection)
