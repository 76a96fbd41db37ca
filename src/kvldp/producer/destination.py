"""Where a collector's messages go: a Kafka cluster or ``kvldp gateway``, never both.

A collector is given the settings of one destination: Kafka's (``bootstrap_servers`` or
``kafka_config``, ``acks``, a ready ``producer``) or the HTTPS gateway's (``endpoint``,
with ``token`` or ``token_for``, ``ca_file`` or ``ssl_context``, ``retry``,
``max_connections`` and ``allow_http``); ``request_timeout`` bounds a message's wait either
way. :class:`Destination` holds them as given and refuses, before anything is opened, an
``acks`` Kafka does not know, a timeout that is not a positive number, a setting of one
destination given with the other, and an interactive collection sent through a gateway
(a device follows its rounds on the collection's control topic in Kafka). It then names
the Kafka cluster, if any, and opens the :class:`~kvldp.producer.transport.Transport`.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaProducer

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.control_record import is_interactive
from kvldp.kafka.client_config import KafkaConfig, resolve_kafka_config
from kvldp.producer.bearer_token import BearerTokens, DeviceTokenProvider, TokenProvider
from kvldp.producer.gateway_client import GatewayTransport, reports_url
from kvldp.producer.retry_policy import RetryPolicy
from kvldp.producer.transport import KafkaTransport, Transport, kafka_producer

#: the producer acknowledgements a collector accepts: none, the leader's, every in-sync replica's
ACKS = (0, 1, "all")


@dataclass(frozen=True)
class Destination:
    """The connection settings of a collector (those of :class:`~kvldp.producer.collector.Collector`
    of the same names), checked against each other."""

    bootstrap_servers: str | None
    kafka_config: KafkaConfig | str | Path | Mapping[str, object] | None
    producer: AIOKafkaProducer | None
    acks: int | str
    client_id: str
    endpoint: str | None
    token: str | TokenProvider | None
    token_for: DeviceTokenProvider | None
    ca_file: str | None
    ssl_context: ssl.SSLContext | None
    retry: RetryPolicy | None
    max_connections: int
    request_timeout: float
    allow_http: bool

    def __post_init__(self) -> None:
        if self.acks not in ACKS:
            raise KvldpError(f"acks must be 0, 1 or 'all', got {self.acks!r}")
        timeout = self.request_timeout
        if not (isinstance(timeout, int | float) and timeout > 0):
            raise KvldpError(f"request_timeout must be a positive number of seconds, got {timeout!r}")

    def kafka(self, collection: Collection) -> KafkaConfig | None:
        """Where and how to connect to Kafka (``bootstrap_servers`` overrides the config's
        address); None with an ``endpoint``. Raises :class:`KvldpError` for a setting of
        the other destination, or an interactive ``collection`` sent to an endpoint."""
        if self.endpoint is None:
            http = {
                "token": self.token,
                "token_for": self.token_for,
                "ca_file": self.ca_file,
                "ssl_context": self.ssl_context,
            }
            given = [name for name, value in http.items() if value is not None]
            if given or self.retry is not None:
                raise KvldpError(f"{(given or ['retry'])[0]} goes with endpoint (the HTTPS gateway)")
            return resolve_kafka_config(self.bootstrap_servers, self.kafka_config)
        kafka_given = {
            "bootstrap_servers": self.bootstrap_servers,
            "kafka_config": self.kafka_config,
            "producer": self.producer,
        }
        clash = [name for name, value in kafka_given.items() if value is not None]
        if clash or self.acks != "all":
            raise KvldpError(
                f"endpoint sends through the HTTPS gateway, {(clash or ['acks'])[0]} is a Kafka "
                "setting: give one of them (the gateway waits for acks=all)"
            )
        if is_interactive(collection):
            raise KvldpError(
                f"collection {collection.name} reports in rounds, which a device follows on "
                "the collection's control topic in Kafka: it cannot report through an endpoint"
            )
        return None

    def transport(self, collection: Collection, kafka: KafkaConfig | None) -> Transport:
        """The transport to ``collection``'s reports: its topic on the Kafka cluster
        ``kafka`` (what :meth:`kafka` named), else the gateway at ``endpoint``."""
        if kafka is not None:
            producer = self.producer or kafka_producer(
                collection, kafka, self.client_id, self.acks, self.request_timeout
            )
            return KafkaTransport(producer, collection.reports_topic, kafka)
        assert self.endpoint is not None
        return GatewayTransport(
            reports_url(self.endpoint, collection.name, allow_http=self.allow_http),
            BearerTokens(self.token, self.token_for),
            retry=self.retry,
            max_connections=self.max_connections,
            request_timeout=self.request_timeout,
            ca_file=self.ca_file,
            ssl_context=self.ssl_context,
        )
