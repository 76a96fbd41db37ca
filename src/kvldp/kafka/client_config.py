"""Kafka client settings: one properties file, read the way Kafka users already write it.

A managed or secured cluster hands its users a Java/librdkafka-style properties file
(``key=value`` lines, ``#`` comments): the bootstrap address, the security protocol, the
SASL mechanism and credentials, the CA to trust. kvldp reads that file as it is, by
Java's rules (:mod:`~kvldp.kafka.properties_file`), so the same file configures every
kvldp client — the device SDK, the aggregator in every role, ``produce``, ``record``,
``replay``, ``demo`` and ``bench`` — and the user's other Kafka tools.

Everything is checked when the file is read, before any connection is made: unknown keys
(refused, never ignored: a key kvldp does not apply would be a setting the user believes
is in force), protocols and mechanisms, credentials a mechanism needs, and the TLS files,
which are loaded into an :class:`ssl.SSLContext` at once so that a missing or unreadable
CA, certificate or key is named before anything is sent. Secrets (``sasl.password``,
``ssl.key.password``, the credentials inside ``sasl.jaas.config``) never appear in a
``repr``, a description or an error message.

No Kafka client here (the standard library and the properties reader only): the
aggregator and the SDK pass :meth:`KafkaConfig.client_options` to the aiokafka clients
they build.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from kvldp.common.errors import KvldpError
from kvldp.common.typed_fields import text
from kvldp.kafka.properties_file import InvalidPropertiesFile, parse_properties

#: the environment variable naming the client properties file
ENV_CONFIG = "KVLDP_KAFKA_CONFIG"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: every key kvldp reads; ``sasl.mechanisms`` is librdkafka's spelling of ``sasl.mechanism``
KNOWN_KEYS = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "client.id",
)
#: keys whose values are secrets: never echoed, never accepted on a command line
SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password", "sasl.jaas.config"})
#: keys a provider's file often carries that kvldp sets per client itself
_SET_BY_KVLDP = {
    "acks": "the SDK takes acks= (default all); the aggregator's producers always use acks=all",
    "enable.idempotence": "kvldp de-duplicates reports by id on the aggregator",
    "session.timeout.ms": "kvldp sets the consumer timeouts itself",
    "group.id": "the aggregator's group is kvldp.<collection>.aggregator",
    "auto.offset.reset": "the aggregator reads from its own next offset and judges an out-of-range one itself",
}
_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_JAAS_OPTION = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^\s;]+))""")
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class InvalidKafkaConfig(KvldpError):
    """A Kafka client setting is missing, unknown or wrong (the message names it)."""


