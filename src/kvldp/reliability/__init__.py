"""Reliability scenarios: crashes, rebalances, resends, hostile input, a broker that
forgets, leader failovers and a compacted state topic on a real Apache Kafka cluster,
each checked exactly against an oracle (see :mod:`kvldp.reliability.scenarios`).

``kvldp bench reliability`` runs them at full scale; ``tests/reliability`` at a fast one.
"""

#: scenario names (a contract of ``kvldp bench reliability --scenario``)
NAMES = (
    "crash_recovery",
    "scale_out",
    "duplicates",
    "hostile_input",
    "broker_restart",
    "budget_ledger",
    "leader_failover",
    "state_compaction",
)
