"""deploy/ is code, checked without a Docker engine: the compose file references existing
files, pins every image, publishes no port twice and wires services that exist; the
image is slim, multi-stage and unprivileged; provisioning and dashboard agree. Kafka:
every kvldp service reaches the broker over SASL_SSL with the one mounted client file,
the published port is SASL_SSL, plaintext stays on the broker's loopback, the password
is written once, the broker's settings survive the apache/kafka image's env-to-property
mapping; the certificate and SCRAM-user scripts are run here against stand-ins."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import ssl
import stat
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvldp import dashboard
from kvldp.aggregator import exporter
from kvldp.common.collection_file import load_collection
from kvldp.common.kafka_config import KNOWN_KEYS, KafkaConfig, kafka_config, parse_properties

DEPLOY = Path("deploy")
COMPOSE_TEXT = (DEPLOY / "docker-compose.yml").read_text()
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_TEXT)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
PINNED = re.compile(r"^[\w./-]+:v?\d+(\.\d+)+[\w.-]*$")
KVLDP_IMAGE = "kvldp:0.1.0"
KVLDP_SERVICES = {n: s for n, s in SERVICES.items() if s.get("image") == KVLDP_IMAGE}
CLIENT_FILE = DEPLOY / "kafka-client.properties"
CERTS_SCRIPT = DEPLOY / "kafka" / "make-certs.sh"
START_SCRIPT = DEPLOY / "kafka" / "kafka-start.sh"
# compose's ${NAME}, ${NAME:-default} and ${NAME-default}; $$ is a literal $
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(text: str) -> str:
    """``text`` as compose reads it when no variable is set: ``${NAME:-default}`` is its
    default; a variable without a default would be empty, which the stack never relies on."""

    def default(match: re.Match[str]) -> str:
        assert match.group(2) is not None, f"{match.group(0)} has no default"
        return match.group(2)

    return INTERPOLATION.sub(default, text)


def mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """``(source, target)`` of each of a service's volumes, interpolated."""
    pairs = []
    for volume in service.get("volumes", []):
        source, target, *_ = interpolate(volume).split(":")
        pairs.append((source, target))
    return pairs


def mounted_file(service: dict[str, Any], path: str) -> Path | None:
    """The file of deploy/ that ``service`` sees at ``path`` (a bind mount), if any."""
    for source, target in mounts(service):
        if source.startswith(".") and target == path:
            return DEPLOY / source
    return None


def volume_at(service: dict[str, Any], path: str) -> str | None:
    """The named volume that holds ``path`` in ``service``, if any."""
    for source, target in mounts(service):
        if not source.startswith(".") and (path == target or path.startswith(target.rstrip("/") + "/")):
            return source
    return None


def broker_env() -> dict[str, str]:
    return {k: str(v) for k, v in SERVICES["kafka"]["environment"].items()}


def broker_properties() -> dict[str, str]:
    """server.properties as apache/kafka's start-up renders it from ``KAFKA_*`` variables
    (KafkaDockerWrapper: drop KAFKA_, lower-case, ``_`` -> ``.``, ``___`` -> ``-``,
    ``__`` -> ``_``; a few variables are the JVM's, not properties)."""
    jvm = {
        "KAFKA_HEAP_OPTS",
        "KAFKA_OPTS",
        "KAFKA_JMX_OPTS",
        "KAFKA_JVM_PERFORMANCE_OPTS",
        "KAFKA_LOG4J_OPTS",
    }
    props = {}
    for key, value in broker_env().items():
        if key.startswith("KAFKA_") and key not in jvm:
            name = key.removeprefix("KAFKA_").lower().replace("_", ".").replace("...", "-").replace("..", "_")
            props[name] = value
    return props


