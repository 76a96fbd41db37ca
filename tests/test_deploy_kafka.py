"""Kafka in the compose stack, checked without a Docker engine: every kvldp service
reaches the broker over SASL_SSL with the mounted client file of its role (its own
principal), the published port is SASL_SSL, plaintext stays on the broker's loopback,
whose principal alone is a super user of an authorizer that allows nothing unless an ACL
says so, each password is written once, the broker's settings survive the apache/kafka
image's env-to-property mapping, and the collections write out their replication."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from typing import Any

from kvldp.broker.apache_kafka import ADMIN_PRINCIPAL, AUTHORIZER
from kvldp.broker.kafka_install import KAFKA_VERSION
from kvldp.common.config.collection_file import load_collection
from kvldp.kafka.client_config import KNOWN_KEYS

from support.deploy import (
    CLIENT_DIR,
    CLIENT_FILES,
    CLIENT_PATH,
    COMPOSE,
    COMPOSE_TEXT,
    DEPLOY,
    INTERPOLATION,
    KVLDP_SERVICES,
    SERVICES,
    START_SCRIPT,
    broker_env,
    broker_properties,
    client_properties,
    client_role,
    command_args,
    interpolate,
    listeners,
    mounted_file,
    mounted_target,
    mounts,
    option,
    protocols,
    script_default,
    volume_at,
)


def test_every_kvldp_service_reads_the_mounted_client_file_of_its_role() -> None:
    """The gateway and the simulated fleets log in as the ingestion principal, every
    aggregator as the aggregator principal."""
    assert set(KVLDP_SERVICES) >= {"aggregator", "producer", "checkout-worker", "checkout-exporter"}
    for name, service in KVLDP_SERVICES.items():
        path = option(service, "kafka-config")
        assert path == CLIENT_PATH, f"{name} reads {path}"
        source = mounted_file(service, path)
        assert source is not None and source.is_file(), f"{name}: {path} is not a file mounted from deploy/"
        role = client_role(service)
        assert role == ("aggregator" if command_args(service)[0] == "aggregate" else "ingest"), name
        ca = client_properties(role)["ssl.ca.location"]
        # the address and the secrets come from the file alone
        assert option(service, "bootstrap-servers") is None, name
        assert not any(a.startswith(("-X", "--kafka-option")) for a in command_args(service)), name
        assert not set(service.get("environment", {})) & {"KVLDP_BOOTSTRAP_SERVERS", "KVLDP_KAFKA_CONFIG"}
        # the CA the file names is in the volume the certs service fills
        volume = volume_at(service, ca)
        assert volume is not None, f"{name} does not mount {ca}"
        assert volume in [source for source, _ in mounts(SERVICES["certs"])], volume
        assert volume != volume_at(SERVICES["kafka"], broker_properties()["ssl.keystore.location"]), (
            f"{name} would see the broker's private key"
        )


def test_no_kvldp_service_uses_a_plaintext_listener() -> None:
    for role in CLIENT_FILES:
        settings = client_properties(role)
        assert settings["security.protocol"] == "SASL_SSL"
        mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms"))
        assert mechanism in broker_properties()["sasl.enabled.mechanisms"].split(",")
    advertised = listeners(broker_properties()["advertised.listeners"])
    by_address = {f"{host}:{port}": name for name, (host, port) in advertised.items()}
    for name, service in KVLDP_SERVICES.items():
        settings = client_properties(client_role(service))
        bootstrap = option(service, "bootstrap-servers") or settings["bootstrap.servers"]
        for server in bootstrap.split(","):
            listener = by_address.get(server)
            assert listener is not None, f"{name}: {server} is no advertised listener of kafka"
            assert protocols()[listener] == "SASL_SSL", (
                f"{name} connects to {listener} ({protocols()[listener]})"
            )
            assert server.split(":")[0] == "kafka"  # the compose network's name for the broker


def test_published_kafka_port_is_sasl_ssl_and_plaintext_stays_on_loopback() -> None:
    bound = listeners(broker_properties()["listeners"])
    advertised = listeners(broker_properties()["advertised.listeners"])
    kinds = protocols()
    assert set(kinds) == set(bound), "every listener has a security protocol"
    published = [str(m).split(":") for m in SERVICES["kafka"]["ports"]]
    assert published
    for host_port, container_port in published:
        (listener,) = [n for n, (_, port) in bound.items() if port == int(container_port)]
        assert kinds[listener] == "SASL_SSL", f"host port {host_port} is {listener} ({kinds[listener]})"
        assert advertised[listener] == ("localhost", int(host_port)), (
            "hosts must be sent back to the published port"
        )
    for name, (host, _) in bound.items():
        if kinds[name] in ("PLAINTEXT", "SASL_PLAINTEXT"):
            assert host in ("localhost", "127.0.0.1"), f"{name} ({kinds[name]}) is reachable from the network"
        else:
            assert kinds[name] == "SASL_SSL", name
    assert broker_properties()["controller.listener.names"] in bound
    assert kinds[broker_properties()["inter.broker.listener.name"]] == "PLAINTEXT"  # loopback, one node


def test_broker_settings_survive_the_image_start_script() -> None:
    """apache/kafka's start script checks KAFKA_ADVERTISED_LISTENERS by listener *name*:
    "SSL://" in it demands the image's JKS-style variables (KAFKA_SSL_KEYSTORE_FILENAME,
    ...), "SASL_...://" demands KAFKA_OPTS with a JAAS file. The stack configures TLS and
    SASL through plain properties instead, so its listener names must avoid both."""
    env = broker_env()
    assert "SSL://" not in env["KAFKA_ADVERTISED_LISTENERS"]
    assert not re.search(r"SASL_.*://", env["KAFKA_ADVERTISED_LISTENERS"])
    assert not {k for k in env if k.endswith(("_FILENAME", "_CREDENTIALS"))}
    props = broker_properties()
    kinds = protocols()
    mechanisms = props["sasl.enabled.mechanisms"].split(",")
    assert mechanisms == ["SCRAM-SHA-512"]
    for listener, kind in kinds.items():
        if kind.startswith("SASL_"):
            for mechanism in mechanisms:
                jaas = props[f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"]
                assert jaas == "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    # TLS from PEM files, with no keystore password (an unencrypted PKCS#8 key)
    assert props["ssl.keystore.type"] == props["ssl.truststore.type"] == "PEM"
    assert "ssl.keystore.password" not in props and "ssl.key.password" not in props
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        volume = volume_at(SERVICES["kafka"], props[key])
        assert volume is not None and volume in [s for s, _ in mounts(SERVICES["certs"])], key
    # replication written out: one node here (production values in the comments)
    for key in (
        "default.replication.factor",
        "min.insync.replicas",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ):
        assert props[key] == "1", key
    assert "min.insync.replicas 2" in COMPOSE_TEXT and "default.replication.factor 3" in COMPOSE_TEXT


def test_each_password_is_written_once() -> None:
    """Each role's password is in its client file only: the kvldp services of that role
    read it there and the broker creates the SCRAM user from the very same file, in the
    directory it mounts."""
    passwords = {role: client_properties(role)["sasl.password"] for role in CLIENT_FILES}
    assert all(passwords.values()) and len(set(passwords.values())) == len(passwords)
    for role, password in passwords.items():
        elsewhere = [
            path
            for path in DEPLOY.rglob("*")
            if path.is_file()
            and path.resolve() != CLIENT_FILES[role].resolve()
            and path.suffix not in (".json", ".png")
            and password in path.read_text(errors="replace")
        ]
        assert elsewhere == [], role
    assert not [t for t in strings(COMPOSE) if "password" in t.lower()], (
        "no password is set in the compose file"
    )
    for name, service in SERVICES.items():
        for key in service.get("environment", {}):
            assert "PASSWORD" not in key.upper() and "SECRET" not in key.upper(), (name, key)
    # the broker mounts the directory through a variable that points the stack at a copy
    (directory,) = [v for v in SERVICES["kafka"]["volumes"] if "kafka-clients" in v]
    variable = INTERPOLATION.search(directory)
    assert variable is not None, "KVLDP_KAFKA_CLIENTS points the whole stack at another directory"
    source, target = interpolate(directory).split(":")[:2]
    assert (DEPLOY / source).resolve() == CLIENT_DIR.resolve()
    assert script_default("KVLDP_CLIENT_DIR") == target
    assert SERVICES["kafka"]["entrypoint"][-1] == mounted_target(SERVICES["kafka"], START_SCRIPT)
    # and every service that reads a client file takes it from that same directory
    readers = {
        name for name, s in SERVICES.items() if any("kafka-clients" in v for v in s.get("volumes", []))
    }
    assert readers == {"kafka", *KVLDP_SERVICES}
    for name, service in KVLDP_SERVICES.items():
        (mount,) = [v for v in service["volumes"] if "kafka-clients" in v]
        assert mount.startswith(variable.group(0) + "/"), (name, mount)


def test_the_broker_authorizes_every_request_and_only_its_loopback_is_a_super_user() -> None:
    """KRaft's authorizer with no access unless an ACL grants it, as kvldp's secured
    Apache Kafka runs; the super user is the principal of the plaintext listeners, which
    are bound to loopback, and no client file can log in as it."""
    props = broker_properties()
    assert props["authorizer.class.name"] == AUTHORIZER
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == ADMIN_PRINCIPAL == "User:ANONYMOUS"
    bound = listeners(props["listeners"])
    for name, kind in protocols().items():
        assert kind in ("PLAINTEXT", "SASL_SSL"), name
        if kind == "PLAINTEXT":
            assert bound[name][0] == "localhost", name
    users = [client_properties(role)["sasl.username"] for role in CLIENT_FILES]
    assert "ANONYMOUS" not in users and len(set(users)) == len(users), users


def strings(node: Any) -> Iterator[str]:
    """Every key and string value of a parsed YAML document (its comments are gone)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)
    elif isinstance(node, str):
        yield node


