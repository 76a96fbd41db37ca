"""The command line's Kafka settings, the same for every subcommand that talks to Kafka.

``--kafka-config FILE`` (or ``$KVLDP_KAFKA_CONFIG``) names a client properties file (see
:mod:`kvldp.kafka.client_config`); ``-X key=value`` overrides one of its entries, except
secrets, which would end up in shell history and ``ps``; ``--bootstrap-servers`` (or
``$KVLDP_BOOTSTRAP_SERVERS``) overrides its address. Everything is read and checked
here, before any connection is made.
"""

from __future__ import annotations

import argparse
import os

from kvldp.common.errors import KvldpError
from kvldp.kafka.client_config import ENV_CONFIG, KafkaConfig, kafka_config, load_kafka_config

ENV_BOOTSTRAP = "KVLDP_BOOTSTRAP_SERVERS"


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    """``--bootstrap-servers``, ``--kafka-config`` and ``-X`` on a subcommand."""
    p.add_argument(
        "--bootstrap-servers",
        help=f"Kafka bootstrap servers host:port[,host:port] (default: ${ENV_BOOTSTRAP}, else the "
        "--kafka-config file's bootstrap.servers)",
    )
    p.add_argument(
        "--kafka-config",
        metavar="FILE",
        help=f"Kafka client properties (security.protocol, sasl.*, ssl.*, ...; default: ${ENV_CONFIG})",
    )
    p.add_argument(
        "-X",
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one entry of the --kafka-config file (no secrets: those go in the file)",
    )


def external_kafka(args: argparse.Namespace) -> KafkaConfig | None:
    """The settings the command line and environment give, or None when they name no
    cluster at all (``demo`` and ``bench`` then run their own embedded broker)."""
    given = (
        getattr(args, "kafka_config", None)
        or getattr(args, "kafka_option", None)
        or getattr(args, "bootstrap_servers", None)
        or os.environ.get(ENV_CONFIG)
        or os.environ.get(ENV_BOOTSTRAP)
    )
    return kafka_settings(args) if given else None


def kafka_settings(args: argparse.Namespace) -> KafkaConfig:
    """The settings the command line and environment give (an error when they give no
    address)."""
    path = getattr(args, "kafka_config", None) or os.environ.get(ENV_CONFIG)
    options = _options(getattr(args, "kafka_option", None) or [])
    servers = getattr(args, "bootstrap_servers", None) or os.environ.get(ENV_BOOTSTRAP)
    settings = load_kafka_config(path, options) if path else kafka_config({}, "-X options", options)
    settings = settings.with_bootstrap(servers)
    if not settings.bootstrap_servers:
        raise KvldpError(
            f"no Kafka address: pass --bootstrap-servers host:port, set {ENV_BOOTSTRAP}, or set "
            f"bootstrap.servers in a --kafka-config file (`kvldp broker` runs a local one)"
        )
    return settings


def _options(items: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise KvldpError(f"-X {item.split('=')[0]!r}: expected key=value")
        options[key.strip()] = value.strip()
    return options
