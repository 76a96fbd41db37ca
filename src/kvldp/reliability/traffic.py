"""Raw traffic for the reliability scenarios: messages with chosen keys, bytes and
record timestamps, published at a chosen rate, and the independent folds they must give."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from aiokafka import AIOKafkaProducer
from numpy.typing import NDArray

from kvldp.common.config.collection import Collection
from kvldp.common.data.schema import ReportBatch, batch_len, row
from kvldp.common.data.stats import Stats
from kvldp.common.messages.wire import WireFormat
from kvldp.sim import simulate

#: sends in flight before waiting for acknowledgements
IN_FLIGHT = 2000


@dataclass(frozen=True)
class Message:
    """One Kafka record to publish (``value`` None is a tombstone)."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    #: reports the message carries when it is valid (0 for hostile messages)
    reports: int = 0


async def publish(
    bootstrap: str,
    topic: str,
    messages: Sequence[Message],
    rate: float | None = None,
    progress: list[int] | None = None,
) -> int:
    """Publish ``messages`` in order, at most ``rate`` messages per second, each send
    acknowledged before returning; ``progress[0]`` counts messages sent so far.

    Sent as the device SDK sends (:mod:`kvldp.producer.collector`): acknowledged by every
    in-sync replica (``acks=all``, so a leader failover loses nothing acknowledged) and
    without producer idempotence, so a retry whose first attempt was written can leave a
    record twice in the topic (the aggregator drops the copy by its report ids)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="kvldp-reliability",
        acks="all",
        linger_ms=5,
        max_request_size=8 << 20,
        enable_idempotence=False,
    )
    await producer.start()
    pending: list[asyncio.Future[object]] = []
    started = time.monotonic()
    try:
        for i, m in enumerate(messages):
            pending.append(await producer.send(topic, value=m.value, key=m.key, timestamp_ms=m.timestamp_ms))
            if progress is not None:
                progress[0] = i + 1
            if len(pending) >= IN_FLIGHT:
                await asyncio.gather(*pending)
                pending = []
            if rate:
                ahead = (i + 1) / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return len(messages)


@dataclass(frozen=True)
class Traffic:
    """Published messages with, for each, the reports and report ids it carries, and the
    statistics all of them fold to — computed here, without Kafka or the aggregator."""

    messages: list[Message]
    parts: list[ReportBatch]
    rids: list[NDArray[np.uint64]]
    stats: Stats


def report_batches(
    collection: Collection, reports: int, batch: int, seed: int, with_rids: bool = True, devices: int = 10_000
) -> Traffic:
    """Simulated, perturbed reports, ``batch`` per message (1: single-report messages).
    The reports depend only on ``seed``, with or without ids."""
    wire = WireFormat(collection)
    rng = np.random.default_rng(seed)
    users = simulate.simulate(collection, "gaussian", reports, seed)
    # the rare genuine report the plausibility rule refuses (docs/plausibility.md) is left out,
    # so every message is one the aggregator folds
    mechanism = collection.estimation_mechanism  # what devices send, randomized again if they do
    perturbed = mechanism.plausible(mechanism.perturb_many(users, rng))
    ids = np.random.default_rng([seed, 1]).integers(1, 2**64, size=reports, dtype=np.uint64)
    rids = ids if with_rids else np.zeros(reports, dtype=np.uint64)
    now = int(time.time() * 1000)
    messages, parts, rid_parts = [], [], []
    for start in range(0, batch_len(perturbed), batch):
        part: ReportBatch = {k: v[start : start + batch] for k, v in perturbed.items()}
        n = next(iter(part.values())).shape[0]
        key = f"device-{int(rng.integers(0, devices))}".encode()
        part_rids = rids[start : start + n]
        if batch == 1:
            rid = int(part_rids[0]) or None
            value = wire.encode_report(row(part, wire.fields, 0), ts_ms=now, rid=rid)
        else:
            value = wire.encode_batch(part, ts_ms=now, rids=part_rids if with_rids else None)
        messages.append(Message(key, value, now, n))
        parts.append(part)
        rid_parts.append(part_rids)
    return Traffic(messages, parts, rid_parts, mechanism.new_stats().fold(perturbed))


def canaries(collection: Collection, batch: int, seed: int) -> list[Message]:
    """One report per symbol of a ``grr`` collection, shuffled, in batches: every cell of
    the final statistics must hold exactly 1 (above 1: double counted; 0: lost)."""
    if collection.mechanism_name != "grr":
        raise ValueError("canaries need a grr collection (one count per symbol)")
    wire = WireFormat(collection)
    rng = np.random.default_rng(seed)
    symbols = rng.permutation(wire.fields[0].high)
    now = int(time.time() * 1000)
    out = []
    for start in range(0, symbols.shape[0], batch):
        part = symbols[start : start + batch]
        value = wire.encode_batch({wire.fields[0].name: part})
        out.append(Message(f"gateway-{start // batch % 97}".encode(), value, now, part.shape[0]))
    return out
