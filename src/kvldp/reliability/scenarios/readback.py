"""Reading back a topic the aggregator wrote to (the dead-letter topic), with each
record's value and headers, without joining a consumer group.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer


async def read_topic(
    bootstrap: str, topic: str, expected: int, idle: float = 3.0
) -> list[tuple[bytes | None, list[tuple[str, bytes]]]]:
    """(value, headers) of every record of ``topic`` (until ``expected`` or idle)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 << 20,
    )
    await consumer.start()
    out: list[tuple[bytes | None, list[tuple[str, bytes]]]] = []
    try:
        last = time.monotonic()
        while time.monotonic() - last < idle and len(out) < expected:
            fetched = await consumer.getmany(timeout_ms=300)
            for records in fetched.values():
                out += [(r.value, list(r.headers)) for r in records]
                last = time.monotonic()
        await asyncio.sleep(0.5)  # anything beyond the expected count?
        for records in (await consumer.getmany(timeout_ms=500)).values():
            out += [(r.value, list(r.headers)) for r in records]
    finally:
        await consumer.stop()
    return out
