"""The demo's table cells say what the demo is waiting for: no ``nan ± nan`` before the
first report is folded, no ``undefined`` mean while the reports estimate no holder of a
key; numbers once there are some."""

from __future__ import annotations

import numpy as np

from kvldp.common.config.collection_file import parse_collection
from kvldp.common.estimation.estimate import Estimate
from kvldp.demo.estimate_cells import frequency_cell, mean_cell

COLLECTION = parse_collection(
    {"name": "cells", "mechanism": "kvue", "epsilon": 1.0, "keys": ["a", "b"], "value_range": [0.0, 10.0]}
)


def estimate(frequency: list[float], mean: list[float], n_reports: int) -> Estimate:
    return Estimate(
        mechanism="kvue",
        estimator="unbiased",
        frequency=np.array(frequency),
        frequency_stderr=np.full(len(frequency), np.nan if n_reports == 0 else 0.01),
        mean=np.array(mean),
        mean_stderr=np.full(len(mean), np.nan if n_reports == 0 else 0.02),
        n_reports=n_reports,
    )


def test_before_any_report_the_cells_say_so() -> None:
    empty = estimate([np.nan, np.nan], [np.nan, np.nan], 0)
    for shown in (empty, None):
        cells = [frequency_cell(shown, 0), mean_cell(COLLECTION, shown, 0)]
        assert [cell.strip() for cell in cells] == ["no reports yet", "no reports yet"]
        assert [len(cell) for cell in cells] == [17, 19]


def test_a_key_without_estimated_holders_has_too_few_reports_for_a_mean() -> None:
    early = estimate([0.4, -0.01], [0.2, np.nan], 12)
    assert mean_cell(COLLECTION, early, 1).strip() == "too few reports"
    assert frequency_cell(early, 1) == " -0.0100 ± 0.0100"
    assert mean_cell(COLLECTION, early, 0) == "    6.000 ±   0.100"
    assert "nan" not in frequency_cell(early, 0) + mean_cell(COLLECTION, early, 0)
