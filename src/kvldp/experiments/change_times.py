"""instantaneous-change: what a device's payload stream reveals of when its state changed.

Per mechanism at eps_inf = 8 (the memoized report's epsilon): devices whose state changes
once, to another member's of the population (:func:`kvldp.evaluation.change_detection.changed_state_pairs`),
at a uniform send of 2m (m before and m after on average); and devices whose state never
changes. Without
instantaneous randomization the first new payload gives the change time exactly, unless
the two memoized reports are equal by chance. With it, at eps1 in {1, 2, 4}, two
observers test every stream by their likelihood ratio (the oracle, who knows both
memoized reports, and the server, who knows the population's marginals; see
:mod:`kvldp.evaluation.change_detection`): detection rate at a 5% false-positive rate,
and the share of changes located within one send. Beside them, the bound any test obeys
for a device whose memoized reports differ in h coordinates: the k sends after the change
are within e^(k h ln(p_I/q_I)) of k sends without it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvldp.common.mechanisms import create, get
from kvldp.evaluation.calibration import reference_population
from kvldp.evaluation.change_detection import (
    chance_equal_payloads,
    changed_state_pairs,
    coordinates,
    detect,
    detection_bound,
    marginal_prior,
    memoized_pair,
    oracle_llr,
    server_llr,
    streams,
)
from kvldp.experiments.model import Row
from kvldp.experiments.study import NO_PLOTS, Study, pyplot, saved_plot
from kvldp.progress import Progress
from kvldp.sim import datasets

#: symbols over the items (GRR), bits (OUE), a key-sampled symbol (KVUE), a composed
#: transition (PrivKV), ternary coordinates (PCKV-UE); OLH's symbol is GRR's over its g
#: hash values (about 3,000 at eps_inf = 8), left out for the server's one-hot counts
MECHANISMS = ("grr", "oue", "kvue", "privkv", "pckv_ue")
STATE_EPSILON = 8.0
REPORT_EPSILONS = (1.0, 2.0, 4.0)
SENDS = (1, 2, 4, 8, 16, 32)
KEYS = 50
POPULATION = 100_000
#: the false-positive rate every test is held to
ALPHA = 0.05


def _settings(quick: bool) -> tuple[int, int, tuple[float, ...], tuple[int, ...]]:
    """(devices per stream kind, state pairs for the chance of equal payloads, eps1, m)."""
    if quick:
        return 600, 4_000, (1.0, 4.0), (1, 4)
    return 4_000, 50_000, REPORT_EPSILONS, SENDS


def run(quick: bool, seed: int = 0, show_progress: bool = True) -> list[Row]:
    """Rows per mechanism: one without the option, one per eps1 x m x observer with it."""
    devices, pairs, report_epsilons, sends = _settings(quick)
    rows: list[Row] = []
    with Progress(len(MECHANISMS), "instantaneous-change") as bar:
        bar.enabled = bar.enabled and show_progress
        for index, name in enumerate(MECHANISMS):
            rng = np.random.default_rng(np.random.SeedSequence([seed, index, 0xC4A]))
            cls = get(name)
            dataset, _ = reference_population(name, cls.max_keys, cls.collects_values)
            population = datasets.generate(dataset, POPULATION if not quick else 20_000, KEYS, 0).users
            mech = create(name, KEYS, STATE_EPSILON)
            base = {"mechanism": name, "dataset": dataset, "keys": KEYS, "epsilon_state": STATE_EPSILON}
            old, new = changed_state_pairs(population, pairs, mech.collects_values, rng)
            equal = chance_equal_payloads(mech, old, new, seed + index)
            rows.append(
                {
                    **base,
                    "observer": "without option",
                    "epsilon_report": None,
                    "sends": None,
                    "devices": pairs,
                    "equal_payloads": equal,
                    "detection": 1.0 - equal,
                    "false_positive": 0.0,
                    "located": 1.0 - equal,
                }
            )
            old, new = old.take(np.arange(devices)), new.take(np.arange(devices))
            first, second = memoized_pair(mech, old, new, True, seed + index)
            for eps1 in report_epsilons:
                randomizer = mech.instantaneous(eps1)
                z, z2 = coordinates(randomizer.output, first), coordinates(randomizer.output, second)
                prior = marginal_prior(np.concatenate([z, z2]), randomizer.output.size)
                ratio = float(np.log(randomizer.keep / randomizer.other))
                differ = np.sum(z != z2, axis=1)
                for m in sends:
                    s = streams(randomizer, first, second, m, rng)
                    bound = detection_bound((2 * m - s.change) * ratio * differ.astype(np.float64), ALPHA)
                    common = {
                        **base,
                        "epsilon_report": eps1,
                        "sends": m,
                        "devices": devices,
                        "coordinate_level": ratio,
                        "epsilon_on_output": randomizer.epsilon_on_output,
                        "differing_coordinates": float(np.mean(differ)),
                        "unchanged_report_share": float(np.mean(differ == 0)),
                        "bound": float(bound),
                    }
                    for observer, changed, unchanged in (
                        (
                            "oracle",
                            oracle_llr(randomizer, s.changed, s.old, s.new),
                            oracle_llr(randomizer, s.unchanged, s.old, s.new),
                        ),
                        (
                            "server",
                            server_llr(randomizer, s.changed, prior),
                            server_llr(randomizer, s.unchanged, prior),
                        ),
                    ):
                        found = detect(changed, unchanged, s.change, ALPHA, rng)
                        rows.append(
                            {
                                **common,
                                "observer": observer,
                                "detection": found.detection,
                                "false_positive": found.false_positive,
                                "located": found.located,
                            }
                        )
            bar.advance()
    return rows


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "—"


def body(rows: list[Row], out: Path) -> tuple[list[str], list[Path]]:
    """The tables (without the option; with it per eps1 and m) and the plot."""
    lines = [
        "Without the option (any number of sends): a change shows as a new payload, located",
        "exactly, unless the two memoized reports are the same payload by chance.",
        "",
        "| mechanism | state changes | equal payloads | detection | located exactly |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if r["observer"] == "without option":
            lines.append(
                f"| {r['mechanism']} | {r['devices']:,} | {_fmt(r['equal_payloads'])} | {_fmt(r['detection'])} "
                f"| {_fmt(r['located'])} |"
            )
    lines += [
        "",
        f"With the option: detection rate at a {ALPHA:.0%} false-positive rate, oracle / server "
        "(located within one send, oracle / server), 2m sends with the change at a uniform one; "
        "bound: the largest detection rate any test can reach when each device's k sends after the "
        "change are within e^(k h ln(p_I/q_I)) of k sends without it (h = coordinates in which its "
        "two memoized reports differ); "
        "h = 0: the share of changes that leave the memoized report's randomized fields as they were.",
        "",
        "| mechanism | ε_I | m | detection | located | bound | mean h | h = 0 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with_option = [r for r in rows if r["observer"] == "oracle"]
    for r in with_option:
        server = next(
            s
            for s in rows
            if s["observer"] == "server"
            and (s["mechanism"], s["epsilon_report"], s["sends"])
            == (r["mechanism"], r["epsilon_report"], r["sends"])
        )
        lines.append(
            f"| {r['mechanism']} | {r['epsilon_report']:g} | {r['sends']} "
            f"| {_fmt(r['detection'])} / {_fmt(server['detection'])} | {_fmt(r['located'])} / {_fmt(server['located'])} "
            f"| {_fmt(r['bound'])} | {r['differing_coordinates']:.2f} | {_fmt(r['unchanged_report_share'])} |"
        )
    plt = pyplot()
    if plt is None:
        return [*lines, "", NO_PLOTS], []
    mechanisms = list(dict.fromkeys(r["mechanism"] for r in rows))
    fig, axes = plt.subplots(2, len(mechanisms), figsize=(3.0 * len(mechanisms), 5.6), squeeze=False)
    for col, name in enumerate(mechanisms):
        without = next(r for r in rows if r["mechanism"] == name and r["observer"] == "without option")
        for row_index, column in enumerate(("detection", "located")):
            ax = axes[row_index][col]
            ax.axhline(without[column], color="black", lw=1, label="without option")
            for color, eps1 in enumerate(dict.fromkeys(r["epsilon_report"] for r in with_option)):
                for observer, style in (("oracle", "-"), ("server", "--")):
                    mine = [
                        r
                        for r in rows
                        if (r["mechanism"], r["observer"], r["epsilon_report"]) == (name, observer, eps1)
                    ]
                    ax.plot(
                        [r["sends"] for r in mine],
                        [r[column] for r in mine],
                        style,
                        color=f"C{color}",
                        marker="o",
                        ms=3,
                        label=f"ε_I={eps1:g}, {observer}",
                    )
            if column == "detection":
                ax.axhline(ALPHA, color="grey", lw=0.8, ls=":")
                ax.set_title(name, fontsize=9)
            ax.set_xscale("log", base=2)
            sends = sorted({r["sends"] for r in with_option})
            ax.set_xticks(sends, [str(m) for m in sends])
            ax.set_ylim(0.0, 1.02)
            ax.set_xlabel("m (2m sends)")
            ax.grid(True, alpha=0.25)
        axes[0][col].set_ylabel("detection at 5% FPR" if col == 0 else "")
        axes[1][col].set_ylabel("located within 1 send" if col == 0 else "")
    axes[0][0].legend(fontsize=5)
    return saved_plot(plt, fig, out / "change.png", lines)


STUDY = Study(
    name="instantaneous-change",
    title="what a payload stream reveals of a state change, with and without instantaneous randomization",
    source="kvldp (docs/privacy.md, *What an observer learns about a change time*)",
    notes=f"""
A device sends 2m reports; at a uniformly random one of them (m before and m after on
average) its state changes to another member's of the population (`gaussian_pckv` for the frequency oracles and PCKV-UE, `gaussian` for KVUE
and PrivKV, d = 50); other devices never change. Every
memoized report is at ε∞ = {STATE_EPSILON:g}. Without the option the observer compares
payloads. With it every send is the instantaneous randomizer applied afresh (public
fields permanent per device), and two observers score a stream by the likelihood ratio
of a change (at a uniform unknown time) against none: the *oracle* knows both memoized
reports, which no server does, so its test is the most powerful for what it knows and
bounds the server's; the *server* knows the population's per-coordinate marginals of a
memoized report (exact for one-symbol reports, coordinates taken as independent for
vectors). Thresholds are set on the unchanged devices for a {ALPHA:.0%} false-positive
rate (ties broken at random); the change time is the split of largest likelihood, and
*located* is the share of changes it finds within one send (every split is, for m = 1).
""",
    run=run,
    body=body,
)