def listeners(setting: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` as ``{NAME: (host, port)}``."""
    out = {}
    for item in setting.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, int(port))
    return out


def protocols() -> dict[str, str]:
    return dict(item.split(":") for item in broker_properties()["listener.security.protocol.map"].split(","))


def client_properties() -> dict[str, str]:
    return parse_properties(CLIENT_FILE.read_text(), str(CLIENT_FILE))


def depends(name: str) -> set[str]:
    """Every service ``name`` waits for, directly or through others."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dep in SERVICES[todo.pop()].get("depends_on", {}):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def command_args(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return [command] if isinstance(command, str) else list(command)


def option(service: dict[str, Any], name: str) -> str | None:
    for arg in command_args(service):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def test_every_image_is_pinned_to_a_version() -> None:
    for name, service in SERVICES.items():
        image = service.get("image")
        assert image, f"{name} has no image"
        assert PINNED.match(image), f"{name}: image {image!r} is not pinned to a version"
        assert not image.endswith(":latest")
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:4.")


def test_local_image_is_built_from_this_repository() -> None:
    built = {s["image"]: s["build"] for s in SERVICES.values() if "build" in s}
    assert "kvldp:0.1.0" in built
    for build in built.values():
        context = (DEPLOY / build["context"]).resolve()
        assert (context / "pyproject.toml").is_file()
        assert (context / build["dockerfile"]).is_file()
    for name, service in SERVICES.items():
        if service["image"] == "kvldp:0.1.0":
            assert command_args(service)[0] in {"aggregate", "produce"}, name


def test_published_ports_do_not_clash() -> None:
    host_ports = []
    for service in SERVICES.values():
        for mapping in service.get("ports", []):
            host, _, container = str(mapping).partition(":")
            assert host.isdigit() and container.isdigit()
            host_ports.append(int(host))
    assert len(host_ports) == len(set(host_ports)), host_ports


def test_volumes_exist_and_state_is_named() -> None:
    named = set(COMPOSE["volumes"])
    for name, service in SERVICES.items():
        for source, _ in mounts(service):
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in named, f"{name} uses undeclared volume {source}"
    sources = {name: [source for source, _ in mounts(s)] for name, s in SERVICES.items()}
    assert "kafka-data" in sources["kafka"] and "prometheus-data" in sources["prometheus"]
    assert "aggregator-state" in sources["aggregator"]


def test_dependencies_and_health_checks() -> None:
    for name, service in SERVICES.items():
        for dep, rule in service.get("depends_on", {}).items():
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep}'s health, which has no check"
    for name in ("kafka", "aggregator", "checkout-worker", "checkout-exporter", "prometheus", "grafana"):
        assert "healthcheck" in SERVICES[name], name
    assert SERVICES["kafka"]["depends_on"]["certs"]["condition"] == "service_completed_successfully"
    for name in KVLDP_SERVICES:
        assert "kafka" in depends(name), f"{name} does not wait for Kafka"
    # the broker is healthy once its client-facing user exists, not merely when it answers
    assert SERVICES["kafka"]["healthcheck"]["test"][-1] == "--check"


def test_collections_topics_and_scrape_targets_agree() -> None:
    aggregators = {n: s for n, s in SERVICES.items() if command_args(s)[:1] == ["aggregate"]}
    assert len(aggregators) >= 2
    # no topic-creating side service: the aggregators create their topics, with the
    # partitions and replication of their collection (aggregator/topics.py)
    assert "topics" not in SERVICES
    assert broker_properties()["auto.create.topics.enable"] == "false"
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    targets = {t for cfg in jobs["kvldp"]["static_configs"] for t in cfg["targets"]}
    workers = {f"{n}:{cfg['port']}" for cfg in jobs["kvldp-workers"]["dns_sd_configs"] for n in cfg["names"]}
    # workers keep only their checkpoint timings (the exporter reports their statistics)
    (keep,) = jobs["kvldp-workers"]["metric_relabel_configs"]
    assert keep["action"] == "keep" and keep["regex"].startswith("kvldp_checkpoint_duration_seconds")
    for name, service in aggregators.items():
        path = option(service, "collection")
        assert path is not None and path.startswith("/collections/")
        load_collection(DEPLOY / "collections" / path.removeprefix("/collections/"))
        assert option(service, "metrics-host") == "0.0.0.0"
        role = option(service, "role") or "all"
        scraped = workers if role == "worker" else targets
        assert f"{name}:{option(service, 'metrics-port')}" in scraped, name
        if role == "all":
            assert option(service, "state-dir") is not None, f"{name} would lose its state on restart"
        else:  # scale-out keeps state in the compacted state topic
            assert option(service, "state-dir") is None
    roles = {option(s, "role") for s in aggregators.values()}
    assert {"worker", "exporter"} <= roles, "the stack shows scale-out"
    for service in SERVICES.values():
        if command_args(service)[:1] == ["produce"]:
            path = option(service, "collection")
            assert path is not None
            load_collection(DEPLOY / "collections" / path.removeprefix("/collections/"))


def test_grafana_provisioning_matches_the_dashboard() -> None:
    datasources = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (ds,) = datasources["datasources"]
    assert ds["uid"] == dashboard.DATASOURCE["uid"] and ds["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/kvldp.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    mounts = dict(v.rsplit(":", 2)[:2] for v in SERVICES["grafana"]["volumes"])
    assert mounts["./grafana/dashboards"] == path


def test_committed_dashboard_is_the_generated_one() -> None:
    assert (DEPLOY / "grafana/dashboards/kvldp.json").read_text() == dashboard.render(), (
        "run: python -m kvldp.dashboard"
    )
    board = json.loads(dashboard.render())
    names = {v["name"] for v in board["templating"]["list"]}
    assert names == {"collection", "window", "estimator"}
    titles = " / ".join(p["title"] for p in board["panels"]).lower()
    for needed in (
        "rejected",
        "refit",
        "top keys",
        "mean per key",
        "conditional",
        "em iterations",
        "lag",
        "duplicates",
        "resets",
        "checkpoints",
        "privacy budget",
        "privacy spent per device",
        "privkvm round",
        "reports per round",
        "means published per round",
    ):
        assert needed in titles, needed
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), ids


def test_every_panel_queries_a_metric_of_the_exporter_contract() -> None:
    """Each kvldp_* series a panel or variable reads is one the exporter documents (its
    module docstring is the metrics contract; histograms by their _bucket/_sum/_count)."""
    contract = set(re.findall(r"``(kvldp_\w+)", exporter.__doc__ or ""))
    board = dashboard.build()
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in board["templating"]["list"]]
    used = {name for expr in queries for name in re.findall(r"\bkvldp_\w+", expr)}
    assert {"kvldp_round", "kvldp_rounds_complete", "kvldp_round_reports", "kvldp_round_mean"} <= used
    for name in used:
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        # conditional metrics document their standard errors as "_stderr companions"
        assert {name, base, base.removesuffix("_stderr")} & contract, name


def test_dockerfile_is_slim_multistage_and_unprivileged() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.MULTILINE)[1:]
    assert len(stages) >= 2
    for stage in stages:
        assert PINNED.match(stage.split()[0]) and "-slim" in stage.split()[0]
    final = stages[-1]
    assert re.search(r"^USER (?!root)\w+", final, flags=re.MULTILINE)
    for tool in ("gcc", "build-essential", "apt-get install"):
        assert tool not in final


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("*.yml")))
def test_yaml_files_parse(path: Path) -> None:
    assert yaml.safe_load(path.read_text()) is not None


# ---------------------------------------------------------------- Kafka: clients and broker


def test_every_kvldp_service_reads_the_mounted_client_file() -> None:
    assert set(KVLDP_SERVICES) >= {"aggregator", "producer", "checkout-worker", "checkout-exporter"}
    ca = client_properties()["ssl.ca.location"]
    for name, service in KVLDP_SERVICES.items():
        path = option(service, "kafka-config")
        assert path is not None, f"{name} has no --kafka-config"
        source = mounted_file(service, path)
        assert source is not None, f"{name}: {path} is not a file mounted from deploy/"
        assert source.resolve() == CLIENT_FILE.resolve() and source.is_file(), name
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
    settings = client_properties()
    assert settings["security.protocol"] == "SASL_SSL"
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms"))
    assert mechanism in broker_properties()["sasl.enabled.mechanisms"].split(",")
    advertised = listeners(broker_properties()["advertised.listeners"])
    by_address = {f"{host}:{port}": name for name, (host, port) in advertised.items()}
    for name, service in KVLDP_SERVICES.items():
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


def test_sasl_password_is_written_once() -> None:
    """The password is in the client file only: the kvldp services read it there and the
    broker creates the SCRAM user from the very same mounted file."""
    password = client_properties()["sasl.password"]
    assert password
    elsewhere = [
        path
        for path in DEPLOY.rglob("*")
        if path.is_file()
        and path.resolve() != CLIENT_FILE.resolve()
        and path.suffix not in (".json", ".png")
        and password in path.read_text(errors="replace")
    ]
    assert elsewhere == []
    assert not [t for t in strings(COMPOSE) if "password" in t.lower()], (
        "no password is set in the compose file"
    )
    for name, service in SERVICES.items():
        for key in service.get("environment", {}):
            assert "PASSWORD" not in key.upper() and "SECRET" not in key.upper(), (name, key)
    # one interpolated source, the same in the broker and every client
    client_mounts = {
        v for s in SERVICES.values() for v in s.get("volumes", []) if "/etc/kvldp/kafka-client" in v
    }
    assert len(client_mounts) == 1, client_mounts
    (mount,) = client_mounts
    assert INTERPOLATION.search(mount), "KVLDP_KAFKA_CLIENT_CONFIG points the whole stack at another file"
    assert mount in SERVICES["kafka"]["volumes"]
    assert SERVICES["kafka"]["entrypoint"][-1] == mounted_target(SERVICES["kafka"], START_SCRIPT)
    assert script_default("KVLDP_CLIENT_CONFIG") == interpolate(mount).split(":")[1]


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


def mounted_target(service: dict[str, Any], file: Path) -> str:
    (target,) = [
        t for s, t in mounts(service) if s.startswith(".") and (DEPLOY / s).resolve() == file.resolve()
    ]
    return target


def script_default(variable: str) -> str:
    match = re.search(rf"^\w+=\$\{{{variable}:-([^}}]+)\}}", START_SCRIPT.read_text(), flags=re.MULTILINE)
    assert match, variable
    return match.group(1)


def test_start_script_talks_to_the_loopback_listener() -> None:
    host, port = script_default("KVLDP_KAFKA_ADMIN").split(":")
    internal = listeners(broker_properties()["listeners"])
    (name,) = [n for n, (h, p) in internal.items() if p == int(port)]
    assert internal[name][0] == host and protocols()[name] == "PLAINTEXT"
    assert name != broker_properties()["controller.listener.names"]


def test_client_properties_use_only_keys_kvldp_reads() -> None:
    settings = client_properties()
    assert set(settings) <= set(KNOWN_KEYS), set(settings) - set(KNOWN_KEYS)
    assert settings["ssl.endpoint.identification.algorithm"] == "https"


def test_client_properties_are_valid_once_the_ca_exists(certs: dict[str, Path]) -> None:
    """The whole file, checked as kvldp checks it, with its CA path moved here."""
    config = kafka_config({**client_properties(), "ssl.ca.location": str(certs["ca"])})
    assert config.uses_tls and config.uses_sasl and config.ssl_check_hostname
    assert config.sasl_mechanism == "SCRAM-SHA-512" and config.sasl_username


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


# ------------------------------------------------------------- the scripts, run for real


def _make_certs(where: Path) -> dict[str, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    broker, ca = where / "broker", where / "ca"
    subprocess.run(["sh", str(CERTS_SCRIPT), str(broker), str(ca)], check=True, capture_output=True)
    return {"pem": broker / "broker.pem", "broker-ca": broker / "ca.crt", "ca": ca / "ca.crt"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _make_certs(tmp_path_factory.mktemp("certs"))


def test_certs_service_runs_the_script_into_the_broker_and_client_volumes() -> None:
    service = SERVICES["certs"]
    script, broker_dir, ca_dir = service["entrypoint"][-3:]
    assert script == mounted_target(service, CERTS_SCRIPT)
    props = broker_properties()
    assert volume_at(service, broker_dir) == volume_at(SERVICES["kafka"], props["ssl.keystore.location"])
    assert Path(props["ssl.keystore.location"]).name == "broker.pem"
    client_ca = client_properties()["ssl.ca.location"]
    assert volume_at(service, ca_dir) == volume_at(SERVICES["aggregator"], client_ca)
    assert Path(client_ca).name == "ca.crt"
    # the kvldp image's own base: no further image to pull, and it has openssl
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"FROM {service['image']}\n" in dockerfile


def test_certs_are_pem_files_kafka_reads_and_clients_trust(certs: dict[str, Path]) -> None:
    pem = certs["pem"].read_text()
    # Kafka's PEM keystore: one PKCS#8 key ("PRIVATE KEY", not "RSA PRIVATE KEY"), then the chain
    assert pem.startswith("-----BEGIN PRIVATE KEY-----")
    assert pem.count("PRIVATE KEY-----") == 2 and "ENCRYPTED" not in pem
    assert pem.count("-----BEGIN CERTIFICATE-----") == 2
    assert certs["ca"].read_text() == certs["broker-ca"].read_text()
    assert pem.rstrip().endswith(certs["ca"].read_text().rstrip())
    for path in certs.values():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path  # the broker and uid 10001 read them
    made = {p: p.read_bytes() for p in certs.values()}
    subprocess.run(["sh", str(CERTS_SCRIPT), str(certs["pem"].parent), str(certs["ca"].parent)], check=True)
    assert {p: p.read_bytes() for p in certs.values()} == made, "a restart keeps the CA clients trust"


@pytest.fixture
def tls_server(certs: dict[str, Path]) -> Iterator[int]:
    """A TLS server on 127.0.0.1 with the broker's certificate (handshakes only)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["pem"])
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        with socket.create_connection(listener.getsockname(), timeout=10):
            pass  # wakes the accept() so that the thread sees `done`
        thread.join(timeout=10)
        listener.close()


def test_the_client_file_trusts_the_broker_by_name(certs: dict[str, Path], tls_server: int) -> None:
    """kvldp's own TLS context from kafka-client.properties (CA path moved here) accepts
    the broker as `kafka` and `localhost`, and refuses it under any other name."""
    config: KafkaConfig = kafka_config({**client_properties(), "ssl.ca.location": str(certs["ca"])})
    context = config.ssl_context
    assert context is not None
    context.verify_flags |= ssl.VERIFY_X509_STRICT

    def connect(name: str) -> bytes:
        with (
            socket.create_connection(("127.0.0.1", tls_server), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=name) as tls,
        ):
            return tls.recv(2)

    assert connect("kafka") == b"ok"
    assert connect("localhost") == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|not valid"):
        connect("broker.example.com")
    stranger = ssl.create_default_context()  # the system CAs: the development CA is not among them
    with (
        socket.create_connection(("127.0.0.1", tls_server), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        stranger.wrap_socket(raw, server_hostname="kafka")


STUB_CONFIGS = """#!/usr/bin/env bash
# kafka-configs.sh stand-in: logs its arguments and the --add-config-file it is given
{ printf 'ARGS'; printf ' %s' "$@"; echo; } >> "$STUB_LOG"
previous=
for arg in "$@"; do
    if [[ $previous == --add-config-file ]]; then
        echo "MODE $(stat -c %a "$arg")" >> "$STUB_LOG"
        echo "FILE $(cat "$arg")" >> "$STUB_LOG"
    fi
    previous=$arg
done
[[ " $* " == *" --describe "* ]] && cat "$STUB_DESCRIBE"
exit 0
"""


def _run_start(
    tmp_path: Path, client: str, *args: str, describe: str = ""
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    configs = bin_dir / "kafka-configs.sh"
    configs.write_text(STUB_CONFIGS)
    configs.chmod(0o755)
    run = tmp_path / "run"
    run.write_text('#!/usr/bin/env bash\necho "image entrypoint started"\n')
    run.chmod(0o755)
    (tmp_path / "client.properties").write_text(client)
    (tmp_path / "describe").write_text(describe)
    env = {
        **os.environ,
        "KVLDP_CLIENT_CONFIG": str(tmp_path / "client.properties"),
        "KVLDP_KAFKA_BIN": str(bin_dir),
        "KVLDP_KAFKA_RUN": str(run),
        "STUB_LOG": str(tmp_path / "log"),
        "STUB_DESCRIBE": str(tmp_path / "describe"),
    }
    return subprocess.run(
        ["bash", str(START_SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60
    )


def _wait_for_log(path: Path, text: str) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never logged")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_start_script_gives_the_client_files_user_its_password(tmp_path: Path) -> None:
    password = r"s3cr\et=x:y, ]"
    client = CLIENT_FILE.read_text().replace("sasl.password=change-me", f"sasl.password = {password}  ")
    assert parse_properties(client, "x")["sasl.password"] == password  # as kvldp reads it
    result = _run_start(tmp_path, client)
    assert result.returncode == 0, result.stderr
    assert "image entrypoint started" in result.stdout  # the image's own entrypoint runs
    log = _wait_for_log(tmp_path / "log", "FILE ")
    admin = script_default("KVLDP_KAFKA_ADMIN")
    user = client_properties()["sasl.username"]
    assert (
        f"ARGS --bootstrap-server {admin} --alter --entity-type users --entity-name {user} --add-config-file"
        in log
    )
    assert password not in log.split("FILE ")[0], "the password went on a command line"
    assert "MODE 600" in log
    # a Java properties line: backslashes escaped, the rest verbatim
    assert "FILE SCRAM-SHA-512=iterations=8192,password=" + password.replace("\\", "\\\\") in log


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_start_script_health_check(tmp_path: Path) -> None:
    client = CLIENT_FILE.read_text()
    present = "SCRAM credential configs for user-principal 'kvldp' are SCRAM-SHA-512=iterations=8192\n"
    assert _run_start(tmp_path, client, "--check", describe=present).returncode == 0
    absent = "SCRAM credential configs for user-principal 'kvldp' are \n"
    assert _run_start(tmp_path, client, "--check", describe=absent).returncode != 0
    other = "SCRAM credential configs for user-principal 'kvldp' are SCRAM-SHA-256=iterations=8192\n"
    assert _run_start(tmp_path, client, "--check", describe=other).returncode != 0


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("sasl.password=change-me\n", ""), "needs sasl.username and sasl.password"),
        (("sasl.username=kvldp\n", "#sasl.username=kvldp\n"), "needs sasl.username and sasl.password"),
        (("sasl.mechanism=SCRAM-SHA-512", "sasl.mechanism=PLAIN"), "offers SCRAM-SHA-512 only"),
    ],
)
def test_start_script_refuses_a_client_file_the_broker_cannot_serve(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    client = CLIENT_FILE.read_text()
    assert change[0] in client
    result = _run_start(tmp_path, client.replace(*change))
    assert result.returncode != 0 and message in result.stderr
    assert "image entrypoint started" not in result.stdout