def test_start_script_talks_to_the_loopback_listener() -> None:
    host, port = script_default("KVLDP_KAFKA_ADMIN").split(":")
    internal = listeners(broker_properties()["listeners"])
    (name,) = [n for n, (h, p) in internal.items() if p == int(port)]
    assert internal[name][0] == host and protocols()[name] == "PLAINTEXT"
    assert name != broker_properties()["controller.listener.names"]


def test_client_properties_use_only_keys_kvldp_reads() -> None:
    for role in CLIENT_FILES:
        settings = client_properties(role)
        assert set(settings) <= set(KNOWN_KEYS), (role, set(settings) - set(KNOWN_KEYS))
        assert settings["ssl.endpoint.identification.algorithm"] == "https", role


def test_collections_write_out_their_replication() -> None:
    brokers = 1  # the stack's one KRaft node
    for path in sorted((DEPLOY / "collections").glob("*.toml")):
        table = tomllib.loads(path.read_text())["aggregate"]
        assert {"replication_factor", "min_insync_replicas"} <= set(table), path
        collection = load_collection(path)
        assert collection.aggregate.replication_factor == table["replication_factor"]
        assert collection.aggregate.min_insync_replicas == table["min_insync_replicas"]
        assert (
            1
            <= collection.aggregate.min_insync_replicas
            <= collection.aggregate.replication_factor
            <= brokers
        )
        assert "replication_factor = 3" in path.read_text(), f"{path}: say what production uses"


def test_the_stack_pulls_the_kafka_the_tests_run() -> None:
    """The compose broker's image is the Apache Kafka release ``make kafka`` fetches, so
    the settings and scripts exercised here are those of the version users pull."""
    image = COMPOSE["services"]["kafka"]["image"]
    assert image == f"apache/kafka:{KAFKA_VERSION}", image