@dataclass(frozen=True)
class KafkaConfig:
    """Validated connection settings shared by every kvldp Kafka client.

    Build one with :func:`load_kafka_config` (a properties file), :func:`kafka_config`
    (a mapping in the file's key names) or :meth:`plaintext` (just an address).
    """

    bootstrap_servers: str = ""
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    client_id: str | None = None
    source: str = "built-in settings"

    @classmethod
    def plaintext(cls, bootstrap_servers: str) -> KafkaConfig:
        """An unauthenticated, unencrypted connection to ``bootstrap_servers``."""
        return _checked(cls(bootstrap_servers=_servers(bootstrap_servers, "bootstrap.servers")))

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def with_bootstrap(self, servers: str | None) -> KafkaConfig:
        """These settings with ``bootstrap.servers`` replaced (when ``servers`` is given)."""
        if not servers:
            return self
        return replace(self, bootstrap_servers=_servers(servers, "--bootstrap-servers"))

    def describe(self) -> str:
        """One line for logs and errors: address, protocol, mechanism and user, no secrets."""
        how = self.security_protocol
        if self.uses_sasl:
            how += f" {self.sasl_mechanism} as {self.sasl_username}"
        return f"{self.bootstrap_servers} ({how})"

    @cached_property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of SSL and SASL_SSL connections (None otherwise): the system's
        trusted CAs, or only ``ssl.ca.location`` when set; a client certificate when set."""
        if not self.uses_tls:
            return None
        try:
            context = ssl.create_default_context(cafile=self.ssl_ca_location)
        except (ssl.SSLError, OSError) as exc:
            raise InvalidKafkaConfig(
                f"{self.source}: ssl.ca.location {self.ssl_ca_location!r}: not a PEM CA certificate ({_reason(exc)})"
            ) from None
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certificate_location:
            try:
                context.load_cert_chain(
                    self.ssl_certificate_location, self.ssl_key_location, password=self.ssl_key_password
                )
            except (ssl.SSLError, OSError) as exc:
                raise InvalidKafkaConfig(
                    f"{self.source}: cannot load the client certificate {self.ssl_certificate_location!r} "
                    f"with its key ({_reason(exc)}; check ssl.key.location and ssl.key.password)"
                ) from None
        return context

    def client_options(self, client_id: str) -> dict[str, Any]:
        """Keyword arguments for an aiokafka producer, consumer or admin client.
        ``client_id`` names the kvldp client unless the file sets ``client.id``."""
        if not self.bootstrap_servers:
            raise InvalidKafkaConfig(
                f"no Kafka address: set bootstrap.servers in {self.source}, pass --bootstrap-servers "
                "or set KVLDP_BOOTSTRAP_SERVERS"
            )
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id or client_id,
            "security_protocol": self.security_protocol,
        }
        if self.uses_tls:
            options["ssl_context"] = self.ssl_context
        if self.uses_sasl:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.sasl_password
        return options


def as_kafka_config(kafka: KafkaConfig | str) -> KafkaConfig:
    """Settings from either a :class:`KafkaConfig` or a plain ``host:port[,host:port]``."""
    return kafka if isinstance(kafka, KafkaConfig) else KafkaConfig.plaintext(kafka)


def resolve_kafka_config(
    bootstrap_servers: str | None,
    config: KafkaConfig | str | os.PathLike[str] | Mapping[str, object] | None,
) -> KafkaConfig:
    """The SDK's two ways in: ``config`` as settings, a properties file's path or a mapping
    in its key names, with ``bootstrap_servers`` (when given) replacing its address; or
    ``bootstrap_servers`` alone for an unsecured cluster."""
    if config is None:
        if not bootstrap_servers:
            raise InvalidKafkaConfig("give bootstrap_servers or kafka_config")
        return KafkaConfig.plaintext(bootstrap_servers)
    if isinstance(config, KafkaConfig):
        settings = config
    elif isinstance(config, Mapping):
        settings = kafka_config(config)
    else:
        settings = load_kafka_config(config)
    return settings.with_bootstrap(bootstrap_servers)


def load_kafka_config(
    path: str | os.PathLike[str], command_line: Mapping[str, str] | None = None
) -> KafkaConfig:
    """The settings of a properties file (:class:`InvalidKafkaConfig` naming the file and
    key), with ``command_line`` entries (``-X key=value``) overriding the file's."""
    where = Path(path)
    try:
        data = where.read_bytes()
    except FileNotFoundError:
        raise InvalidKafkaConfig(f"Kafka client config {str(where)!r} does not exist") from None
    except IsADirectoryError:
        raise InvalidKafkaConfig(f"Kafka client config {str(where)!r} is a directory, not a file") from None
    except OSError as exc:
        raise InvalidKafkaConfig(f"cannot read Kafka client config {str(where)!r}: {_reason(exc)}") from None
    try:
        entries = parse_properties(data, str(where))
    except InvalidPropertiesFile as exc:
        raise InvalidKafkaConfig(str(exc)) from None
    return kafka_config(entries, str(where), command_line)


