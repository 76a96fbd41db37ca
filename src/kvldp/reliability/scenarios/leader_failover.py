"""The ``leader_failover`` scenario: on a three-node Apache Kafka cluster, the node leading
most of the reports topic's partitions is SIGKILLed while reports stream in and two
workers fold them, a new leader takes over, the node comes back; again and again.

Why the check is exact. Every report carries a random 64-bit report id, and the traffic
is sent as the device SDK sends it: ``acks=all`` and no producer idempotence. The
reports topic has 3 replicas and ``min.insync.replicas`` 2, and Kafka never elects a
leader outside the in-sync replicas (``unclean.leader.election.enable`` is off by
default), so a write once acknowledged survives the loss of its leader: nothing can be
lost. A send whose acknowledgement the dying leader never gave is retried, and if the
first attempt had been written the topic holds that batch twice; the aggregator drops a
report id it has seen within its de-duplication memory (per partition, the last
``dedup_horizon`` tagged reports or ``dedup_window`` of record time, 100,000 and 5
minutes by default), and every retry here comes back within seconds and far fewer
reports. So the workers' statistics, merged from their snapshots in the state topic,
must equal the independent fold of every published report exactly once, and the linear
replay of the topic (which applies the same rule) too, duplicates and all.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from functools import partial
from pathlib import Path

from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.reliability.cluster import (
    fully_replicated,
    leaders,
    led_elsewhere,
    log_bounds,
    partitions,
    topic_config,
)
from kvldp.reliability.oracle import replay_oracle
from kvldp.reliability.processes import AggregatorProcess
from kvldp.reliability.scenarios.checks import compare
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.waits import folded, has_folded, sent, until
from kvldp.reliability.scenarios.workers import WorkerPool, merged_snapshots
from kvldp.reliability.traffic import publish, report_batches

#: seconds over which each failover's share of the traffic is published: the kill comes a
#: quarter of the way in, and a new leader takes 3 to 5 s (the fenced node's session)
SHARE_SECONDS = 8.0
#: seconds each wait on the cluster may take (a node's JVM restarts in 5 to 15 s on 2 cores)
CLUSTER_WAIT_S = 120.0


async def leader_failover(
    cluster: ApacheKafka,
    workdir: Path,
    reports: int = 20_000,
    failovers: int = 2,
    batch: int = 20,
    seed: int = 8,
) -> Outcome:
    """Two workers and an exporter; ``failovers`` times the leader of most reports
    partitions is SIGKILLed mid-stream and restarted once a new leader took over."""
    out = Outcome("leader_failover")
    bootstrap = cluster.bootstrap_servers  # every node: clients go on with those alive
    collection, path = make_collection(
        workdir, "failover", "kvue", 6, partitions=6, replication_factor=3, min_insync_replicas=2
    )
    topic = collection.reports_topic
    traffic = report_batches(collection, reports, batch, seed)
    size = -(-len(traffic.messages) // failovers)
    shares = [traffic.messages[i : i + size] for i in range(0, len(traffic.messages), size)]
    started = time.monotonic()
    exporter = AggregatorProcess(path, bootstrap, workdir, f"{collection.name}-exporter", role="exporter")
    await exporter.start().ready()
    pool = WorkerPool(path, bootstrap, workdir, collection.name, random.Random(seed))
    for _ in range(2):
        await pool.add()  # the workers create the topics, with the collection's replication
    described = await partitions(cluster, [topic])
    in_sync = (await topic_config(cluster, topic))["min.insync.replicas"]
    out.check(
        len(described) == 6 and all(len(p["replicas"]) == 3 for p in described),
        f"{topic}: 6 partitions of 3 replicas ({[len(p['replicas']) for p in described]})",
    )
    out.check(in_sync == "2", f"{topic}: min.insync.replicas {in_sync} = 2")
    killed: list[int] = []
    sent_at_kill: list[int] = []
    election_s: list[float] = []
    for share in shares:
        progress = [0]
        sending = asyncio.create_task(
            publish(bootstrap, topic, share, rate=len(share) / SHARE_SECONDS, progress=progress)
        )
        quarter = len(share) // 4
        out.check(await until(partial(sent, progress, quarter), 60, poll=0.05), f"{quarter} messages sent")
        victim = Counter((await leaders(cluster, topic)).values()).most_common(1)[0][0]
        sent_at_kill.append(progress[0])
        cluster.kill(victim)
        killed.append(victim)
        kill_time = time.monotonic()
        out.check(
            await until(partial(led_elsewhere, cluster, topic, victim), CLUSTER_WAIT_S, poll=0.1),
            f"every partition of {topic} led by another node than {victim} within {CLUSTER_WAIT_S:.0f} s",
        )
        election_s.append(round(time.monotonic() - kill_time, 1))
        cluster.relaunch(victim)  # from this (the main) thread: the node's parent-death signal follows it
        await asyncio.to_thread(cluster.wait_rejoined, victim, CLUSTER_WAIT_S)
        # the next kill must not leave any partition below min.insync.replicas
        out.check(
            await until(partial(fully_replicated, cluster), CLUSTER_WAIT_S, poll=0.5),
            f"node {victim} back in sync for every partition within {CLUSTER_WAIT_S:.0f} s",
        )
        await sending
    out.check(
        all(0 < n < len(share) for n, share in zip(sent_at_kill, shares, strict=True)),
        f"every kill landed mid-stream: {sent_at_kill} messages sent",
    )
    out.check(
        await until(partial(has_folded, exporter, reports), 180),
        f"the exporter merged all {reports} reports",
    )
    exported = await folded(exporter)
    out.figures["seconds"] = round(time.monotonic() - started, 1)
    out.check(len(pool.alive()) == 2, "both workers survived every failover")
    pool.stop(out)  # each publishes its final snapshots as its partitions are revoked
    out.check(exporter.stop() == 0, "exporter stopped cleanly")
    merged = await merged_snapshots(collection, bootstrap)
    oracle = await replay_oracle(collection, bootstrap, workdir)
    compare(out, merged, oracle, traffic.stats)
    out.check(exported == reports, f"exported kvldp_reports_total {exported} = {reports}")
    out.check(
        merged.duplicates_total == oracle.duplicates_total,
        f"duplicates dropped {merged.duplicates_total} = the replay's {oracle.duplicates_total}",
    )
    records = sum(end - start for start, end in (await log_bounds(bootstrap, topic)).values())
    out.figures.update(
        reports=reports,
        messages=len(traffic.messages),
        failovers=len(killed),
        killed_nodes=killed,
        messages_sent_at_each_kill=sent_at_kill,
        seconds_to_new_leaders=election_s,
        records_in_topic=records,
        duplicate_reports_dropped=merged.duplicates_total,
    )
    return out
