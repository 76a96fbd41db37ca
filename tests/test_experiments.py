"""``kvldp evaluate --experiment``: every grid runs quick end to end, and its parts are right.

The quick grids go through the CLI (a subprocess, as a user runs them); their outputs are
read back and checked against the cells they should contain (their speed is
``kvldp bench``'s business, not a test's). The metrics of Zhao et al. 2022 (FHR) and the "beat the paper" arithmetic are
checked on hand-made inputs.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvldp.attacks.results_table import TITLE as ATTACKS_TITLE
from kvldp.experiments import EXPERIMENTS, STUDIES
from kvldp.experiments.metrics import kld, ncr, relative_error, squared_error, top
from kvldp.experiments.report import duels

from support import random_ratings, run_kvldp
from support.package import REPO


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_quick_grid_writes_csv_markdown_and_plots(name: str, tmp_path: Path) -> None:
    out = tmp_path / name
    done = run_kvldp("evaluate", "--experiment", name, "--quick", "--out", str(out), "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    cells = EXPERIMENTS[name].cells(True)
    assert summary["cells"] == len(cells)
    with (out / "results.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(float(r["x"]), r["series"], r["panel"]) for r in rows] == [
        (c.x, c.series, c.panel) for c in cells
    ]
    assert all(math.isfinite(float(r["mse_frequency"])) for r in rows)
    report = (out / "README.md").read_text()
    assert f"--experiment {name} --quick" in report and "## Beat the paper" in report
    pngs = sorted(out.glob("*.png"))
    assert pngs and all(p.stat().st_size > 5_000 for p in pngs)
    assert all(f"]({p.name})" in report for p in pngs)
    if name == "horigome-table4":
        # the paper's numbers beside ours: Table 4, Gaussian, eps = 1: EM 18.076, PrivKV
        # 22.588, PrivKVM 26.213 (x 1e-4)
        for printed, series in ((18.076, "EM (paper)"), (22.588, "PrivKV"), (26.213, "PrivKVM")):
            row = next(r for r in rows if r["series"] == series and float(r["x"]) == 1.0)
            mse = float(row["mse_frequency"])
            assert f"{printed:.4g} / {mse / 1e-4:.4g} ({mse / (printed * 1e-4):.2f})" in report


def test_committed_reports_carry_the_generators_text() -> None:
    """docs/results/*/README.md were written by the generator: its title, source and notes
    appear there verbatim, so a change to one is made to the other (the calibration
    table by ``kvldp evaluate --calibration``, the attack tables by ``kvldp attack``)."""
    reports = sorted((REPO / "docs" / "results").glob("*/README.md"))
    assert len(reports) >= len(EXPERIMENTS)
    for path in reports:
        text = path.read_text()
        if path.parent.name == "calibration":  # kvldp evaluate --calibration's table
            assert text.startswith("# Calibration of the exported standard errors\n"), path
            assert "\nMade by `kvldp evaluate --calibration`.\n" in text, path
            continue
        if path.parent.name == "attacks":  # kvldp attack's table
            assert text.startswith(f"# {ATTACKS_TITLE}\n"), path
            assert "\nMade by `kvldp attack " in text, path
            continue
        if path.parent.name == "calibration-instantaneous":  # ... of the composed channels
            assert text.startswith("# Calibration of the exported standard errors\n"), path
            assert "\nMade by `kvldp evaluate --calibration --instantaneous-share 0.5`.\n" in text, path
            continue
        name = text.split(":", 1)[0].removeprefix("# ")
        experiment = EXPERIMENTS[name] if name in EXPERIMENTS else STUDIES[name]
        assert text.startswith(f"# {experiment.name}: {experiment.title}\n"), path
        assert f"\nSource: {experiment.source}.\n" in text, path
        assert experiment.notes.strip() in text, path


