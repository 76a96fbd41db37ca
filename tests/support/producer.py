"""A stand-in for the Kafka producer the SDK publishes through, keeping what it was given,
and the small PCKV-GRR collection of the SDK's tests."""

from __future__ import annotations

import asyncio
from typing import Any

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection


def phones(privacy: dict[str, Any] | None = None, name: str = "phones") -> Collection:
    """PCKV-GRR at epsilon 1.5 over four keys with values in [0, 10], with the ``privacy``
    table given (none without)."""
    table: dict[str, Any] = {
        "name": name,
        "mechanism": "pckv_grr",
        "epsilon": 1.5,
        "keys": ["a", "b", "c", "d"],
        "value_range": [0.0, 10.0],
    }
    if privacy is not None:
        table["privacy"] = privacy
    return parse_collection(table)


class FakeProducer:
    """Stands in for AIOKafkaProducer: keeps (key, value, timestamp_ms) of every send."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, int]] = []

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, topic: str, value: bytes, key: bytes, timestamp_ms: int) -> asyncio.Future[None]:
        self.sent.append((key, value, timestamp_ms))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done
