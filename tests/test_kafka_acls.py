"""The untrusted-devices model on a real secured cluster: Apache Kafka with SCRAM-SHA-512
logins and KRaft's ``StandardAuthorizer`` (:class:`kvldp.broker.apache_kafka.KafkaSecurity`),
one node for the whole module, with deploy/'s broker settings merged in where they apply
outside a container.

Three principals and the ACLs docs/untrusted-devices.md gives a collection:
``ingest`` (the gateway's) alone may write the reports topic; ``aggregator`` reads it
and writes its own topics (dead letters, state); ``device`` (a credential a device could
hold) has none. A device's write is refused with one line, and so is an aggregator
missing its group's ACL; the gateway's writes reach the aggregator, which folds them.
(deploy/'s start script, its client files and its ACLs run in :mod:`tests.test_deploy_acls`.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import javaproperties
import pytest
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
)

from kvldp.aggregator.topics import ensure_topics
from kvldp.broker.apache_kafka import ApacheKafka, KafkaSecurity, ScramUser
from kvldp.broker.child_process import BrokerError
from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.gateway.signing import load_private_key, sign_token
from kvldp.kafka.client_config import kafka_config
from kvldp.kafka.main_loop import Stop, run_async
from kvldp.producer.collector import Collector
from kvldp.reliability.processes import AggregatorProcess, total

from support import run_kvldp
from support.deploy import NOT_APPLICABLE, broker_properties, deploy_settings
from support.gateway_process import GatewayProcess
from support.pipeline import collection_toml, eventually, unique_collection

INGEST = ScramUser("ingest", "ingest-secret")
AGGREGATOR = ScramUser("aggregator", "aggregator-secret")
DEVICE = ScramUser("device", "device-secret")
AUDIENCE = "kvldp-gateway"
DEVICES = 40


@pytest.fixture(scope="module")
def secured() -> Iterator[ApacheKafka]:
    with ApacheKafka(
        1, security=KafkaSecurity((INGEST, AGGREGATOR, DEVICE)), extra_properties=deploy_settings()
    ) as kafka:
        print(f"secured Apache Kafka started in {kafka.started_in_s:.1f} s")
        yield kafka


def allow_collection(kafka: ApacheKafka, collection: Collection, group: bool = True) -> None:
    """The ACLs of docs/untrusted-devices.md for one collection (without the aggregator's
    group: all but that one)."""
    kafka.allow(INGEST.principal, ["Write", "Describe"], topics=[collection.reports_topic])
    kafka.allow(AGGREGATOR.principal, ["Read", "Describe", "Create"], topics=[collection.reports_topic])
    kafka.allow(
        AGGREGATOR.principal,
        ["Read", "Write", "Describe", "Create"],
        topics=[collection.dlq_topic, collection.state_topic],
    )
    if group:
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
        if f" {key}=null sensitive=true " in described:
            # a setting Kafka describes without its value (a login module, the authorizer's
            # super users and default): set in server.properties all the same
            assert f"STATIC_BROKER_CONFIG:{key}=null" in described, key
            continue
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
        assert produced.returncode == 2, produced.stderr
        lines = produced.stderr.strip().splitlines()
        assert len(lines) == 1, produced.stderr
        assert "Traceback" not in produced.stderr
        assert f"not authorized for topic {collection.reports_topic}" in lines[0], lines[0]
        assert f"as {user.name})" in lines[0], lines[0]
        print(lines[0])  # the line a user sees, with -s


async def create_topics(kafka: ApacheKafka, collection: Collection) -> None:
    """The collection's topics, as the aggregator's principal creates them."""
    await ensure_topics(kafka_config(kafka.client_properties(AGGREGATOR.name)), collection)


async def one_device(collection: Collection, url: str, name: str, token: str, index: int) -> int:
    """One device reporting through the gateway; the reports its collector sent."""
    async with Collector(collection, endpoint=url, token=token, device_id=name) as collector:
        await collector.report({collection.keys[index % collection.d]: float(index % 11)})
        await collector.flush()
        return collector.sent_reports


@pytest.mark.asyncio
async def test_gateway_to_aggregator_each_as_its_own_principal(secured: ApacheKafka, tmp_path: Path) -> None:
    """Devices -> gateway (``ingest``) -> reports topic -> aggregator (``aggregator``),
    which creates its topics and folds every report."""
    collection = unique_collection()
    allow_collection(secured, collection)
    toml = collection_toml(collection, tmp_path / "c.toml")
    keygen = run_kvldp("devices", "keygen", "--out", str(tmp_path / "keys"))
    assert keygen.returncode == 0, keygen.stderr
    key, kid = load_private_key(tmp_path / "keys" / "private.pem")
    names = [f"phone-{i:03d}" for i in range(DEVICES)]
    aggregator = AggregatorProcess(
        toml,
        secured.sasl_bootstrap_servers,
        tmp_path,
        env={"KVLDP_KAFKA_CONFIG": str(client_file(secured, AGGREGATOR, tmp_path / "aggregator.properties"))},
    ).start()
    gateway = GatewayProcess(
        [toml],
        tmp_path / "keys" / "jwks.json",
        AUDIENCE,
        secured.sasl_bootstrap_servers,
        tmp_path,
        ["--kafka-config", str(client_file(secured, INGEST, tmp_path / "ingest.properties"))],
    )
    try:
        await aggregator.ready()  # it created the collection's topics as its own principal
        url = await gateway.start()
        sent = await asyncio.gather(
            *(
                one_device(collection, url, name, sign_token(key, kid, name, AUDIENCE, 600), i)
                for i, name in enumerate(names)
            )
        )
        assert sent == [1] * DEVICES

        async def all_folded() -> bool:
            samples = await asyncio.to_thread(aggregator.samples)
            return total(samples, "kvldp_reports_total") >= DEVICES

        await eventually(all_folded, 60, f"the aggregator to fold {DEVICES} reports")
        samples = await asyncio.to_thread(aggregator.samples)
        assert total(samples, "kvldp_reports_total") == DEVICES
        assert total(samples, "kvldp_reports_rejected_total") == 0
        assert gateway.stop() == 0
        assert aggregator.stop() == 0
    finally:
        gateway.kill()
        aggregator.kill()


@pytest.mark.parametrize(
    "user",
    [
        ScramUser("a,b", "secret"),
        ScramUser("ingest", "pass]word"),
        ScramUser("ingest", ""),
        ScramUser("", "x"),
    ],
)
def test_a_scram_user_storage_tool_would_misread_is_refused(user: ScramUser) -> None:
    with pytest.raises(BrokerError, match="StorageTool"):
        KafkaSecurity((user,))


def test_scram_users_are_created_at_format_time_each_once() -> None:
    with pytest.raises(BrokerError, match="must differ"):
        KafkaSecurity((INGEST, ScramUser("ingest", "other-secret")))
    assert KafkaSecurity((INGEST, DEVICE)).format_arguments() == [
        "--add-scram",
        "SCRAM-SHA-512=[name=ingest,password=ingest-secret]",
        "--add-scram",
        "SCRAM-SHA-512=[name=device,password=device-secret]",
    ]


def test_an_unsecured_cluster_has_no_sasl_listener() -> None:
    with pytest.raises(BrokerError, match="not secured"):
        ApacheKafka(1).client_properties("ingest")


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (TopicAuthorizationFailedError("kvldp.x.reports"), "not authorized for topic kvldp.x.reports "),
        (
            GroupAuthorizationFailedError("kvldp.x.aggregator"),
            "not authorized for consumer group kvldp.x.aggregator ",
        ),
        (ClusterAuthorizationFailedError(), "not authorized for cluster "),
    ],
)
def test_an_acl_refusal_is_one_line_naming_what_was_refused(error: KafkaError, said: str) -> None:
    async def refused(_: Stop) -> None:
        raise error

    with pytest.raises(KvldpError) as caught:
        run_async(refused, "127.0.0.1:9092")
    message = str(caught.value)
    assert "\n" not in message and said in message and message.startswith("Kafka at 127.0.0.1:9092 refused")


def test_an_aggregator_without_its_group_acl_stops_with_one_line(
    secured: ApacheKafka, tmp_path: Path
) -> None:
    collection = unique_collection()
    allow_collection(secured, collection, group=False)
    toml = collection_toml(collection, tmp_path / "c.toml")
    aggregated = run_kvldp(
        "aggregate",
        "--collection",
        str(toml),
        "--metrics-port",
        "0",
        "--kafka-config",
        str(client_file(secured, AGGREGATOR, tmp_path / "aggregator.properties")),
        timeout=120,
    )
    assert aggregated.returncode == 2, aggregated.stderr
    assert "Traceback" not in aggregated.stderr
    (error,) = [line for line in aggregated.stderr.splitlines() if line.startswith("kvldp: error:")]
    assert f"not authorized for consumer group {collection.consumer_group} " in error, aggregated.stderr
