"""deploy/ is code, checked without a Docker engine: the compose file references existing
files, pins every image, publishes no port twice and wires services that exist; the
image is slim, multi-stage and unprivileged; provisioning and dashboard agree. The Kafka
settings are checked by :mod:`tests.test_deploy_kafka`, the scripts by
:mod:`tests.test_deploy_scripts`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvldp import dashboard
from kvldp.aggregator import exporter
from kvldp.common.config.collection_file import load_collection
from kvldp.gateway import instruments

from support import run
from support.deploy import (
    CLIENT_FILES,
    CLIENT_PATH,
    COMPOSE,
    DEPLOY,
    KVLDP_SERVICES,
    PINNED,
    SERVICES,
    broker_properties,
    command_args,
    depends,
    mounted_file,
    mounts,
    option,
    volume_at,
)


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
        if service["image"] == "kvldp:0.1.0" and "entrypoint" not in service:
            assert command_args(service)[0] in {"aggregate", "produce", "gateway"}, name


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
    for name in (
        "kafka",
        "aggregator",
        "checkout-worker",
        "checkout-exporter",
        "gateway",
        "prometheus",
        "grafana",
    ):
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
    # partitions and replication of their collection (src/kvldp/aggregator/topics.py)
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


def test_gateway_serves_the_stacks_collections_with_keys_from_the_one_shot() -> None:
    """The gateway serves every collection an aggregator of the stack folds, once their
    topics exist, with the stack's Kafka client file; it reads the public key set that the
    device-keys one-shot writes (and never the private key), listens on its published
    port, reports ready on /readyz of that port, and Prometheus scrapes its metrics port,
    which is not published."""
    gateway, keys = SERVICES["gateway"], SERVICES["device-keys"]
    args = command_args(gateway)
    assert args[0] == "gateway"
    served = {a.split("=", 1)[1] for a in args if a.startswith("--collection=")}
    aggregated = {option(s, "collection") for s in SERVICES.values() if command_args(s)[:1] == ["aggregate"]}
    assert served == aggregated
    for path in served:
        load_collection(DEPLOY / "collections" / path.removeprefix("/collections/"))
    for service in ("aggregator", "checkout-exporter"):  # they create the topics
        assert gateway["depends_on"][service]["condition"] == "service_healthy"
    assert option(gateway, "kafka-config") == CLIENT_PATH
    assert mounted_file(gateway, CLIENT_PATH) == CLIENT_FILES["ingest"]  # the ingestion principal
    # keys: the one-shot writes private.pem into device-keys and copies jwks.json into
    # device-jwks; the gateway mounts only the latter, read-only
    assert gateway["depends_on"]["device-keys"]["condition"] == "service_completed_successfully"
    jwks = option(gateway, "jwks")
    assert jwks is not None and volume_at(gateway, jwks) == "device-jwks"
    assert "device-keys" not in {source for source, _ in mounts(gateway)}
    assert any(v.startswith("device-jwks:") and v.endswith(":ro") for v in gateway["volumes"])
    script = keys["entrypoint"][-1]
    assert "kvldp devices keygen --out /keys" in script and f"/keys/jwks.json {jwks}" in script
    assert volume_at(keys, "/keys/private.pem") == "device-keys" and volume_at(keys, jwks) == "device-jwks"
    assert keys["restart"] == "no"
    # the port: published, health-checked on /readyz, scraped
    port = option(gateway, "port")
    assert option(gateway, "host") == "0.0.0.0" and port is not None
    assert f"{port}:{port}" in gateway["ports"]
    assert f"http://127.0.0.1:{port}/readyz" in " ".join(gateway["healthcheck"]["test"])
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    metrics_port = option(gateway, "metrics-port")
    assert metrics_port not in (None, port) and option(gateway, "metrics-host") == "0.0.0.0"
    assert not any(str(metrics_port) in published for published in gateway["ports"])
    assert jobs["kvldp-gateway"]["static_configs"] == [{"targets": [f"gateway:{metrics_port}"]}]


def test_grafana_provisioning_matches_the_dashboard() -> None:
    datasources = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (ds,) = datasources["datasources"]
    assert ds["uid"] == dashboard.DATASOURCE["uid"] and ds["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/kvldp.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    mounts = dict(v.rsplit(":", 2)[:2] for v in SERVICES["grafana"]["volumes"])
    assert mounts["./grafana/dashboards"] == path


def test_the_dashboard_command_writes_where_it_is_told(tmp_path: Path) -> None:
    # --help only helps; --out writes that file; standard output otherwise; a path that
    # cannot be written is one line
    def board(*args: str) -> subprocess.CompletedProcess[str]:
        return run([sys.executable, "-P", "-m", "kvldp.dashboard", *args], cwd=tmp_path)

    helped = board("--help")
    assert helped.returncode == 0 and "--out FILE" in helped.stdout and not list(tmp_path.iterdir())
    out = tmp_path / "board.json"
    wrote = board("--out", str(out))
    assert wrote.returncode == 0 and out.read_text() == dashboard.render()
    printed = board()
    assert (
        printed.returncode == 0
        and printed.stdout == dashboard.render()
        and sorted(tmp_path.iterdir()) == [out]
    )
    refused = board("--out", str(out / "x.json"))
    assert refused.returncode == 2 and refused.stderr == (
        f"python -m kvldp.dashboard: error: cannot write {out / 'x.json'}: Not a directory\n"
    )


def test_committed_dashboard_is_the_generated_one() -> None:
    assert (DEPLOY / "grafana/dashboards/kvldp.json").read_text() == dashboard.render(), "run: make dashboard"
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
        "poisoning score",
        "gateway requests",
        "gateway latency",
        "gateway report bytes",
        "gateway produce errors",
    ):
        assert needed in titles, needed
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), ids


def test_every_panel_queries_a_metric_of_the_exporter_contract() -> None:
    """Each kvldp_* series a panel or variable reads is one the exporter or the gateway
    documents (their module docstrings are the metrics contract; histograms by their
    _bucket/_sum/_count)."""
    contract = set(re.findall(r"``(kvldp_\w+)", (exporter.__doc__ or "") + (instruments.__doc__ or "")))
    board = dashboard.build()
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in board["templating"]["list"]]
    used = {name for expr in queries for name in re.findall(r"\bkvldp_\w+", expr)}
    assert {"kvldp_round", "kvldp_rounds_complete", "kvldp_round_reports", "kvldp_round_mean"} <= used
    spent = "kvldp_device_privacy_spent_epsilon"
    assert {f"{spent}_{part}" for part in ("bucket", "sum", "count")} <= used
    assert {f"{spent}_upper_bound_{part}" for part in ("bucket", "sum", "count")} <= used
    for name in used:
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        # conditional metrics document their standard errors as "_stderr companions"
        assert {name, base, base.removesuffix("_stderr")} & contract, name


def test_the_spent_panel_labels_the_upper_bound_of_instantaneous_collections() -> None:
    """Collections with instantaneous_epsilon export only the upper-bound histogram: the
    spent-epsilon panel reads it too, every such series labelled as an upper bound, and
    no series of the exact histogram is."""
    (panel,) = [p for p in dashboard.build()["panels"] if p["title"].startswith("Privacy spent per device")]
    bound = [t for t in panel["targets"] if "_spent_epsilon_upper_bound_" in t["expr"]]
    exact = [t for t in panel["targets"] if t not in bound]
    assert len(bound) == len(exact) == 3
    assert {t["refId"] for t in panel["targets"]} == set("ABCDEF")
    for target in bound:
        assert "upper bound (instantaneous randomization)" in target["legendFormat"], target
    for target in exact:
        assert "upper bound" not in target["legendFormat"].replace("(bucket bound)", ""), target
    assert "upper bound (instantaneous randomization)" in panel["description"]


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
