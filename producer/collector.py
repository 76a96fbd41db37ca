"""The device SDK: perturb locally, encode, publish. Raw values never leave it.

``Collector(collection, bootstrap_servers=...)`` maps key names to indices, normalises
raw values into [-1, 1] with the collection's ``value_range``, perturbs with the
collection's mechanism (from :mod:`common`) using an RNG seeded from the operating
system — unpredictable to the server — and publishes msgpack reports (see
:mod:`common.wire`) to ``kvldp.<name>.reports`` keyed by device id, so one device's
reports stay in one partition. Every report carries a random non-zero 64-bit report id
(``rid``, from the OS entropy pool whatever ``rng`` is) so that the aggregator counts a
report the producer had to resend only once.

A gateway (or a simulator) that speaks for many devices may pack up to ``batch_size``
reports per Kafka message; each batch stays under the collection's message size cap.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
from aiokafka import AIOKafkaProducer
from numpy.typing import NDArray

from common.collection import Collection, InvalidCollection, load_collection
from common.kvdata import KVData
from common.schema import ReportBatch
from common.wire import WireFormat

#: sends in flight before the SDK waits for acknowledgements (bounds memory)
MAX_IN_FLIGHT = 2000
#: devices perturbed per vectorised step
PERTURB_BLOCK = 4096


def secure_rng() -> np.random.Generator:
    """A generator seeded from the OS entropy pool (spec §0.3: unpredictable to the server)."""
    return np.random.default_rng(secrets.randbits(128))


def device_key(device_id: str | bytes | int) -> bytes:
    if isinstance(device_id, bytes):
        return device_id
    return str(device_id).encode()


def users_from_pairs(collection: Collection, devices: Iterable[Mapping[str, float]]) -> KVData:
    """Raw pairs (key name -> raw value) of many devices as normalised user data: names
    become key indices and values pass through the collection's ``value_range``."""
    index = collection.key_index()
    indptr = [0]
    keys: list[int] = []
    raw: list[float] = []
    for pairs in devices:
        for name, value in pairs.items():
            try:
                keys.append(index[name])
            except KeyError:
                raise InvalidCollection(
                    f"key {name!r} is not a key of collection {collection.name}"
                ) from None
            raw.append(float(value))
        indptr.append(len(keys))
    key_arr = np.asarray(keys, dtype=np.int64)
    values = collection.normalise(np.asarray(raw, dtype=np.float64))
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    order = np.lexsort((key_arr, rows))  # KVData wants keys sorted within each user
    return KVData(collection.d, np.asarray(indptr, dtype=np.int64), key_arr[order], values[order])


