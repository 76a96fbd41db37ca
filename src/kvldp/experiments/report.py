"""The Markdown report of an experiment: the paper's layout, printed numbers beside ours.

One table per panel and metric: rows are the x values (epsilon or n), columns the
series. A cell reads ``kvldp`` alone, or ``printed / kvldp (ratio)`` where the paper
printed a number (ratio = kvldp / printed), plus ``theory`` columns where the grid
asked for the analytic prediction. "Beat the papers" compares, per setting, the best
kvldp series with the paper's best mechanism — against the printed number where there
is one, and always against kvldp's own run of the paper's mechanisms.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvldp.common.typed_fields import is_number
from kvldp.experiments.model import PRINTED, THEORY, Experiment, Metric, Row

GOAL = 0.10  # kvldp's target: at least 10% lower MSE than the paper's best


@dataclass(frozen=True)
class Duel:
    """kvldp's best series against the paper's best at one point of a panel, for one metric."""

    panel: str
    x: float
    metric: str
    paper_series: str
    paper_reproduced: float
    paper_printed: float | None
    kvldp_series: str
    kvldp: float

    @property
    def gain_vs_reproduced(self) -> float:
        return 1.0 - self.kvldp / self.paper_reproduced

    @property
    def gain_vs_printed(self) -> float | None:
        return None if self.paper_printed is None else 1.0 - self.kvldp / self.paper_printed


def duels(rows: list[Row], metric: str) -> list[Duel]:
    """Best kvldp series vs the paper's best mechanism, per (panel, x), on ``metric``."""
    printed_col = PRINTED.get(metric)
    out: list[Duel] = []
    for panel, x in dict.fromkeys((r["panel"], r["x"]) for r in rows):
        here = [r for r in rows if r["panel"] == panel and r["x"] == x and is_number(r.get(metric))]
        paper = [r for r in here if r["role"] == "paper"]
        ours = [r for r in here if r["role"] == "kvldp"]
        if not paper or not ours:
            continue
        best_paper = min(paper, key=lambda r: r[metric])
        printed = [r[printed_col] for r in paper if printed_col and is_number(r.get(printed_col))]
        best_ours = min(ours, key=lambda r: r[metric])
        out.append(
            Duel(
                panel=panel,
                x=x,
                metric=metric,
                paper_series=best_paper["series"],
                paper_reproduced=best_paper[metric],
                paper_printed=min(printed) if printed else None,
                kvldp_series=best_ours["series"],
                kvldp=best_ours[metric],
            )
        )
    return out


def fmt(value: Any, scale: float = 1.0) -> str:
    if not is_number(value):
        return "—"
    v = value / scale
    return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.3e}"


def x_text(x: float, x_name: str) -> str:
    return f"{x:g}" if x_name == "epsilon" else f"{int(x):,}"