def test_unknown_experiment_is_one_clear_line() -> None:
    done = run_kvldp("evaluate", "--experiment", "nope", timeout=60)
    assert done.returncode == 2
    assert (
        "unknown experiment 'nope' (known: horigome-table4" in done.stderr and "Traceback" not in done.stderr
    )


def test_experiment_flags_are_checked() -> None:
    done = run_kvldp(
        "evaluate", "--experiment", "fhr-zipf", "--mechanism", "grr", "--repeats", "3", timeout=60
    )
    assert done.returncode == 2 and "drop --mechanism, --repeats" in done.stderr
    done = run_kvldp("evaluate", "--mechanism", "grr", "--epsilon", "1", "--keys", "4", "--quick", timeout=60)
    assert done.returncode == 2 and "--quick and --out go with --experiment" in done.stderr


def test_a_ratings_file_replaces_the_grids_populations(tmp_path: Path) -> None:
    from kvldp.experiments.grid import run

    path = tmp_path / "r.csv"
    users = random_ratings(path, users=3000, items=60, share=0.2, seed=2)
    rows = run(
        EXPERIMENTS["sun-conditional"], quick=True, show_progress=False, dataset_override=f"csv:{path}"
    )
    # one panel per key count, the file's users everywhere, no printed numbers
    assert sorted({r["panel"] for r in rows}) == ["r.csv, d=2", "r.csv, d=4"]
    assert {r["users"] for r in rows} == {users} and all(r["paper_mse_frequency"] is None for r in rows)
    rows = run(
        EXPERIMENTS["horigome-table4"], quick=True, show_progress=False, dataset_override=f"csv:{path}"
    )
    assert not any(r["series"].startswith("advise") for r in rows)
    with pytest.raises(ValueError, match="varies the number of users"):
        run(EXPERIMENTS["horigome-table5"], quick=True, show_progress=False, dataset_override=f"csv:{path}")


def test_topk_metrics_on_hand_made_estimates() -> None:
    true = np.array([0.4, 0.3, 0.2, 0.1])
    assert list(top(np.array([0.1, 0.3, 0.3, np.nan]), 3)) == [1, 2, 0]  # ties by index, NaN last
    assert kld(true, true, 3) == pytest.approx(0.0, abs=1e-15)
    assert ncr(true, true, 3) == 1.0
    swapped = np.array([0.3, 0.4, 0.2, 0.1])
    assert ncr(true, swapped, 2) == 1.0  # the same top-2 set, whatever the order
    assert ncr(true, np.array([0.0, 0.0, 0.5, 0.4]), 2) == pytest.approx(0.0)
    assert ncr(true, np.array([0.0, 0.5, 0.0, 0.4]), 2) == pytest.approx(
        1 / 3
    )  # item 2 of rank 2 scores 1 of 3
    est = np.array([0.5, 0.3, 0.0, 0.2])
    assert relative_error(true, est, 3) == pytest.approx(0.25)  # median of 0.25, 0, 1
    assert squared_error(true, est, 2) == pytest.approx(0.005)  # shared top-2 {0, 1}: (0.01 + 0) / 2
    # symmetric KL over the top 2 after renormalising: real (4/7, 3/7), est (5/8, 3/8)
    real, guess = np.array([4 / 7, 3 / 7]), np.array([5 / 8, 3 / 8])
    expected = 0.5 * (np.sum(real * np.log(real / guess)) + np.sum(guess * np.log(guess / real)))
    assert kld(true, est, 2) == pytest.approx(expected)


def test_beat_the_paper_compares_best_with_best() -> None:
    def row(series: str, role: str, mse: float, printed: float | None = None) -> dict[str, object]:
        return {
            "panel": "P",
            "x": 1.0,
            "series": series,
            "role": role,
            "mse_frequency": mse,
            "paper_mse_frequency": printed,
        }

    rows = [
        row("A", "paper", 2.0, 1.5),
        row("B", "paper", 1.0, 2.5),
        row("C", "kvldp", 0.8),
        row("D", "kvldp", math.nan),
    ]
    (d,) = duels(rows, "mse_frequency")
    assert (d.paper_series, d.paper_reproduced, d.paper_printed, d.kvldp_series) == ("B", 1.0, 1.5, "C")
    assert d.gain_vs_reproduced == pytest.approx(0.2)
    assert d.gain_vs_printed == pytest.approx(1 - 0.8 / 1.5)


