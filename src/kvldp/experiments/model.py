"""What an experiment is: a grid of cells, the paper's printed numbers, and its claims.

A *cell* is one (population, mechanism, estimator, epsilon) setting scored over a
number of repeats; a *series* is a line of a figure or a column of a table (one
mechanism with one estimator), a *panel* one dataset (or one d, n setting). ``role``
separates the paper's mechanisms from what kvldp adds, so that "beat the papers" is
computed, never typed in. Printed numbers ride on the cells they belong to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvldp.common.estimation.conditional import ConditionalQuery
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.primitives import FloatArray

Row = dict[str, Any]

# the columns holding the paper's printed value and the analytic prediction of a metric
PRINTED = {"mse_frequency": "paper_mse_frequency", "mse_mean": "paper_mse_mean"}
THEORY = {"mse_frequency": "predicted_mse_frequency", "mse_mean": "predicted_mse_mean"}


def series_values(rows: list[Row], panel: str, series: str, column: str) -> dict[float, Any]:
    """One series of one panel as x -> the value in ``column`` (what a claim compares)."""
    return {r["x"]: r[column] for r in rows if r["panel"] == panel and r["series"] == series}


@dataclass(frozen=True)
class Cell:
    """One point of an experiment's grid: a panel, an x value and one series (mechanism, estimator,
    data set)."""

    panel: str
    x: float
    series: str
    role: str  # "paper": a mechanism of the paper; "kvldp": what kvldp adds
    dataset: str
    users: int | None
    keys: int
    epsilon: float
    mechanism: str
    estimator: str
    repeats: int
    params: Mapping[str, Any] = field(default_factory=dict)
    paper_mse_frequency: float | None = None
    paper_mse_mean: float | None = None
    theory: bool = False


@dataclass(frozen=True)
class Claim:
    """A claim of the paper checked on the grid: whether it holds, and the numbers that say so."""

    text: str
    holds: bool | None  # None: the grid does not contain the settings the claim is about
    evidence: str


@dataclass(frozen=True)
class Metric:
    """One column of an experiment's table: the error it reports, its label and how it is printed
    and plotted."""

    column: str
    label: str
    scale: float = 1.0  # the table prints value / scale (Horigome et al. print MSE(f) x 10^-4)
    log: bool = True  # plotted on a log axis (errors); NCR, a share in [0, 1], is not


@dataclass(frozen=True)
class Experiment:
    """A paper's experiment: its grid of cells, the metrics it reports, the printed numbers and its claims."""

    name: str
    title: str
    source: str
    x_name: str  # "epsilon" or "users"
    cells: Callable[[bool], list[Cell]]
    metrics: Sequence[Metric]
    notes: str = ""
    claims: Callable[[list[Row]], list[Claim]] = lambda rows: []
    extra: Callable[[FloatArray, FloatArray], Callable[[Estimate], Mapping[str, float]]] | None = None
    queries: Callable[[int], list[ConditionalQuery]] | None = None
    duel_metrics: Sequence[str] = ("mse_frequency", "mse_mean")
    # False where the printed numbers are not reproducible (Table 5): the verdict then
    # compares with kvldp's own run of the paper's mechanisms, never with a misprint
    printed_is_reference: bool = True
    log_x: bool = False
    data_seed: int = 0
