"""The results of ``kvldp attack``: a text table, and with ``--out`` results.csv, a README
with the Markdown table and a plot of the frequency gain against beta per attack and
defense (matplotlib is the optional ``plots`` extra; without it the README says so). The
plot leaves out a detecting defense when others ran: its estimates are another's."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kvldp.attacks.experiment import Row
from kvldp.common.files.atomic_file import write_atomically, write_csv

#: the first line of every results README the command writes
TITLE = "Fake devices against the key-value mechanisms"

COLUMNS = (
    "mechanism", "epsilon", "attack", "beta", "defense", "estimator", "repeats", "fakes",
    "frequency_gain", "frequency_gain_se", "mean_gain", "mean_gain_se", "target_frequency",
    "target_mean", "mse_frequency", "mse_frequency_clean", "mse_mean", "fakes_dropped",
    "genuine_dropped", "alarm_with_fakes", "alarm_without_fakes", "targets_flagged", "score_with_fakes",
)  # fmt: skip


def record(row: Row) -> dict[str, Any]:
    """The row as CSV/JSON fields (NaN as None)."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.values.items()}


def _num(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def _pm(value: Any, se: Any) -> str:
    return (
        _num(value) if se is None or (isinstance(se, float) and math.isnan(se)) else f"{value:.3f} ± {se:.3f}"
    )


def _alarm(r: dict[str, Any]) -> str:
    if r["alarm_with_fakes"] is None:
        return "—"
    return f"{r['alarm_with_fakes']:.2f} ({r['alarm_without_fakes']:.2f})"


def table(rows: list[Row]) -> str:
    """Markdown table: gains (mean ± standard error over the repeats), the targets'
    estimates with fakes, MSE over all keys with fakes (and without), the share of fakes
    the defense dropped, and when a detecting defense ran, its alarm rate with fakes
    (without fakes) and the share of the targets flagged."""
    recs = [record(row) for row in rows]
    detects = any(r["alarm_with_fakes"] is not None for r in recs)
    head = "| mechanism | attack | β | defense | estimator | G_f | G_m | target f | target m "
    head += "| MSE f (clean) | MSE m | fakes dropped |"
    rule = "|---|---|---|---|---|---|---|---|---|---|---|---|"
    if detects:
        head += " alarm (clean) | targets flagged |"
        rule += "---|---|"
    lines = [head, rule]
    for r in recs:
        line = (
            f"| {r['mechanism']} | {r['attack']} | {r['beta']:g} | {r['defense']} | {r['estimator']} "
            f"| {_pm(r['frequency_gain'], r['frequency_gain_se'])} | {_pm(r['mean_gain'], r['mean_gain_se'])} "
            f"| {_num(r['target_frequency'])} | {_num(r['target_mean'])} "
            f"| {_num(r['mse_frequency'], 4)} ({_num(r['mse_frequency_clean'], 4)}) | {_num(r['mse_mean'], 4)} "
            f"| {_num(r['fakes_dropped'])} |"
        )
        if detects:
            line += f" {_alarm(r)} | {_num(r['targets_flagged'], 2)} |"
        lines.append(line)
    return "\n".join(lines)


def _plot(rows: list[Row], path: Path) -> tuple[list[Path], str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        return [], "Plot: not drawn — matplotlib is missing (install the `plots` extra)."
    recs = [record(r) for r in rows]
    # a detecting defense changes no estimate: its panels would repeat another's
    estimating = [r for r in recs if r["alarm_with_fakes"] is None]
    recs = estimating or recs
    # one colour per mechanism/estimator across every panel, so one legend serves them all
    palette = plt.get_cmap("tab20")
    series_all = list(dict.fromkeys((r["mechanism"], r["estimator"]) for r in recs))
    colour = {k: palette(i % palette.N) for i, k in enumerate(series_all)}
    attacks = list(dict.fromkeys(r["attack"] for r in recs))
    defenses = list(dict.fromkeys(r["defense"] for r in recs))
    fig, axes = plt.subplots(
        len(defenses), len(attacks), figsize=(3.6 * len(attacks), 2.9 * len(defenses)), squeeze=False
    )
    for i, defense in enumerate(defenses):
        for j, attack in enumerate(attacks):
            ax = axes[i][j]
            mine = [r for r in recs if r["attack"] == attack and r["defense"] == defense]
            for series in dict.fromkeys((r["mechanism"], r["estimator"]) for r in mine):
                pts = sorted(
                    (r["beta"], r["frequency_gain"])
                    for r in mine
                    if (r["mechanism"], r["estimator"]) == series and r["frequency_gain"] is not None
                )
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        marker="o",
                        ms=3,
                        color=colour[series],
                        label=f"{series[0]}/{series[1]}",
                    )
            ax.set_title(f"{attack}, defense {defense}", fontsize=9)
            ax.set_xlabel("β (fake fraction)")
            ax.set_ylabel("frequency gain G_f")
            ax.grid(True, alpha=0.25)
    handles = [Line2D([], [], color=colour[k], marker="o", ms=3) for k in series_all]
    axes[0][0].legend(handles, [f"{m}/{e}" for m, e in series_all], fontsize=5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path], f"![frequency gain against β]({path.name})"


def write(rows: list[Row], out: Path, command: str, setting: str) -> list[Path]:
    """Write results.csv, README.md and (with matplotlib) gains.png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "results.csv"
    write_csv(csv_path, COLUMNS, (record(row) for row in rows))
    png, note = _plot(rows, out / "gains.png")
    detection = (
        [
            "Alarm: share of the repeats in which the `detection`",
            "defense's poisoning score of the `all` window reached the alert threshold, with fakes",
            "(without them in parentheses: the false alarms of this population); targets flagged:",
            "share of the target keys whose own score reached it, with fakes. The in-process",
            "population is poisoned from its first report, so the time-jump test (which needs a",
            "newest window to compare with the rest) is not run; see docs/detection.md for an attack",
            "that starts mid-collection.",
        ]
        if any(record(r)["alarm_with_fakes"] is not None for r in rows)
        else []
    )
    text = "\n".join(
        [
            f"# {TITLE}",
            "",
            f"Made by `{command}`.",
            "",
            setting,
            "",
            "G_f and G_m: sum over the target keys of the estimate with fakes minus the estimate",
            "without them, on the same genuine reports (mean ± standard error over the repeats; an",
            "undefined mean counts as 0). Target f and m: the targets' average estimates with fakes.",
            "MSE over all keys with fakes (without fakes in parentheses). Fakes dropped: share of the",
            "fake reports the defense refused.",
            *detection,
            "See docs/attacks.md for what each attack sends.",
            "",
            table(rows),
            "",
            note,
            "",
        ]
    )
    readme = out / "README.md"
    write_atomically(readme, text.encode("utf-8"), mode=0o644)
    return [csv_path, readme, *png]
