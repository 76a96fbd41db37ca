"""The checks the scenarios share against their oracles.

:func:`fold_parts` is the independent fold of the reports a scenario published (computed
without Kafka); :func:`compare` checks an aggregator's integer statistics against it and
against the linear-replay oracle of :mod:`kvldp.reliability.oracle`; :func:`check_canaries`
checks the statistics of canary reports (one per cell) cell by cell.
"""

from __future__ import annotations

import numpy as np

from kvldp.aggregator.state import AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.common.data.schema import ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.reliability.scenarios.outcome import Outcome


def fold_parts(collection: Collection, parts: list[ReportBatch]) -> Stats:
    stats = collection.estimation_mechanism.new_stats()
    for part in parts:
        stats.fold(part)
    return stats


def compare(outcome: Outcome, got: AggregatorState, oracle: AggregatorState, expected: Stats | None) -> None:
    outcome.check(got.all_stats() == oracle.all_stats(), "statistics equal the linear-replay oracle")
    if expected is not None:
        outcome.check(
            got.all_stats() == expected, "statistics equal the independent fold of the published reports"
        )
    offsets = {p: s.next_offset for p, s in got.partitions.items() if s.next_offset}
    outcome.check(
        offsets == {p: s.next_offset for p, s in oracle.partitions.items() if s.next_offset},
        f"every partition read to its end: {offsets}",
    )
    outcome.figures["reports_folded"] = got.reports_total
    outcome.figures["oracle_reports"] = oracle.reports_total


def check_canaries(outcome: Outcome, got: AggregatorState, cells: int) -> None:
    """Every one of ``cells`` canaries counted exactly once (above 1: double counted; 0: lost)."""
    counts = got.all_stats().arrays["counts"][:cells]
    top = int(counts.max(initial=0))
    outcome.check(top <= 1, f"no canary counted twice (max cell {top})")
    outcome.check(
        counts.size == cells and int(counts.min()) >= 1,
        f"no canary lost ({cells - int(np.count_nonzero(counts))} cells empty)",
    )