def _study_rows(name: str, out: Path) -> list[dict[str, str]]:
    """Run a study's quick variant through the CLI and read back its CSV."""
    done = run_kvldp("evaluate", "--experiment", name, "--quick", "--out", str(out), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    with (out / "results.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert summary["rows"] == len(rows) > 0
    report = (out / "README.md").read_text()
    assert report.startswith(f"# {name}: {STUDIES[name].title}\n")
    assert f"Made by `kvldp evaluate --experiment {name} --quick`" in report
    pngs = sorted(out.glob("*.png"))
    assert pngs and all(p.stat().st_size > 5_000 and f"]({p.name})" in report for p in pngs)
    return rows


@pytest.mark.slow
def test_instantaneous_price_quick(tmp_path: Path) -> None:
    """With the option the composed channel's predicted MSE is at least the memoized
    report's (a randomizer only adds noise), and the simulated frequency MSE agrees with the
    predicted one: averaged over d keys and R collections its relative Monte Carlo standard
    error is about sqrt(2 / (R d)); 4 of them are allowed."""
    rows = _study_rows("instantaneous-price", tmp_path / "price")
    assert {r["mechanism"] for r in rows} >= {"grr", "oue", "kvue", "pckv_ue"}
    for r in rows:
        what = f"{r['mechanism']} at ε∞ {r['epsilon_state']}, ε_I {r['epsilon_report']}"
        assert float(r["price_frequency"]) >= 1.0, what
        if r["price_mean"]:
            assert float(r["price_mean"]) >= 1.0, what
        tolerance = 4 * math.sqrt(2 / (int(r["repeats"]) * int(r["keys"])))
        for side in ("with", "without"):
            ratio = float(r[f"simulated_mse_frequency_{side}"]) / float(r[f"predicted_mse_frequency_{side}"])
            assert abs(ratio - 1) <= tolerance, f"{what} {side}: simulated / predicted {ratio:.3f}"


@pytest.mark.slow
def test_instantaneous_change_quick(tmp_path: Path) -> None:
    """Without the option a change shows as a new payload unless equal by chance; with it,
    at ε_I = 1 and one send either side, the oracle detects far fewer changes, within the
    bound every test obeys; every test holds its false-positive rate. Tolerances: 4
    binomial standard errors over the devices (the threshold's own noise adds about as much
    again, hence twice that)."""
    rows = _study_rows("instantaneous-change", tmp_path / "change")
    for name in {r["mechanism"] for r in rows}:
        mine = [r for r in rows if r["mechanism"] == name]
        (without,) = [r for r in mine if r["observer"] == "without option"]
        assert float(without["detection"]) == pytest.approx(1 - float(without["equal_payloads"]))
        for r in mine:
            if r["observer"] == "without option":
                continue
            n = int(r["devices"])
            fp, found, bound = float(r["false_positive"]), float(r["detection"]), float(r["bound"])
            assert abs(fp - 0.05) <= 2 * 4 * math.sqrt(0.05 * 0.95 / n), f"{name}: false positives {fp}"
            assert found <= bound + 2 * 4 * math.sqrt(bound * (1 - bound) / n + 1e-6), (
                f"{name}: above the bound"
            )
        (oracle,) = [
            r
            for r in mine
            if r["observer"] == "oracle" and float(r["epsilon_report"]) == 1.0 and r["sends"] == "1"
        ]
        n = int(oracle["devices"])
        gap = 4 * math.sqrt(0.25 / n)
        assert float(oracle["detection"]) < float(without["detection"]) / 2 - gap, name
