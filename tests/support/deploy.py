"""The compose stack of deploy/ as the deployment tests read it, without a Docker engine.

The parsed ``docker-compose.yml`` and the paths of its scripts and client files (one per
Kafka principal), and the helpers that answer questions about them: compose's variable
interpolation, a service's mounts, command-line options and dependencies, and the
broker's ``KAFKA_*`` environment rendered as server.properties the way the apache/kafka
image does, with those of its settings that a broker on this machine's loopback cannot
take. Shared by :mod:`tests.test_deploy` (the stack), :mod:`tests.test_deploy_kafka` (the
Kafka settings), :mod:`tests.test_deploy_scripts` (the scripts, run against stand-ins),
:mod:`tests.test_deploy_acls` (the broker's part, run against Apache Kafka) and
:mod:`tests.test_kafka_acls`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kvldp.kafka.properties_file import parse_properties

from support.package import REPO

DEPLOY = REPO / "deploy"
COMPOSE_TEXT = (DEPLOY / "docker-compose.yml").read_text()
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_TEXT)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
PINNED = re.compile(r"^[\w./-]+:v?\d+(\.\d+)+[\w.-]*$")
KVLDP_IMAGE = "kvldp:0.1.0"
# the services that run a kvldp command against Kafka (the image's entrypoint); a one-shot
# of the image with its own entrypoint (device-keys: kvldp devices keygen) talks to no broker
KVLDP_SERVICES = {
    n: s for n, s in SERVICES.items() if s.get("image") == KVLDP_IMAGE and "entrypoint" not in s
}
#: the client files, one per principal of the stack, as the broker mounts them
CLIENT_DIR = DEPLOY / "kafka-clients"
#: each role's client file: ``ingest`` (the gateway, the simulated fleets) writes the
#: reports topics, ``aggregator`` reads them and owns the collections' other topics
CLIENT_FILES = {role: CLIENT_DIR / f"{role}.properties" for role in ("ingest", "aggregator")}
#: where every kvldp service finds its client file
CLIENT_PATH = "/etc/kvldp/kafka-client.properties"
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


def client_properties(role: str) -> dict[str, str]:
    """The entries of ``role``'s client file, as kvldp reads them."""
    path = CLIENT_FILES[role]
    return parse_properties(path.read_bytes(), str(path))


def client_role(service: dict[str, Any]) -> str:
    """The role whose client file ``service`` mounts at :data:`CLIENT_PATH`."""
    source = mounted_file(service, CLIENT_PATH)
    assert source is not None, f"{CLIENT_PATH} is not a file mounted from deploy/"
    (role,) = [r for r, path in CLIENT_FILES.items() if path.resolve() == source.resolve()]
    return role


def collections_with_acls() -> list[str]:
    """The collections the broker's start script grants ACLs on (``KVLDP_COLLECTIONS``)."""
    return broker_env()["KVLDP_COLLECTIONS"].split(" ")


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


def mounted_target(service: dict[str, Any], file: Path) -> str:
    (target,) = [
        t for s, t in mounts(service) if s.startswith(".") and (DEPLOY / s).resolve() == file.resolve()
    ]
    return target


def script_default(variable: str) -> str:
    match = re.search(rf"^\w+=\$\{{{variable}:-([^}}]+)\}}", START_SCRIPT.read_text(), flags=re.MULTILINE)
    assert match, variable
    return match.group(1)