def _table(experiment: Experiment, rows: list[Row], panel: str, metric: Metric) -> list[str]:
    mine = [r for r in rows if r["panel"] == panel]
    series = list(dict.fromkeys(r["series"] for r in mine))
    printed_col = PRINTED.get(metric.column)
    theory_col = THEORY.get(metric.column)
    with_theory = [
        s
        for s in series
        if theory_col and any(is_number(r.get(theory_col)) for r in mine if r["series"] == s)
    ]
    head = [experiment.x_name] + series + [f"{s} (theory)" for s in with_theory]
    lines = [f"**{panel} — {metric.label}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for x in dict.fromkeys(r["x"] for r in mine):
        cells = [x_text(x, experiment.x_name)]
        by_series = {r["series"]: r for r in mine if r["x"] == x}
        for s in series:
            r = by_series.get(s)
            if r is None:
                cells.append("")
                continue
            ours = r.get(metric.column)
            printed = r.get(printed_col) if printed_col else None
            if (
                isinstance(printed, float)
                and isinstance(ours, float)
                and is_number(printed)
                and is_number(ours)
            ):
                cells.append(
                    f"{fmt(printed, metric.scale)} / {fmt(ours, metric.scale)} ({ours / printed:.2f})"
                )
            else:
                cells.append(fmt(ours, metric.scale))
        for s in with_theory:
            r = by_series.get(s)
            cells.append(fmt(r.get(theory_col), metric.scale) if r and theory_col else "")
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def duel_table(found: list[Duel], x_name: str, printed_is_reference: bool = True) -> list[str]:
    if not found:
        return []
    lines = [
        f"| panel | {x_name} | metric | paper's best (kvldp run) | printed | kvldp's best | gain vs run | gain vs printed | ≥10% |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in found:
        printed_gain = d.gain_vs_printed
        reference = (
            printed_gain if printed_gain is not None and printed_is_reference else d.gain_vs_reproduced
        )
        lines.append(
            f"| {d.panel} | {x_text(d.x, x_name)} | {d.metric} | {d.paper_series}: {fmt(d.paper_reproduced)} "
            f"| {fmt(d.paper_printed)} | {d.kvldp_series}: {fmt(d.kvldp)} | {d.gain_vs_reproduced:+.0%} "
            f"| {'—' if printed_gain is None else f'{printed_gain:+.0%}'} | {'yes' if reference >= GOAL else '**no**'} |"
        )
    return [*lines, ""]


def markdown(experiment: Experiment, rows: list[Row], command: str, pngs: list[str], plot_note: str) -> str:
    out = [f"# {experiment.name}: {experiment.title}", "", f"Source: {experiment.source}.", ""]
    out += [f"Made by `{command}`.", ""]
    if experiment.notes:
        out += [experiment.notes.strip(), ""]
    files = sorted({r["dataset"] for r in rows if str(r["dataset"]).startswith("csv:")})
    if files:
        out += [
            f"Population replaced by the ratings file `{Path(files[0][4:]).name}`: all its users, its "
            "most-rated items as the keys, ratings scaled linearly into [-1, 1] from the file's range. "
            "The grid's settings (ε, mechanisms) are the experiment's; its synthetic data, the "
            "`advise` series (picked for the synthetic populations) and the paper's printed numbers "
            "do not apply.",
            "",
        ]
    repeats = sorted({r["repeats"] for r in rows})
    users = sorted({r["users"] for r in rows})
    out += [
        f"{len(rows)} cells; repeats per cell: {', '.join(map(str, repeats))}; users: "
        f"{', '.join(f'{u:,}' for u in users)}. `printed / kvldp (ratio)` where the paper printed a number.",
        "",
    ]
    for panel in dict.fromkeys(r["panel"] for r in rows):
        for metric in experiment.metrics:
            if any(is_number(r.get(metric.column)) for r in rows if r["panel"] == panel):
                out += _table(experiment, rows, panel, metric)
    found = [d for m in experiment.duel_metrics for d in duels(rows, m)]
    if found:
        basis = (
            "against the printed number where there is one, else against kvldp's run of the paper's mechanisms"
            if experiment.printed_is_reference
            else "against kvldp's run of the paper's mechanisms (the printed numbers are not reproducible)"
        )
        out += [
            "## Beat the paper",
            "",
            f"kvldp's best series against the paper's best mechanism per setting; the ≥10% verdict is {basis}.",
            "",
            *duel_table(found, experiment.x_name, experiment.printed_is_reference),
        ]
    claims = experiment.claims(rows)
    if claims:
        out += ["## The paper's claims, checked", ""]
        for c in claims:
            verdict = {True: "holds", False: "**does not hold**", None: "not checked"}[c.holds]
            out.append(f"- {c.text} — {verdict}: {c.evidence}")
        out.append("")
    if pngs:
        out += ["## Plots", "", *[f"![{p}]({p})" for p in pngs], ""]
    if plot_note:
        out += [plot_note, ""]
    return "\n".join(out)
