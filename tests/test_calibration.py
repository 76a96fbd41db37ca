"""Every mechanism × estimator's exported error bars are calibrated (docs/mechanisms.md,
*Calibration of standard errors*), checked at a reduced size on its reference population.

For each registered pair, R = 30 collections of 20,000 devices over 20 keys at ε = 2 (8
keys, as in the reference table, at ε = 4 for the small-domain joint-state mechanisms,
whose means are otherwise too rarely estimable in every collection to measure a ratio): the coverage of the exported 95% intervals
must be consistent with [0.93, 0.97], i.e. inside that band widened by 4 Monte Carlo
standard errors of a proportion over the pairs counted (sqrt(0.95 · 0.05 / pairs)); the
median stderr/RMSE must be consistent with [0.85, 1.15], widened by 4 of its Monte Carlo
standard errors (a key's RMSE over R collections has relative sd 1/sqrt(2R), the median of
k keys about 1.25/sqrt(k) of that). A quantity that exports no standard error must be one
documented so (:func:`without_stderr`) and then export none for any key; a pair with no
standard error at all is checked on two collections only. A mean is either finite or
counted as not estimable, never silently missing.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from kvldp.common.mechanisms import create, get, names
from kvldp.evaluation.calibration import Calibration, QuantityCalibration, calibrate, reference_population
from kvldp.experiments.calibration_report import CalibrationRow
from kvldp.experiments.calibration_verdict import Verdict, tolerances, verdict, verdict_table
from kvldp.sim import datasets

from support import run_kvldp

EPSILON = 2.0
USERS = 20_000
REPEATS = 30
KEYS, SMALL_KEYS = 20, 8
SMALL_EPSILON = 4.0

PAIRS = [(name, est) for name in names() for est in create(name, 4, 1.0).estimator_names]
#: Algorithm 4 prints a mean for every key, also where there is no information: those
#: means carry no standard error (counted in ``means_without_information``)
PARTIAL_MEAN_STDERR = {("pckv_grr", "paper"), ("pckv_ue", "paper")}


def _population(name: str) -> tuple[str, int, float]:
    """(dataset, keys, ε) of a mechanism's reduced reference setting."""
    cls = get(name)
    dataset, _ = reference_population(name, cls.max_keys, cls.collects_values)
    if cls.max_keys is None or cls.max_keys >= KEYS:
        return dataset, KEYS, EPSILON
    return dataset, SMALL_KEYS, SMALL_EPSILON


def without_stderr(name: str, estimator: str) -> set[str]:
    """The quantities a pair exports without a standard error, by design (docs/mechanisms.md,
    *Calibration of standard errors*): empirical Bayes' shrunk estimates, IOH's projected
    cells, PrivKV's biased `paper` mean and `em4`'s unidentified mean."""
    if estimator == "eb" or (name in ("ioh", "ioh_oue") and estimator == "normsub"):
        return {"frequency", "mean"}
    if (name, estimator) in (("privkv", "paper"), ("privkv", "em4")):
        return {"mean"}
    return set()


def check(q: QuantityCalibration, keys: int, what: str, partial: bool = False) -> None:
    assert q.with_stderr > 0.0, f"{what}: no standard error exported"
    assert partial or q.with_stderr == 1.0, (
        f"{what}: a standard error on only {q.with_stderr:.0%} of the answers"
    )
    tol_c, tol_r = tolerances(q, REPEATS, keys)  # 4 Monte Carlo standard errors of each
    assert 0.93 - tol_c <= q.coverage <= 0.97 + tol_c, f"{what}: coverage {q.coverage:.3f} ± {tol_c:.3f}"
    assert 0.85 - tol_r <= q.ratio <= 1.15 + tol_r, f"{what}: stderr/RMSE {q.ratio:.3f} ± {tol_r:.3f}"


