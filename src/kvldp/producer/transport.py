"""How the collector's messages leave the device: a Kafka producer or the HTTPS gateway.

Everything above the transport — perturbing, the spending rule, memoization, report ids,
encoding, packing reports into messages — is one code path in
:class:`kvldp.producer.collector.Collector`. A :class:`Transport` takes the finished
messages: :meth:`Transport.send` hands one over and returns an awaitable that completes
once the message is delivered (acknowledged by Kafka with the collector's ``acks``, or
accepted by the gateway) and raises when it never will be. :class:`KafkaTransport` is the
Kafka producer (:func:`kafka_producer`: ``linger_ms`` 5, no idempotence, requests up to
twice the collection's message size cap); :class:`kvldp.producer.gateway_client.GatewayTransport`
posts to ``kvldp gateway``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

from aiokafka import AIOKafkaProducer

from kvldp.common.config.collection import Collection
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.client_start import start_reachable
from kvldp.kafka.partitioner import partition_of


@dataclass(frozen=True)
class Message:
    """One message of reports, as the collector built it."""

    #: the encoded reports (docs/wire-format.md): the Kafka record value or the HTTP body
    value: bytes
    #: the device the reports are keyed by (the Kafka record key)
    key: bytes
    #: the report time (the Kafka record timestamp)
    timestamp_ms: int
    #: whether the device id was given by the caller (the gateway may check it) or is the
    #: collector's own random one
    claimed: bool
    #: how many reports the message holds
    reports: int


class Transport(Protocol):
    """What the collector needs to deliver its messages."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: Message) -> Awaitable[object]:
        """Hand ``message`` over; the result completes once it is delivered."""
        ...


def kafka_producer(
    collection: Collection, kafka: KafkaConfig, client_id: str, acks: int | str, request_timeout: float
) -> AIOKafkaProducer:
    """The aiokafka producer of a collector of ``collection``: acknowledged with ``acks``,
    a message failing after ``request_timeout`` seconds without its acknowledgement."""
    return AIOKafkaProducer(
        **kafka.client_options(client_id),
        acks=acks,
        linger_ms=5,
        max_request_size=max(collection.aggregate.max_message_bytes * 2, 1 << 20),
        request_timeout_ms=int(request_timeout * 1000),
        enable_idempotence=False,
        partitioner=partition_of,
    )


class KafkaTransport:
    """The collection's reports topic through one aiokafka producer."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, kafka: KafkaConfig) -> None:
        self.producer = producer
        self.topic = topic
        self.kafka = kafka

    async def start(self) -> None:
        await start_reachable(self.producer, self.kafka)

    async def stop(self) -> None:
        await self.producer.stop()

    async def send(self, message: Message) -> Awaitable[object]:
        future: Awaitable[object] = await self.producer.send(
            self.topic, value=message.value, key=message.key, timestamp_ms=message.timestamp_ms
        )
        return future
