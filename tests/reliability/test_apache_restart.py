"""Apache Kafka crashes and comes back with its log: every report is folded exactly once.

The counterpart of the ``broker_restart`` scenario (a Tansu broker that forgets every
topic): an Apache Kafka node of the test's own is SIGKILLed right after reports were
acknowledged, while an aggregator (a ``kvldp aggregate`` process with checkpoints) is
reading them, and started again on the same ports and storage. The log survives, so
nothing may count as a reset: the same aggregator process reconnects and folds on, is
then SIGKILLed itself and a fresh one resumes from the checkpoint. Its statistics must
equal both the independent fold of every report published and a clean replay of the
topic, and ``kvldp_topic_resets_total`` must stay 0.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from itertools import pairwise
from pathlib import Path

import pytest

from kvldp.aggregator.state import CheckpointStore
from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess, total
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.waits import checkpointed_after, folded, has_folded, until
from kvldp.reliability.traffic import publish, report_batches

REPORTS = 40_000


@pytest.mark.asyncio
async def test_a_crashed_apache_kafka_node_keeps_every_report_folded_once(tmp_path: Path) -> None:
    collection, path = make_collection(tmp_path, "apache-restart", "kvue", 6, partitions=6)
    traffic = report_batches(collection, REPORTS, 50, 7)
    messages = traffic.messages
    thirds = [len(messages) * i // 3 for i in range(4)]
    segments = [messages[a:b] for a, b in pairwise(thirds)]
    reports_until = [sum(m.reports for m in messages[:end]) for end in thirds[1:]]
    state_dir = tmp_path / "state"
    figures: dict[str, float] = {}
    # a cluster of the test's own: the session's is never killed
    with ApacheKafka(1) as cluster:
        bootstrap = cluster.bootstrap_servers
        first = AggregatorProcess(path, bootstrap, tmp_path, "first", state_dir=state_dir).start()
        second = AggregatorProcess(path, bootstrap, tmp_path, "second", state_dir=state_dir)
        try:
            await first.ready()
            await publish(bootstrap, collection.reports_topic, segments[0])
            assert await until(partial(has_folded, first, reports_until[0]), 60), first.log_tail()
            mark = time.time()
            assert await until(partial(checkpointed_after, first, mark), 30), "no checkpoint"
            # acknowledged, and the node dies while the aggregator reads them
            await publish(bootstrap, collection.reports_topic, segments[1])
            figures["folded_at_kill"] = await folded(first)
            cluster.kill(1)
            down = time.monotonic()
            assert first.alive(), first.log_tail()
            cluster.restart(1)
            figures["broker_restart_s"] = round(time.monotonic() - down, 1)
            assert await until(partial(has_folded, first, reports_until[1]), 90), first.log_tail()
            figures["resumed_after_s"] = round(time.monotonic() - down, 1)
            first.kill()  # and the aggregator once more: the checkpoint spans the crash
            await second.start().ready()
            await publish(bootstrap, collection.reports_topic, segments[2])
            assert await until(partial(has_folded, second, REPORTS), 90), second.log_tail()
            samples = await asyncio.to_thread(second.samples)
            assert second.stop() == 0
            oracle = await replay_oracle(collection, bootstrap, tmp_path)
        finally:
            first.kill()
            second.kill()
    print(figures)  # with -s
    state = CheckpointStore(state_dir, collection).load()
    assert state is not None
    assert state.reports_total == oracle.reports_total == REPORTS
    assert state.all_stats() == traffic.stats
    assert oracle.all_stats() == traffic.stats
    assert state.resets_total == total(samples, "kvldp_topic_resets_total") == 0
    assert "was reset" not in (tmp_path / "first.log").read_text()
