"""``kvldp aggregate --role exporter``: merge the workers' snapshots, refit, serve metrics.

The exporter never joins the consumer group and never reads reports. It follows the
compacted state topic from the beginning, keeps the current snapshot of every input
partition (see :mod:`kvldp.aggregator.statetopic` for which one is current), and on the refit
timer replaces the changed partitions of its merged state and refits. Every partition's
snapshot is self-consistent, so the merged statistics are always a union of whole
prefixes of the input partitions: never a report twice, never half a fetch.

Its ``kvldp_last_checkpoint_timestamp_seconds`` is the time of the newest snapshot it
holds (how fresh the exported state is), and its consumer lag is the workers' lag as of
their snapshots.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kvldp.aggregator.console import stderr_line
from kvldp.aggregator.exporter import Exporter
from kvldp.aggregator.serving import ServingRole, cancel, every
from kvldp.aggregator.snapshot_wait import SnapshotWait
from kvldp.aggregator.state import CheckpointMismatch
from kvldp.aggregator.statetopic import StateFollower, decode
from kvldp.aggregator.topics import ensure_topics
from kvldp.common.config.collection import Collection
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.reachability import Reachability
from kvldp.kafka.shutdown import STOP_GRACE_S, close_within
from kvldp.web.security import HttpSecurity


class MergedExporter(ServingRole):
    """Serves one collection's estimates from its workers' snapshots."""

    def __init__(
        self,
        collection: Collection,
        kafka: KafkaConfig | str,
        metrics_host: str = "127.0.0.1",
        metrics_port: int = 9108,
        refit_interval: float | None = None,
        log: Callable[[str], None] = stderr_line,
        security: HttpSecurity | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            collection, kafka, "exporter", metrics_host, metrics_port, refit_interval, log, security, clock
        )
        self.exporter = Exporter(collection, lambda: self.state, clock=clock)
        self.reachability = Reachability(
            self.kafka,
            "exporter",
            "/metrics serves the estimates of the snapshots so far",
            log,
            self.exporter.registry,
        )
        self.follower = StateFollower(collection, self.kafka, self.reachability.failed, pieces=False)
        self.snapshot_wait = SnapshotWait(
            collection.name,
            collection.state_topic,
            self.exporter.registry,
            log,
            f"every partition has a snapshot in {collection.state_topic}",
        )
        self._refused: set[tuple[int, tuple[int, int]]] = set()

    async def run(self, stop: asyncio.Event, ready: Callable[[MergedExporter], None] | None = None) -> None:
        """Run until ``stop`` is set."""
        await ensure_topics(self.kafka, self.collection, state=True, log=self.log)
        self.bound_port = await self.exporter.serve(self.metrics_host, self.metrics_port, self.security)
        follower = self.follower
        tasks: list[asyncio.Task[None]] = []
        try:
            await follower.start()
            await self.reachability.start()
            tasks.append(asyncio.create_task(self.reachability.watch(), name="reachability"))
            tasks.append(asyncio.create_task(follower.follow(), name="follow"))
            await follower.caught_up(timeout=30.0)
            await self.refresh()
            if ready is not None:
                ready(self)
            tasks.append(asyncio.create_task(every(self.refit_interval, self.refresh), name="refit"))
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
            await cancel([*tasks, waiter])
        finally:
            for task in tasks:
                task.cancel()
            deadline = asyncio.get_running_loop().time() + STOP_GRACE_S
            unclean = await close_within([follower, self.reachability], deadline)
            if unclean:
                self.log(
                    f"stopped without closing {', '.join(unclean)} cleanly (Kafka did not answer in time)"
                )
            await self.exporter.close()

    async def refresh(self) -> None:
        """Load the changed snapshots into the merged state, then refit."""
        changed, self.follower.changed = self.follower.changed, set()
        for p in sorted(changed):
            entry = self.follower.snapshots[p]
            try:
                self.state.partitions[p] = decode(self.collection, p, entry.value, rows=False)
            except CheckpointMismatch as exc:
                if (p, entry.rank) not in self._refused:  # say it once per snapshot
                    self._refused.add((p, entry.rank))
                    self.log(
                        f"ignoring the snapshot of partition {p} in {self.collection.state_topic}: {exc}"
                    )
        self.snapshot_wait.update(
            set(range(self.collection.aggregate.partitions)) - set(self.follower.snapshots),
            "the estimates here leave them out until a worker publishes them (a partition that "
            "never had a report has none)",
        )
        if self.follower.snapshots:
            newest = max(e.timestamp_ms for e in self.follower.snapshots.values())
            self.exporter.collector.last_checkpoint = newest / 1000
        await self.exporter.refresh(self.state)
