"""The aggregator service: consume, validate, fold, dead-letter, checkpoint, refit, export.

One asyncio process per collection (``--role all``). Its consume loop only decodes and
folds (numpy); refits run in a worker thread on a timer so the consumer never misses
its poll interval (aiokafka #848), and checkpoints are written on a timer and at every
revocation and shutdown. Input errors never stop it: a malformed message is written,
with its original bytes and a reason, to the dead-letter topic, and the partition only
moves past it once that write is acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from aggregator.exporter import Exporter, HttpSecurity
from aggregator.ingest import Rejected, plan
from aggregator.refit import refit
from aggregator.state import AggregatorState, CheckpointStore
from aggregator.topics import ensure_topics
from common.collection import Collection
from common.wire import WireFormat

#: records per ``getmany`` (amortises per-fetch overhead without starving the other tasks)
MAX_RECORDS = 20_000


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Aggregator:
    """Consumes one collection's reports topic and serves its estimates."""

    def __init__(
        self,
        collection: Collection,
        bootstrap_servers: str,
        metrics_host: str = "127.0.0.1",
        metrics_port: int = 9108,
        state_dir: str | Path | None = None,
        refit_interval: float | None = None,
        checkpoint_interval: float = 1.0,
        log: Callable[[str], None] = _stderr,
        security: HttpSecurity | None = None,
    ) -> None:
        self.collection = collection
        self.bootstrap_servers = bootstrap_servers
        self.metrics_host = metrics_host
        self.metrics_port = metrics_port
        self.store = CheckpointStore(state_dir, collection) if state_dir is not None else None
        self.refit_interval = refit_interval or collection.aggregate.refit_interval_s
        self.checkpoint_interval = checkpoint_interval
        self.log = log
        self.wire = WireFormat(collection)
        self.queries = collection.conditional_queries()
        self.state = AggregatorState(collection)
        self.security = security
        self.exporter = Exporter(
            collection, lambda: self.state.reports_total, lambda: self.state.rejected_totals(), self.lag
        )
        self.bound_port: int | None = None
        self._dirty = False
        self._consumer: AIOKafkaConsumer | None = None
        self._dlq: AIOKafkaProducer | None = None
        self._save_lock = asyncio.Lock()
        self._reset_warned: set[int] = set()

    # ------------------------------------------------------------------ lifecycle
    async def run(self, stop: asyncio.Event, ready: Callable[[Aggregator], None] | None = None) -> None:
        """Run until ``stop`` is set; leaves a final checkpoint."""
        if self.store is not None:
            loaded = self.store.load()
            if loaded is not None:
                self.state = loaded
                self.log(f"resumed from {self.store.path}: {self.state.reports_total} reports folded")
        else:
            self.log("no --state-dir: state is kept in memory only and is lost when the aggregator stops")
        await ensure_topics(self.bootstrap_servers, self.collection)
        self.bound_port = await self.exporter.serve(self.metrics_host, self.metrics_port, self.security)
        self._dlq = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap_servers, client_id="kvldp-dlq", linger_ms=5
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=self.collection.consumer_group,
            client_id="kvldp-aggregator",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=500,  # a crashed member leaves the group within one session timeout
            session_timeout_ms=6_000,
            max_partition_fetch_bytes=4 << 20,
        )
        try:
            await self._dlq.start()
            await self._consumer.start()
            self._consumer.subscribe([self.collection.reports_topic], listener=_Rebalance(self))
            await self._refit_once()
            if ready is not None:
                ready(self)
            tasks = [
                asyncio.create_task(self._consume(), name="consume"),
                asyncio.create_task(self._every(self.refit_interval, self._refit_once), name="refit"),
                asyncio.create_task(
                    self._every(self.checkpoint_interval, self.checkpoint), name="checkpoint"
                ),
            ]
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if failed:
                raise failed[0].exception()  # type: ignore[misc]
            await self.checkpoint()
        finally:
            if self._consumer is not None:
                await self._consumer.stop()
            if self._dlq is not None:
                await self._dlq.stop()
            await self.exporter.close()

    async def _every(self, seconds: float, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(seconds)
            result = job()
            if asyncio.iscoroutine(result):
                await result

    # ------------------------------------------------------------------ consuming
    async def _consume(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            fetched = await consumer.getmany(timeout_ms=200, max_records=MAX_RECORDS)
            for tp, records in fetched.items():
                if not records or tp not in consumer.assignment():
                    continue
                state = self.state.partition(tp.partition)
                if records[0].offset > state.next_offset:
                    # fetched past our state (e.g. from a committed offset): rewind, never skip
                    consumer.seek(tp, state.next_offset)
                    continue
                work = plan(self.state, self.wire, tp.partition, records)
                if work is None:
                    continue
                if work.rejected:
                    await self._dead_letter(tp, work.rejected)
                work.apply(self.state)
                self._dirty = True

    def _check_resets(self) -> None:
        """A partition whose end lies below our next offset was reset or recreated (an
        in-memory broker restarted, a topic deleted): its new records would never reach
        our offset. Say so, once per partition, instead of waiting silently."""
        consumer = self._consumer
        if consumer is None:
            return
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            next_offset = self.state.partition(tp.partition).next_offset
            if highwater is not None and highwater < next_offset and tp.partition not in self._reset_warned:
                self._reset_warned.add(tp.partition)
                self.log(
                    f"partition {tp.partition} of {tp.topic} ends at offset {highwater}, below the checkpoint's "
                    f"next offset {next_offset}: the topic was reset or recreated; its records are not folded "
                    "until the old state is moved away"
                )

    async def _dead_letter(self, tp: TopicPartition, rejected: list[Rejected]) -> None:
        """Write rejected records to the DLQ and wait for every acknowledgement."""
        assert self._dlq is not None
        futures = []
        for r in rejected:
            headers = [
                ("reason", r.reason.encode()),
                ("detail", r.detail.encode("utf-8", "replace")[:1024]),
                ("source_topic", tp.topic.encode()),
                ("source_partition", str(tp.partition).encode()),
                ("source_offset", str(r.offset).encode()),
            ]
            futures.append(
                await self._dlq.send(self.collection.dlq_topic, value=r.value, key=r.key, headers=headers)
            )
        await asyncio.gather(*futures)

    def lag(self) -> dict[int, int]:
        """Records not yet folded per assigned partition (from the fetch high watermark)."""
        consumer = self._consumer
        if consumer is None:
            return {}
        out = {}
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if highwater is not None:
                out[tp.partition] = max(0, highwater - self.state.partition(tp.partition).next_offset)
        return out

    # ------------------------------------------------------------------ checkpoints and refits
    async def checkpoint(self) -> None:
        """Persist state and next offsets atomically (when a state dir is set), then
        commit the same offsets to Kafka for lag dashboards (informational)."""
        async with self._save_lock:
            if not self._dirty:
                return
            self._dirty = False
            offsets = {
                TopicPartition(self.collection.reports_topic, p): s.next_offset
                for p, s in self.state.partitions.items()
            }
            if self.store is not None:
                try:
                    await asyncio.to_thread(self.store.save, self.state.to_bytes())
                except BaseException:
                    self._dirty = True
                    raise
            consumer = self._consumer
            if consumer is not None:
                mine = {tp: o for tp, o in offsets.items() if tp in consumer.assignment() and o > 0}
                if mine:
                    with contextlib.suppress(CommitFailedError, KafkaError):
                        await consumer.commit(mine)

    async def _refit_once(self) -> None:
        self._check_resets()
        now_ms = int(time.time() * 1000)
        self.state.compact(now_ms)
        windows = self.state.window_stats(now_ms)
        snapshot = await asyncio.to_thread(
            refit, self.collection, windows, self.exporter.snapshot, self.queries
        )
        self.exporter.publish(snapshot)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Checkpoint before partitions leave; seek to the checkpointed offset when they arrive."""

    def __init__(self, aggregator: Aggregator) -> None:
        self.aggregator = aggregator

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.aggregator._dirty = True
        await self.aggregator.checkpoint()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        consumer = self.aggregator._consumer
        assert consumer is not None
        for tp in assigned:
            consumer.seek(tp, self.aggregator.state.partition(tp.partition).next_offset)
