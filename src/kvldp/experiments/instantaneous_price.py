"""instantaneous-price: what instantaneous randomization costs in accuracy.

A collection memoizes each device's report at eps_inf (the collection's epsilon, per
state). With ``[privacy] instantaneous_epsilon = eps1`` every send is randomized again and
the server estimates with the composed channel (``Mechanism.composed(eps1)``); without
it, with the mechanism at eps_inf. Per mechanism (its ``unbiased`` estimator), eps_inf
and eps1, the MSE of frequencies and means with and without the option on the same
population: predicted (the estimators' analytic variances plus bias at the expected
statistics, :func:`kvldp.evaluation.prediction.predict`) and simulated (repeated
collections, :func:`kvldp.evaluation.scoring.evaluate`); and, for reference, the
mechanism at epsilon = eps1 without memoization (fresh reports at the same per-report
level). docs/privacy.md, *The price of hiding change times*, reads the table.
"""

from __future__ import annotations

from pathlib import Path

from kvldp.common.mechanisms import create, get
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.spec.params import InvalidParameter
from kvldp.evaluation.calibration import reference_population
from kvldp.evaluation.prediction import predict
from kvldp.evaluation.scoring import evaluate
from kvldp.experiments.model import Row
from kvldp.experiments.study import NO_PLOTS, Study, pyplot, saved_plot
from kvldp.progress import Progress
from kvldp.sim import datasets

#: one per kind of randomized output: symbols (GRR, OLH), bits (OUE), a key-sampled
#: symbol (KVUE), a composed transition (PrivKV), ternary coordinates (PCKV-UE)
MECHANISMS = ("grr", "olh", "oue", "kvue", "privkv", "pckv_ue")
STATE_EPSILONS = (4.0, 8.0)
REPORT_EPSILONS = (1.0, 2.0, 4.0)
KEYS = 50
ESTIMATOR = "unbiased"


def _settings(quick: bool) -> tuple[int, int, tuple[float, ...], tuple[float, ...]]:
    """(users, repeats, eps_inf values, eps1 values) of the full or quick run."""
    if quick:
        return 20_000, 3, (8.0,), (1.0, 4.0)
    return 100_000, 20, STATE_EPSILONS, REPORT_EPSILONS


def _mse(
    mech: Mechanism, data: datasets.Dataset, repeats: int, seed: int
) -> tuple[float, float, float, float]:
    """(predicted f, predicted mean, simulated f, simulated mean) MSE of the estimator."""
    predicted = predict(mech, data.users, ESTIMATOR).average()
    simulated = evaluate(mech, ESTIMATOR, data, repeats, seed, False)
    mean_p = predicted[1] if mech.collects_values else float("nan")
    mean_s = float(simulated["mse_mean"]) if mech.collects_values else float("nan")
    return predicted[0], mean_p, float(simulated["mse_frequency"]), mean_s


def run(quick: bool, seed: int = 0, show_progress: bool = True) -> list[Row]:
    """One row per mechanism x eps_inf x eps1 below the mechanism's exact per-report level."""
    users, repeats, state_epsilons, report_epsilons = _settings(quick)
    rows: list[Row] = []
    with Progress(len(MECHANISMS) * len(state_epsilons), "instantaneous-price") as bar:
        bar.enabled = bar.enabled and show_progress
        for name in MECHANISMS:
            cls = get(name)
            dataset, _ = reference_population(name, cls.max_keys, cls.collects_values)
            data = datasets.generate(dataset, users, KEYS, 0)
            for eps_inf in state_epsilons:
                device = create(name, KEYS, eps_inf)
                without = _mse(device, data, repeats, seed)
                for eps1 in report_epsilons:
                    if not eps1 < eps_inf:  # a collection refuses eps1 not below its epsilon
                        continue
                    try:
                        composed = device.composed(eps1)
                    except InvalidParameter:  # eps1 at or above the exact per-report level
                        continue
                    randomizer = composed.composition.randomizer if composed.composition else None
                    with_option = _mse(composed, data, repeats, seed + 1)
                    fresh = predict(create(name, KEYS, eps1), data.users, ESTIMATOR).average()
                    rows.append(
                        {
                            "mechanism": name,
                            "estimator": ESTIMATOR,
                            "dataset": dataset,
                            "users": data.users.n_users,
                            "keys": KEYS,
                            "repeats": repeats,
                            "epsilon_state": eps_inf,
                            "epsilon_report": eps1,
                            "contrast": randomizer.contrast if randomizer else None,
                            "epsilon_on_output": randomizer.epsilon_on_output if randomizer else None,
                            "predicted_mse_frequency_without": without[0],
                            "predicted_mse_frequency_with": with_option[0],
                            "simulated_mse_frequency_without": without[2],
                            "simulated_mse_frequency_with": with_option[2],
                            "predicted_mse_mean_without": without[1],
                            "predicted_mse_mean_with": with_option[1],
                            "simulated_mse_mean_without": without[3],
                            "simulated_mse_mean_with": with_option[3],
                            "price_frequency": with_option[0] / without[0],
                            "price_mean": with_option[1] / without[1],
                            "simulated_price_frequency": with_option[2] / without[2],
                            "simulated_price_mean": with_option[3] / without[3],
                            "fresh_mse_frequency": fresh[0],
                            "fresh_mse_mean": fresh[1] if device.collects_values else float("nan"),
                            "versus_fresh_frequency": with_option[0] / fresh[0],
                            "versus_fresh_mean": with_option[1] / fresh[1],
                        }
                    )
                bar.advance()
    return rows