@pytest.mark.parametrize(("name", "estimator"), PAIRS)
def test_error_bars_are_calibrated(name: str, estimator: str) -> None:
    dataset, keys, epsilon = _population(name)
    users = datasets.generate(dataset, USERS, keys, 5).users
    mech = create(name, keys, epsilon)
    quantities = {"frequency", "mean"} if mech.collects_values else {"frequency"}
    designed = without_stderr(name, estimator)
    # a pair without any standard error has nothing to calibrate: two collections show it
    result = calibrate(mech, estimator, users, 2 if quantities <= designed else REPEATS, 17)
    for quantity, q in (("frequency", result.frequency), ("mean", result.mean)):
        what = f"{name}/{estimator} {quantity}"
        assert (q is not None) == (quantity in quantities), f"{what}: calibrated only if estimated"
        if q is None:
            continue
        if quantity in designed:
            assert not q.with_stderr > 0.0, f"{what}: a standard error where none is documented"
        else:
            check(q, keys, what, quantity == "mean" and (name, estimator) in PARTIAL_MEAN_STDERR)


#: one composed channel per kind of randomized output: a symbol (GRR), bits (OUE), PCKV-UE's
#: ternary coordinates, and a composed transition M P (PrivKV), at half the device's level
COMPOSED = ("grr", "oue", "pckv_ue", "privkv")
SHARE = 0.5


@pytest.mark.parametrize("name", COMPOSED)
def test_composed_channels_error_bars_are_calibrated(name: str) -> None:
    """Instantaneous randomization: the reports are the device's randomized again, and the
    composed channel's `unbiased` error bars are calibrated like a mechanism's own, with the
    same tolerances."""
    dataset, keys, epsilon = _population(name)
    users = datasets.generate(dataset, USERS, keys, 5).users
    device = create(name, keys, epsilon)
    mech = device.composed(SHARE * device.claimed_epsilon())
    result = calibrate(mech, "unbiased", users, REPEATS, 17)
    assert result.state_epsilon == epsilon and result.epsilon == pytest.approx(
        SHARE * device.claimed_epsilon()
    )
    check(result.frequency, keys, f"{name} composed frequency")
    if mech.collects_values:
        assert result.mean is not None
        check(result.mean, keys, f"{name} composed mean")


@pytest.mark.parametrize(("name", "estimator"), [p for p in PAIRS if get(p[0]).collects_values])
def test_every_key_with_reports_gets_a_mean_or_is_counted_not_estimable(name: str, estimator: str) -> None:
    """At ε = 0.5 many keys' holders are too few to estimate their mean: each such key is
    NaN and counted in ``not_estimable_means``; every other key with reports has a finite
    mean."""
    dataset, keys, _ = _population(name)
    users = datasets.generate(dataset, 5_000, keys, 5).users
    mech = create(name, keys, 0.5)
    est = mech.estimate(mech.collect(users, np.random.default_rng(3)), estimator)
    missing = int(np.sum(np.isnan(est.mean)))
    without_reports = int(est.diagnostics.get("keys_without_reports", 0))
    assert missing == int(est.diagnostics["not_estimable_means"]) + without_reports


