"""The calibration table of ``kvldp evaluate --calibration``: rows for every mechanism ×
estimator × ε, written as CSV, a Markdown report and a plot of coverage against ε.

The table is what docs/results/calibration/ holds; each row comes from
:func:`kvldp.evaluation.calibration.calibrate`. A row passes when the coverage of its
frequencies and means lies in [0.93, 0.97] and the median stderr/RMSE in [0.85, 1.15];
quantities without a standard error (documented per estimator) are shown as "—". Rows of
composed channels (instantaneous randomization; docs/results/calibration-instantaneous/)
add the memoized report's ε, ``state_epsilon``, beside the per-report ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvldp.common.files.atomic_file import write_atomically, write_csv
from kvldp.evaluation.calibration import Calibration, QuantityCalibration

COVERAGE_BAND = (0.93, 0.97)
RATIO_BAND = (0.85, 1.15)
COLUMNS = (
    "mechanism", "estimator", "dataset", "users", "keys", "epsilon", "repeats",
    "frequency_coverage", "frequency_ratio", "frequency_answered",
    "mean_coverage", "mean_ratio", "mean_answered", "mean_with_stderr", "passes",
)  # fmt: skip


@dataclass(frozen=True)
class CalibrationRow:
    """One calibrated setting and the population it was measured on."""

    calibration: Calibration
    dataset: str
    users: int
    keys: int

    def record(self) -> dict[str, Any]:
        """The row as CSV/JSON fields (NaN as None)."""
        c = self.calibration
        m = c.mean
        raw: dict[str, Any] = {
            "mechanism": c.mechanism,
            "estimator": c.estimator,
            "dataset": self.dataset,
            "users": self.users,
            "keys": self.keys,
            "epsilon": c.epsilon,
            "repeats": c.repeats,
            "frequency_coverage": c.frequency.coverage,
            "frequency_ratio": c.frequency.ratio,
            "frequency_answered": c.frequency.answered,
            "mean_coverage": m.coverage if m else None,
            "mean_ratio": m.ratio if m else None,
            "mean_answered": m.answered if m else None,
            "mean_with_stderr": m.with_stderr if m else None,
            "passes": passes(c),
            "state_epsilon": c.state_epsilon,
        }
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in raw.items()}


def _within(value: float, band: tuple[float, float]) -> bool:
    return band[0] <= value <= band[1]


def quantity_passes(q: QuantityCalibration) -> bool:
    """Coverage and ratio in their bands; a quantity exporting no standard error at all
    (documented) passes, one exporting some but not all does not."""
    if q.with_stderr == 0.0 or math.isnan(q.with_stderr):
        return True
    return _within(q.coverage, COVERAGE_BAND) and _within(q.ratio, RATIO_BAND)


def passes(c: Calibration) -> bool:
    return quantity_passes(c.frequency) and (c.mean is None or quantity_passes(c.mean))


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value)


def _composed(rows: list[CalibrationRow]) -> bool:
    """Whether any row is a composed channel's (its table shows both epsilons)."""
    return any(row.calibration.state_epsilon is not None for row in rows)