def _fmt(value: object) -> str:
    if not isinstance(value, float) or value != value:
        return "—"
    return f"{value:.3g}" if abs(value) >= 1e-3 else f"{value:.2e}"


def body(rows: list[Row], out: Path) -> tuple[list[str], list[Path]]:
    """The table of prices (predicted, then simulated) and the plot of price against eps1."""
    lines = [
        "Price = MSE with the option / MSE without it, at the same ε∞ (predicted; simulated in",
        "brackets). *vs fresh* = MSE with the option / MSE of the mechanism at ε = ε_I without",
        "memoization (predicted).",
        "",
        "| mechanism | ε∞ | ε_I | κ | ε_out | MSE(f) without | MSE(f) with | price f | price mean | vs fresh f | vs fresh mean |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mechanism']} | {r['epsilon_state']:g} | {r['epsilon_report']:g} | {_fmt(r['contrast'])} "
            f"| {_fmt(r['epsilon_on_output'])} | {_fmt(r['predicted_mse_frequency_without'])} "
            f"| {_fmt(r['predicted_mse_frequency_with'])} "
            f"| {_fmt(r['price_frequency'])} ({_fmt(r['simulated_price_frequency'])}) "
            f"| {_fmt(r['price_mean'])} ({_fmt(r['simulated_price_mean'])}) "
            f"| {_fmt(r['versus_fresh_frequency'])} | {_fmt(r['versus_fresh_mean'])} |"
        )
    plt = pyplot()
    if plt is None:
        return [*lines, "", NO_PLOTS], []
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.6), squeeze=False)
    for ax, quantity, label in zip(axes[0], ("frequency", "mean"), ("frequencies", "means"), strict=True):
        for key in dict.fromkeys((r["mechanism"], r["epsilon_state"]) for r in rows):
            mine = [r for r in rows if (r["mechanism"], r["epsilon_state"]) == key]
            xs = [r["epsilon_report"] for r in mine]
            predicted = [r[f"price_{quantity}"] for r in mine]
            if not all(v == v for v in predicted):
                continue
            style = "-" if key[1] == max(r["epsilon_state"] for r in rows) else "--"  # ε∞ = 4 dashed
            color = f"C{MECHANISMS.index(key[0])}"
            ax.plot(xs, predicted, style, color=color, marker="o", ms=3, label=f"{key[0]}, ε∞={key[1]:g}")
            simulated = [r[f"simulated_price_{quantity}"] for r in mine]
            ax.plot(xs, simulated, "x", color=color, ms=5)
        ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        epsilons = sorted({r["epsilon_report"] for r in rows})
        ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
        ax.set_xlabel("ε_I (per report)")
        ax.set_ylabel("MSE with / without")
        ax.set_title(f"price on {label} (line: predicted, x: simulated)", fontsize=9)
        ax.grid(True, which="both", alpha=0.25)
    axes[0][0].legend(fontsize=6)
    return saved_plot(plt, fig, out / "price.png", lines)


STUDY = Study(
    name="instantaneous-price",
    title="the accuracy price of instantaneous randomization, ε_I ∈ {1, 2, 4}",
    source="kvldp (docs/privacy.md, *The price of hiding change times*)",
    notes="""
Each device's memoized report is at ε∞ (the collection's ε, per state); with
`[privacy] instantaneous_epsilon = ε_I` every send is randomized again and the server
estimates with the composed channel, exactly ε_I-LDP per report. MSE of the `unbiased`
estimator, averaged over the keys (means over the keys someone holds); predicted =
analytic variance plus bias at the expected statistics, simulated = the mean over the
repeated collections. Populations: `gaussian_pckv` (one pair per device) for the
frequency oracles and PCKV-UE, `gaussian` for KVUE and PrivKV, d = 50. ε_I must lie below
the mechanism's exact per-report level (PrivKV's and PCKV-UE's lie below their ε):
settings above it have no row.
""",
    run=run,
    body=body,
)
