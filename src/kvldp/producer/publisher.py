"""How a collector's perturbed reports leave the device: report ids, messages, the transport.

Every report gets a random non-zero 64-bit report id (``rid``) so that the aggregator
counts a report the producer had to resend only once; the ids come from a generator of
their own, seeded from the OS entropy pool, never from the one that perturbs (two
simulators seeded alike must not share report ids). The reports are encoded
(:mod:`kvldp.common.messages.wire`) one per message, or packed ``per_message`` to a message
(:func:`kvldp.producer.batching.reports_per_message`), and handed to the transport keyed
by their device (:func:`kvldp.producer.pairs.device_key`), with the report time as the
record timestamp. Each message's outcome is kept in :class:`~kvldp.producer.delivery.InFlight`;
once :data:`MAX_IN_FLIGHT` wait for theirs, the publisher waits for them all before it
sends more, which bounds memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.schema import ReportBatch
from kvldp.common.messages.wire import WireFormat
from kvldp.producer.delivery import InFlight
from kvldp.producer.pairs import device_key
from kvldp.producer.transport import Message, Transport

#: sends in flight before the SDK waits for acknowledgements (bounds memory)
MAX_IN_FLIGHT = 2000


class Publisher:
    """Encodes a collector's reports into messages and hands them to its transport.

    ``unclaimed`` is the key of the collector's own device id when the collector made it
    up (None when the caller gave it): every other key is a device id the caller gave,
    which the gateway may check against its token (:attr:`Message.claimed`)."""

    def __init__(
        self,
        wire: WireFormat,
        transport: Transport,
        in_flight: InFlight,
        report_ids: np.random.Generator,
        unclaimed: bytes | None,
    ) -> None:
        self.wire = wire
        self.transport = transport
        self.in_flight = in_flight
        self._rids = report_ids
        self._unclaimed = unclaimed
        #: messages handed to the transport
        self.messages = 0

    def report_ids(self, n: int) -> NDArray[np.uint64]:
        """``n`` random non-zero report ids."""
        return self._rids.integers(1, 2**64, size=n, dtype=np.uint64)

    async def publish(
        self, batch: ReportBatch, device_ids: Sequence[str | bytes | int], per_message: int, ts_ms: int
    ) -> None:
        """Send the reports of ``batch`` (one per device id, in order), ``per_message`` to a
        message keyed by its first device, stamped ``ts_ms`` (ms since the epoch)."""
        n = len(device_ids)
        rids = self.report_ids(n)
        if per_message == 1:
            for value, device in zip(self.wire.encode_many(batch, ts_ms, rids), device_ids, strict=True):
                await self._send(value, device, ts_ms, 1)
            return
        for start in range(0, n, per_message):
            part = {name: column[start : start + per_message] for name, column in batch.items()}
            value = self.wire.encode_batch(part, ts_ms=ts_ms, rids=rids[start : start + per_message])
            await self._send(value, device_ids[start], ts_ms, min(per_message, n - start))

    async def _send(self, value: bytes, device: str | bytes | int, timestamp_ms: int, reports: int) -> None:
        key = device_key(device)
        outcome = asyncio.ensure_future(
            await self.transport.send(Message(value, key, timestamp_ms, key != self._unclaimed, reports))
        )
        self.in_flight.add(outcome, reports)
        self.messages += 1
        if len(self.in_flight) >= MAX_IN_FLIGHT:
            await self.in_flight.settle()
