"""The reliability scenarios, each checked against an oracle: the registry and the scales.

Every scenario drives the real ``kvldp aggregate`` processes against a real broker,
does something hostile to them (SIGKILLs, rebalances, resends, garbage, a broker that
forgets everything, a cluster losing the leader of its partitions, a log cleaner
compacting the state topic under the workers), then compares the aggregator's integer
statistics with

* the **linear-replay oracle** — the same topic recorded and folded in one clean pass —
  and, where the scenario makes its own data,
* an **independent fold** of the reports it published, computed without Kafka.

A scenario returns an :class:`~kvldp.reliability.scenarios.outcome.Outcome`: the figures
it measured and the checks that failed (none, when it passes). ``tests/reliability`` runs
each at a fast scale in ``make test``; ``kvldp bench reliability`` runs the full scale.

Each scenario lives in the module named after it; the parts they share are
:mod:`~kvldp.reliability.scenarios.outcome` (the result),
:mod:`~kvldp.reliability.scenarios.fresh_collection` (a fresh collection per run),
:mod:`~kvldp.reliability.scenarios.checks` (the comparison with the oracles),
:mod:`~kvldp.reliability.scenarios.waits` (waiting on a process's metrics),
:mod:`~kvldp.reliability.scenarios.workers` (scale-out workers that come and go) and
:mod:`~kvldp.reliability.scenarios.readback` (reading the dead letters back). This package
names the scenarios in order, with their parameters at each scale, and runs one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kvldp.reliability import NAMES
from kvldp.reliability.cluster import three_nodes
from kvldp.reliability.scenarios.broker_restart import broker_restart
from kvldp.reliability.scenarios.budget_ledger import budget_ledger
from kvldp.reliability.scenarios.crash_recovery import crash_recovery
from kvldp.reliability.scenarios.duplicates import duplicates
from kvldp.reliability.scenarios.hostile_input import hostile_input
from kvldp.reliability.scenarios.leader_failover import leader_failover
from kvldp.reliability.scenarios.outcome import Outcome
from kvldp.reliability.scenarios.scale_out import scale_out
from kvldp.reliability.scenarios.state_compaction import state_compaction

#: the parameters of each scenario at the fast scale of ``make test`` and at the full scale
#: of ``kvldp bench reliability``
SCALES: dict[str, dict[str, dict[str, Any]]] = {
    "fast": {
        "crash_recovery": {"reports": 50_000, "kills": 4},
        "scale_out": {"slots": 12_000, "cycles": 5},
        "duplicates": {"reports": 20_000},
        "hostile_input": {"hostile": 10_000, "reports": 20_000},
        "broker_restart": {"reports": 20_000},
        "budget_ledger": {"devices": 300},
        "leader_failover": {"reports": 10_000, "failovers": 2},
        "state_compaction": {"slots": 6_000, "cycles": 4},
    },
    "full": {
        "crash_recovery": {"reports": 1_000_000, "kills": 20},
        "scale_out": {"slots": 50_000, "cycles": 20},
        "duplicates": {"reports": 200_000},
        "hostile_input": {"hostile": 10_000, "reports": 200_000},
        "broker_restart": {"reports": 400_000},
        "budget_ledger": {"devices": 1_000_000},
        "leader_failover": {"reports": 200_000, "failovers": 10},
        "state_compaction": {"slots": 30_000, "cycles": 12},
    },
}

SCENARIOS: dict[str, Callable[..., Awaitable[Outcome]]] = {
    "crash_recovery": crash_recovery,
    "scale_out": scale_out,
    "duplicates": duplicates,
    "hostile_input": hostile_input,
    "broker_restart": broker_restart,
    "budget_ledger": budget_ledger,
    "leader_failover": leader_failover,
    "state_compaction": state_compaction,
}
#: the scenarios that take down nodes of a real Apache Kafka cluster (``make kafka``'s jars)
CLUSTER_SCENARIOS = ("leader_failover", "state_compaction")


assert tuple(SCENARIOS) == NAMES and all(set(scale) == set(NAMES) for scale in SCALES.values())


async def run(name: str, scale: str, workdir: Path, bootstrap: str) -> Outcome:
    """One scenario at a scale (``broker_restart`` brings its own broker, the
    :data:`CLUSTER_SCENARIOS` their own three-node Apache Kafka cluster)."""
    params = SCALES[scale][name]
    if name == "broker_restart":
        return await broker_restart(workdir, **params)
    if name in CLUSTER_SCENARIOS:
        with three_nodes() as cluster:
            return await SCENARIOS[name](cluster, workdir, **params)
    return await SCENARIOS[name](bootstrap, workdir, **params)
