"""A stand-in for the Kafka producer the SDK publishes through, keeping what it was given."""

from __future__ import annotations

import asyncio


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
