"""A scale-out process says which partitions' snapshots it waits for: one line when the set
changes, one when it waits for none, and the count as a gauge all along."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kvldp.aggregator.snapshot_wait import SnapshotWait


def test_the_partitions_waited_for_are_logged_on_change_and_counted() -> None:
    registry = CollectorRegistry()
    lines: list[str] = []
    wait = SnapshotWait("c", "kvldp.c.state", registry, lines.append, "every assigned partition is loaded")

    def gauge() -> float | None:
        return registry.get_sample_value("kvldp_partitions_awaiting_snapshot", {"collection": "c"})

    wait.update([], "paused")
    assert lines == [] and gauge() == 0
    wait.update([3, 1], "paused")
    wait.update({1, 3}, "paused")  # the same partitions: nothing new to say
    assert lines == ["waiting for snapshots of partitions 1, 3 in kvldp.c.state: paused"] and gauge() == 2
    wait.update([3], "paused")
    wait.update([], "paused")
    assert lines[1:] == [
        "waiting for snapshots of partitions 3 in kvldp.c.state: paused",
        "every assigned partition is loaded",
    ]
    assert gauge() == 0
