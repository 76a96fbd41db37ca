"""The reliability scenarios that take nodes of a real three-node Apache Kafka cluster
down (``make kafka``'s jars), at the fast scale in ``make test``: the leader of the
reports partitions SIGKILLed and restarted while workers fold, and the state topic
compacted while workers come and go. Both share one cluster, which each leaves whole, in
one xdist worker (``make test`` distributes by group: three more JVMs per worker would
cost more than the two tests take); their full scale runs in
``tests/reliability/test_scenarios.py`` (``-m full``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.reliability.cluster import three_nodes
from kvldp.reliability.scenarios import SCALES
from kvldp.reliability.scenarios.leader_failover import leader_failover
from kvldp.reliability.scenarios.state_compaction import state_compaction

pytestmark = [pytest.mark.asyncio, pytest.mark.xdist_group("three-node-cluster")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ApacheKafka]:
    with three_nodes() as running:
        yield running


async def test_the_leader_fails_over_and_every_report_counts_once(
    cluster: ApacheKafka, tmp_path: Path
) -> None:
    out = await leader_failover(cluster, tmp_path, **SCALES["fast"]["leader_failover"])
    print(out)  # the figures, with -s
    assert out.failures == [], (out.failures, out.figures)
    assert out.figures["failovers"] == 2 and out.figures["reports_folded"] == 10_000
    assert len(cluster.pids) == 3  # the cluster is whole again


async def test_a_worker_joining_after_compaction_restores_every_partition(
    cluster: ApacheKafka, tmp_path: Path
) -> None:
    out = await state_compaction(cluster, tmp_path, **SCALES["fast"]["state_compaction"])
    print(out)
    assert out.failures == [], (out.failures, out.figures)
    assert out.figures["state_records_left"] < out.figures["state_records_written"]