class Collector:
    """Publishes locally perturbed reports of one collection."""

    def __init__(
        self,
        collection: Collection | str | Path,
        bootstrap_servers: str,
        rng: np.random.Generator | None = None,
        device_id: str | None = None,
        client_id: str = "kvldp-producer",
        producer: AIOKafkaProducer | None = None,
    ) -> None:
        self.collection = collection if isinstance(collection, Collection) else load_collection(collection)
        self.wire = WireFormat(self.collection)
        self.rng = rng if rng is not None else secure_rng()
        # never from ``rng``: two simulators seeded alike must not share report ids
        self._rid_rng = secure_rng()
        #: the id this SDK instance reports under (the Kafka key), random unless given
        self.device_id = device_id or uuid.uuid4().hex
        self.bootstrap_servers = bootstrap_servers
        self._producer = producer or AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            linger_ms=5,
            max_request_size=max(self.collection.aggregate.max_message_bytes * 2, 1 << 20),
            enable_idempotence=False,
        )
        self._pending: list[asyncio.Future[Any]] = []
        self.sent_reports = 0
        self.sent_messages = 0

    async def start(self) -> None:
        try:
            await self._producer.start()
        except BaseException:
            await self._producer.stop()  # release the half-open client before reporting
            raise

    async def stop(self) -> None:
        try:
            await self.flush()
        finally:
            await self._producer.stop()

    async def __aenter__(self) -> Collector:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def users_from_pairs(self, devices: Iterable[Mapping[str, float]]) -> KVData:
        return users_from_pairs(self.collection, devices)

    # ------------------------------------------------------------------ publishing
    async def _send(self, value: bytes, key: bytes, timestamp_ms: int) -> None:
        fut = await self._producer.send(
            self.collection.reports_topic, value=value, key=key, timestamp_ms=timestamp_ms
        )
        self._pending.append(fut)
        self.sent_messages += 1
        if len(self._pending) >= MAX_IN_FLIGHT:
            await self.flush()

    async def flush(self) -> None:
        """Wait until every message sent so far is acknowledged by the broker."""
        pending, self._pending = self._pending, []
        if pending:
            await asyncio.gather(*pending)

    async def report(self, pairs: Mapping[str, float], device_id: str | bytes | int | None = None) -> None:
        """Perturb one device's pairs (key name -> raw value) and publish one report, keyed
        by ``device_id`` (default: this collector's id)."""
        await self.publish_users(self.users_from_pairs([pairs]), [device_id or self.device_id])

    async def report_many(
        self,
        devices: Sequence[Mapping[str, float]],
        device_ids: Sequence[str | bytes | int] | None = None,
        batch_size: int = 1,
    ) -> None:
        """Perturb many devices' pairs and publish them, ``batch_size`` reports per message
        (a gateway). Without ``device_ids`` every report is keyed by this collector's id."""
        ids = list(device_ids) if device_ids is not None else [self.device_id] * len(devices)
        if len(devices) != len(ids):
            raise ValueError("one device id per device is required")
        await self.publish_users(self.users_from_pairs(devices), ids, batch_size=batch_size)

    async def publish_users(
        self,
        users: KVData,
        device_ids: Sequence[str | bytes | int],
        batch_size: int = 1,
        rate: float | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        """The vectorised path for normalised user data (simulators and gateways).

        ``rate`` caps reports per second; ``on_progress`` is called with the number of
        reports published since the last call.
        """
        if users.d != self.collection.d:
            raise InvalidCollection(
                f"data has {users.d} keys, collection {self.collection.name} has {self.collection.d}"
            )
        per_message = max(1, min(batch_size, self.wire.max_batch()))
        # perturb in blocks of whole messages, so that no gateway batch is cut short
        step = per_message * max(1, PERTURB_BLOCK // per_message)
        started = time.monotonic()
        done = 0
        for block_start in range(0, users.n_users, step):
            block = users.rows(block_start, min(users.n_users, block_start + step))
            batch = self.collection.mechanism.perturb_many(block, self.rng)
            ids = device_ids[block_start : block_start + block.n_users]
            await self._publish_batch(batch, ids, per_message)
            done += block.n_users
            if on_progress is not None:
                on_progress(block.n_users)
            if rate:
                ahead = done / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        self.sent_reports += done

    def report_ids(self, n: int) -> NDArray[np.uint64]:
        """``n`` random non-zero report ids."""
        return self._rid_rng.integers(1, 2**64, size=n, dtype=np.uint64)

    async def _publish_batch(
        self, batch: ReportBatch, device_ids: Sequence[str | bytes | int], per_message: int
    ) -> None:
        now = int(time.time() * 1000)
        n = len(device_ids)
        rids = self.report_ids(n)
        if per_message == 1:
            for value, device in zip(self.wire.encode_many(batch, now, rids), device_ids, strict=True):
                await self._send(value, device_key(device), now)
            return
        for start in range(0, n, per_message):
            part = {name: column[start : start + per_message] for name, column in batch.items()}
            value = self.wire.encode_batch(part, ts_ms=now, rids=rids[start : start + per_message])
            await self._send(value, device_key(device_ids[start]), now)
