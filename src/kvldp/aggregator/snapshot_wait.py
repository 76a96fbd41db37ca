"""What a scale-out process is waiting for, said in its log and in a metric.

A worker that takes over partitions waits for their snapshots on the state topic (up to
:data:`~kvldp.aggregator.consumer.SNAPSHOT_WAIT_S`, longer while a snapshot of a
partition with committed offsets may still be on its way) and loads them before it
folds; an exporter serves the partitions of which some worker has published a snapshot
and leaves the others out. Both can take long enough to look like a dead process (a
worker's first start after a ``--role all`` aggregator committed the offsets, workers
still joining their group), so both keep ``kvldp_partitions_awaiting_snapshot`` and say
in one line which partitions they wait for, and again once they wait for none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Gauge


class SnapshotWait:
    """The partitions one process waits for the snapshots of, as a gauge and log lines."""

    def __init__(
        self,
        collection: str,
        state_topic: str,
        registry: CollectorRegistry,
        log: Callable[[str], None],
        done: str,
    ) -> None:
        self.state_topic = state_topic
        self.log = log
        #: the line said once nothing is waited for any more
        self.done = done
        self._gauge = Gauge(
            "kvldp_partitions_awaiting_snapshot",
            "input partitions this process holds no state of yet, waiting for their snapshots",
            ["collection"],
            registry=registry,
        ).labels(collection)
        self._waiting: frozenset[int] = frozenset()

    def update(self, waiting: Iterable[int], why: str) -> None:
        """The partitions waited for now; a line when the set changes (``why``: what the
        process does meanwhile)."""
        now = frozenset(waiting)
        self._gauge.set(len(now))
        if now == self._waiting:
            return
        if now:
            self.log(f"waiting for snapshots of partitions {_listed(now)} in {self.state_topic}: {why}")
        elif self._waiting:
            self.log(self.done)
        self._waiting = now


def _listed(partitions: frozenset[int]) -> str:
    return ", ".join(str(p) for p in sorted(partitions))