def kafka_config(
    entries: Mapping[str, object],
    source: str = "kafka_config",
    command_line: Mapping[str, str] | None = None,
) -> KafkaConfig:
    """Validated settings from a mapping in the properties file's key names. Entries of
    ``command_line`` (``-X key=value``) override ``entries`` but may not carry secrets."""
    merged = {str(k): _text(k, v, source) for k, v in entries.items()}
    for key, value in (command_line or {}).items():
        if key in SECRET_KEYS:
            raise InvalidKafkaConfig(
                f"--kafka-option {key}: secrets do not go on the command line (shell history, ps); "
                "put it in the --kafka-config file"
            )
        merged[key] = value
    for key in merged:
        if key not in KNOWN_KEYS:
            raise InvalidKafkaConfig(_unknown(key, source))
    if "sasl.mechanism" in merged and "sasl.mechanisms" in merged:
        raise InvalidKafkaConfig(f"{source}: give sasl.mechanism or sasl.mechanisms, not both")
    protocol = merged.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise InvalidKafkaConfig(
            f"{source}: security.protocol {merged['security.protocol']!r} is not one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    mechanism = merged.get("sasl.mechanism", merged.get("sasl.mechanisms"))
    username, password = merged.get("sasl.username"), merged.get("sasl.password")
    if "sasl.jaas.config" in merged:
        if username is not None or password is not None:
            raise InvalidKafkaConfig(
                f"{source}: give the credentials in sasl.jaas.config or in sasl.username/sasl.password, not both"
            )
        username, password = _jaas(merged["sasl.jaas.config"], mechanism, source)
    algorithm = merged.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", "", "none"):
        raise InvalidKafkaConfig(
            f"{source}: ssl.endpoint.identification.algorithm {algorithm!r}: use https (check the "
            "broker's host name, the default) or leave it empty (do not)"
        )
    config = KafkaConfig(
        bootstrap_servers=_servers(merged["bootstrap.servers"], f"{source}: bootstrap.servers")
        if merged.get("bootstrap.servers")
        else "",
        security_protocol=protocol,
        sasl_mechanism=mechanism.upper() if mechanism else None,
        sasl_username=username,
        sasl_password=password,
        ssl_ca_location=merged.get("ssl.ca.location") or None,
        ssl_certificate_location=merged.get("ssl.certificate.location") or None,
        ssl_key_location=merged.get("ssl.key.location") or None,
        ssl_key_password=merged.get("ssl.key.password") or None,
        ssl_check_hostname=algorithm == "https",
        client_id=merged.get("client.id") or None,
        source=source,
    )
    return _checked(config)


def _checked(config: KafkaConfig) -> KafkaConfig:
    """Refuse settings that cannot work together; load the TLS files."""
    src = config.source
    if config.uses_sasl:
        if config.sasl_mechanism is None:
            raise InvalidKafkaConfig(
                f"{src}: security.protocol={config.security_protocol} needs sasl.mechanism"
            )
        if config.sasl_mechanism not in SASL_MECHANISMS:
            raise InvalidKafkaConfig(
                f"{src}: sasl.mechanism {config.sasl_mechanism!r} is not supported by kvldp "
                f"(use one of {', '.join(SASL_MECHANISMS)})"
            )
        if not config.sasl_username or not config.sasl_password:
            raise InvalidKafkaConfig(
                f"{src}: sasl.mechanism={config.sasl_mechanism} needs sasl.username and sasl.password "
                "(or sasl.jaas.config)"
            )
    else:
        stray = [
            k
            for k, v in (
                ("sasl.mechanism", config.sasl_mechanism),
                ("sasl.username", config.sasl_username),
                ("sasl.password", config.sasl_password),
            )
            if v
        ]
        if stray:
            raise InvalidKafkaConfig(
                f"{src}: {stray[0]} is set but security.protocol={config.security_protocol} does not use "
                "SASL (use SASL_SSL or SASL_PLAINTEXT)"
            )
    files = (
        ("ssl.ca.location", config.ssl_ca_location),
        ("ssl.certificate.location", config.ssl_certificate_location),
        ("ssl.key.location", config.ssl_key_location),
    )
    if not config.uses_tls:
        stray = [key for key, value in files if value]
        if stray:
            raise InvalidKafkaConfig(
                f"{src}: {stray[0]} is set but security.protocol={config.security_protocol} does not use "
                "TLS (use SSL or SASL_SSL)"
            )
        return config
    for key, value in files:
        if value and not Path(value).is_file():
            raise InvalidKafkaConfig(f"{src}: {key} {value!r} does not exist")
    if config.ssl_key_location and not config.ssl_certificate_location:
        raise InvalidKafkaConfig(f"{src}: ssl.key.location needs ssl.certificate.location")
    _ = config.ssl_context  # loads the CA and the client certificate now, not at the first connection
    return config


def _servers(text: str, where: str) -> str:
    servers = [s.strip() for s in str(text).split(",") if s.strip()]
    if not servers:
        raise InvalidKafkaConfig(f"{where}: no address given")
    for server in servers:
        if "@" in server or "://" in server:
            raise InvalidKafkaConfig(
                f"{where}: {server.split('@')[-1]!r}: give host:port only (credentials go in sasl.username/"
                "sasl.password, the protocol in security.protocol)"
            )
        match = _HOST_PORT.match(server)
        if not match or not 0 < int(match.group(2)) < 65536:
            raise InvalidKafkaConfig(f"{where}: {server!r} is not host:port")
    return ",".join(servers)


def _jaas(text: str, mechanism: str | None, source: str) -> tuple[str, str]:
    """Username and password of a Java ``sasl.jaas.config`` line (Plain or Scram login module)."""
    module = text.split(None, 1)[0] if text.strip() else ""
    if module not in _JAAS_MODULES:
        raise InvalidKafkaConfig(
            f"{source}: sasl.jaas.config: kvldp reads {' or '.join(sorted(_JAAS_MODULES))} only"
        )
    if mechanism and mechanism.upper() not in _JAAS_MODULES[module]:
        raise InvalidKafkaConfig(
            f"{source}: sasl.jaas.config uses {module.rsplit('.', 1)[-1]}, which does not fit "
            f"sasl.mechanism={mechanism}"
        )
    options = {
        m.group(1): next(g for g in m.groups()[1:] if g is not None) for m in _JAAS_OPTION.finditer(text)
    }
    if "username" not in options or "password" not in options:
        raise InvalidKafkaConfig(f'{source}: sasl.jaas.config needs username="..." and password="..."')
    return options["username"], options["password"]


def _unknown(key: str, source: str) -> str:
    if key in _SET_BY_KVLDP:
        return f"{source}: {key}: remove this line ({_SET_BY_KVLDP[key]})"
    if key.startswith("ssl.keystore") or key.startswith("ssl.truststore"):
        return (
            f"{source}: {key}: Java keystores are not read; give PEM files as ssl.ca.location, "
            "ssl.certificate.location and ssl.key.location"
        )
    return f"{source}: unknown key {key!r} (kvldp reads: {', '.join(KNOWN_KEYS)})"


def _text(key: object, value: object, source: str) -> str:
    def refuse(refused: object) -> InvalidKafkaConfig:
        shown = "a secret" if key in SECRET_KEYS else repr(refused)
        return InvalidKafkaConfig(f"{source}: {key}: expected text, got {shown}")

    return text(value, refuse, numbers=True)


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)