def test_calibration_command_prints_json_and_writes_its_table(tmp_path: Path) -> None:
    """``kvldp evaluate --calibration`` for chosen mechanisms, estimators and ε: one JSON row
    per setting, and with --out the CSV, the Markdown table and the plot."""
    done = run_kvldp(
        "evaluate", "--calibration", "--mechanism", "kvue", "--estimator", "unbiased", "--estimator", "eb",
        "--epsilon", "2", "--users", "5000", "--keys", "6", "--repeats", "4", "--json", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["mechanism"], r["estimator"], r["epsilon"]) for r in rows] == [
        ("kvue", "unbiased", 2.0),
        ("kvue", "eb", 2.0),
    ]
    assert rows[1]["mean_with_stderr"] == 0.0 and rows[0]["mean_with_stderr"] == 1.0
    assert all(0.0 <= r["frequency_coverage"] <= 1.0 for r in rows)
    out = tmp_path / "cal"
    done = run_kvldp(
        "evaluate", "--calibration", "--mechanism", "grr", "--epsilon", "1", "--users", "5000",
        "--keys", "6", "--repeats", "3", "--out", str(out), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].split() == [
        "mechanism",
        "estimator",
        "epsilon",
        "f",
        "coverage",
        "f",
        "ratio",
        "m",
        "coverage",
        "m",
        "ratio",
        "verdict",
    ]
    assert [line.split()[:3] for line in lines[1:4]] == [
        ["grr", e, "1"] for e in ("unbiased", "em", "normsub")
    ]
    assert re.fullmatch(
        r"\d of 3 settings pass \(\d of them within Monte Carlo noise of the bands\), \d miss", lines[-1]
    )
    assert done.stderr.strip().splitlines() == [
        f"wrote {out / name}" for name in ("results.csv", "coverage.png", "README.md")
    ]
    with (out / "results.csv").open(newline="") as fh:
        assert [r["estimator"] for r in csv.DictReader(fh)] == ["unbiased", "em", "normsub"]
    report = (out / "README.md").read_text()
    assert "Made by `kvldp evaluate --calibration --mechanism grr --epsilon 1.0`" in report
    assert report.count("| grr |") == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--calibration", "--mechanism", "nope"], "unknown mechanism 'nope'"),
        (["--calibration", "--mechanism", "grr", "--estimator", "eb"], "grr has no estimator 'eb'"),
        (["--calibration", "--experiment", "sun-fig1"], "--calibration goes without --experiment"),
        (
            ["--mechanism", "grr", "--mechanism", "oue", "--epsilon", "1", "--keys", "4"],
            "only with --calibration",
        ),
        (["--calibration", "--repeats", "1", "--mechanism", "grr"], "at least 2 collections"),
        (
            ["--calibration", "--mechanism", "grr", "--instantaneous-share", "1"],
            "--instantaneous-share must lie below 1, got 1",
        ),
        (
            ["--calibration", "--mechanism", "oue", "--instantaneous-share", "2.5"],
            "--instantaneous-share must lie below 1, got 2.5",
        ),
        (
            ["--experiment", "sun-fig1", "--instantaneous-share", "0.5"],
            "--instantaneous-share goes with --calibration",
        ),
    ],
)
def test_calibration_command_refuses_bad_flags_in_one_line(args: list[str], message: str) -> None:
    done = run_kvldp("evaluate", *args, timeout=60)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _row(mechanism: str, f: tuple[float, float], m: tuple[float, float, float] | None) -> CalibrationRow:
    """A calibrated setting of 24 collections over 50 keys with these (coverage, ratio) for
    frequencies and (coverage, ratio, answered share) for means."""
    freq = QuantityCalibration(f[0], f[1], 1.0, 1.0, 24 * 50)
    mean = None if m is None else QuantityCalibration(m[0], m[1], m[2], 1.0, 24 * 50)
    return CalibrationRow(Calibration(mechanism, "unbiased", 1.0, 24, freq, mean), "gaussian", 100_000, 50)


def test_a_verdict_tells_a_pass_from_noise_and_a_miss_and_gives_the_reason() -> None:
    # tolerances at 24 collections x 50 keys: coverage 4 * sqrt(0.95 * 0.05 / 1200) = 0.0252
    # (fewer pairs answered: more), ratio 4 * 1.25 / sqrt(2 * 24 * 50) = 0.1021
    assert verdict(_row("kvue", (0.95, 1.0), (0.94, 0.9, 1.0))) == Verdict("pass", "")
    near = verdict(_row("kvue", (0.95, 1.0), (0.94, 1.156, 1.0)))
    assert near.kind == "noise" and "mean ratio 1.156 is 0.006 above [0.85, 1.15]" in near.detail
    assert "(Monte Carlo tolerance 0.102)" in near.detail
    far = verdict(_row("kvue", (0.95, 1.0), (0.94, 1.30, 1.0)))
    assert far.kind == "miss" and far.detail.endswith("(not a known limitation)")
    assert "mean ratio 1.300 is 0.150 above" in far.detail
    few = verdict(_row("pckv_grr", (0.95, 1.0), (0.77, 1.0, 0.05)))
    assert few.kind == "miss" and "only 5% of the keys' means are estimable" in few.detail
    # 60 pairs answered: the coverage tolerance is 4 * sqrt(0.95 * 0.05 / 60) = 0.113
    assert verdict(_row("kvue", (0.95, 1.0), (0.86, 1.0, 0.05))).kind == "noise"
    shared = verdict(_row("ioh", (0.90, 0.95), None))
    assert shared.kind == "miss" and "the keys err together" in shared.detail
    table = verdict_table([_row("kvue", (0.95, 1.0), None), _row("ioh", (0.90, 0.95), None)])
    assert (
        table.splitlines()[-1]
        == "1 of 2 settings pass (0 of them within Monte Carlo noise of the bands), 1 miss"
    )
    assert "ioh unbiased epsilon 1: MISS: frequency coverage 0.900 is 0.030 below [0.93, 0.97]" in table