def table(rows: list[CalibrationRow]) -> str:
    """The Markdown table of the rows (coverage, ratio and answered share per quantity)."""
    composed = _composed(rows)
    epsilons = "ε per state | ε per report" if composed else "ε"
    head = (
        f"| mechanism | estimator | {epsilons} | f coverage | f ratio | mean coverage | mean ratio "
        f"| means answered | passes |\n|{'---|' * (10 if composed else 9)}"
    )
    lines = [head]
    for row in rows:
        r = row.record()
        se = r["mean_with_stderr"]
        no_se = se is not None and se == 0.0
        state = [_cell(r["state_epsilon"])] if composed else []
        lines.append(
            "| "
            + " | ".join(
                [
                    r["mechanism"],
                    r["estimator"],
                    *state,
                    f"{r['epsilon']:.4g}" if composed else f"{r['epsilon']:g}",
                    _cell(r["frequency_coverage"]),
                    _cell(r["frequency_ratio"]),
                    "no stderr" if no_se else _cell(r["mean_coverage"]),
                    "no stderr" if no_se else _cell(r["mean_ratio"]),
                    _cell(r["mean_answered"]),
                    _cell(r["passes"]),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def write(rows: list[CalibrationRow], out: Path, command: str) -> list[Path]:
    """Write results.csv, README.md and (with matplotlib) coverage.png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "results.csv"
    columns = (*COLUMNS, "state_epsilon") if _composed(rows) else COLUMNS
    write_csv(csv_path, columns, ({k: v for k, v in row.record().items() if k in columns} for row in rows))
    paths = [csv_path]
    png, note = _plot(rows, out / "coverage.png")
    paths.extend(png)
    failing = [r for r in rows if not passes(r.calibration)]
    settings = sorted({(r.dataset, r.users, r.keys) for r in rows})
    populations = "; ".join(f"`{d}` (n = {n:,}, d = {k})" for d, n, k in settings)
    text = "\n".join(
        [
            "# Calibration of the exported standard errors",
            "",
            f"Made by `{command}`.",
            "",
            *(
                [
                    "Composed channels: every report is the device's memoized report randomized again",
                    "(docs/mechanisms.md, *Instantaneous randomization*), at ε per report; ε per state is",
                    "the memoized report's.",
                    "",
                ]
                if _composed(rows)
                else []
            ),
            "Per row: coverage = share of (collection, key) pairs whose exported 95% interval holds the",
            "truth; ratio = median over keys of (mean exported standard error) / (RMSE of the estimate);",
            "means answered = share of pairs with a finite mean (the rest are *not estimable*: their",
            "holders cannot be told from nobody at 95%). A row passes when coverage lies in",
            f"[{COVERAGE_BAND[0]}, {COVERAGE_BAND[1]}] and the ratio in [{RATIO_BAND[0]}, {RATIO_BAND[1]}]",
            'for frequencies and means; "no stderr" marks an estimator that exports none by design',
            "(docs/mechanisms.md, *Calibration of standard errors*).",
            "",
            f"Populations: {populations}.",
            "",
            f"{len(rows) - len(failing)} of {len(rows)} rows pass.",
            "",
            table(rows),
            "",
            "![coverage against epsilon](coverage.png)" if png else note,
            "",
        ]
    )
    md = out / "README.md"
    write_atomically(md, text.encode("utf-8"), mode=0o644)
    paths.append(md)
    return paths


def _plot(rows: list[CalibrationRow], path: Path) -> tuple[list[Path], str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "Plot: not drawn — matplotlib is missing (install the `plots` extra)."
    # composed channels against their memoized report's epsilon: their per-report epsilons
    # are a share of each mechanism's exact level, not one grid
    composed = _composed(rows)

    def x_of(c: Calibration) -> float:
        return c.state_epsilon if composed and c.state_epsilon is not None else c.epsilon

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, quantity in zip(axes, ("frequency", "mean"), strict=True):
        series: dict[str, list[tuple[float, float]]] = {}
        for row in rows:
            c = row.calibration
            q = c.frequency if quantity == "frequency" else c.mean
            if q is None or q.with_stderr == 0.0 or math.isnan(q.coverage):
                continue
            series.setdefault(f"{c.mechanism}/{c.estimator}", []).append((x_of(c), q.coverage))
        for label, points in series.items():
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", linewidth=0.8, markersize=3, label=label)
        ax.axhspan(*COVERAGE_BAND, color="0.85", zorder=0)
        ax.axhline(0.95, color="0.4", linewidth=0.8, linestyle="--")
        ax.set_xscale("log")
        ticks = sorted({x_of(row.calibration) for row in rows})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("ε per state (memoized report)" if composed else "ε")
        ax.set_title(f"{quantity}: coverage of the 95% interval")
    axes[0].set_ylabel("coverage")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return [path], ""
