"""Zhao et al. 2022: FHR vs OUE vs OLH on Zipf data, top-k metrics (docs/mechanisms.md,
*FHR experiments*).

Population: numpy Zipf(a = 1.12) truncated to 1023 items, 593,358 users (kvldp's
hypothesis for the paper's generator), one item per user; the classic oracles (ell = 0).
kvldp adds Norm-Sub on the same OUE and FHR reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kvldp.common.estimation.estimate import Estimate
from kvldp.common.primitives import FloatArray
from kvldp.experiments.metrics import top_k_metrics
from kvldp.experiments.model import Cell, Claim, Experiment, Metric, Row

EPSILONS = (0.4, 0.8, 1.2, 1.6, 2.0)
TOP_K = (20, 50, 100)
D = 1023
USERS = 593_358
PAPER = (
    ("FHR", "fhr", "unbiased"),
    ("OUE", "oue", "unbiased"),
    ("OLH", "olh", "unbiased"),
)
KVLDP = (
    ("FHR + Norm-Sub", "fhr", "normsub"),
    ("OUE + Norm-Sub", "oue", "normsub"),
)


def cells(quick: bool) -> list[Cell]:
    users, repeats = (20_000, 2) if quick else (USERS, 10)
    epsilons = (0.8, 2.0) if quick else EPSILONS
    out: list[Cell] = []
    for e in epsilons:
        out += [
            Cell("Zipf", e, s, "paper", "zipf", users, D, e, m, est, repeats, {"ell": 0})
            for s, m, est in PAPER
        ]
        out += [
            Cell("Zipf", e, s, "kvldp", "zipf", users, D, e, m, est, repeats, {"ell": 0})
            for s, m, est in KVLDP
        ]
    return out


def extra(true_f: FloatArray, true_m: FloatArray) -> Callable[[Estimate], Mapping[str, float]]:
    def metrics(est: Estimate) -> dict[str, float]:
        out: dict[str, float] = {}
        for k in TOP_K:
            out.update(top_k_metrics(true_f, est.frequency, k))
        return out

    return metrics


def claims(rows: list[Row]) -> list[Claim]:
    out: list[Claim] = []
    for column, better in (("kld@50", min), ("re@50", min), ("se@50", min), ("ncr@50", max)):
        settings = list(dict.fromkeys(r["x"] for r in rows))
        winners = [
            better((r for r in rows if r["x"] == x and r["role"] == "paper"), key=lambda r: r[column])[
                "series"
            ]
            for x in settings
        ]
        fhr = sum(w == "FHR" for w in winners)
        out.append(
            Claim(
                f"FHR is best of FHR, OUE, OLH on {column}",
                fhr == len(winners),
                f"FHR best at {fhr} of {len(winners)} ε; winners: {', '.join(winners)}",
            )
        )
    return out


EXPERIMENT = Experiment(
    name="fhr-zipf",
    title="FHR vs OUE vs OLH on Zipf data, ε ∈ [0.4, 2] (Zhao et al.)",
    source="Zhao et al. 2022: FLDP, flexible strategy for local differential privacy, Sec. 6",
    x_name="epsilon",
    cells=cells,
    metrics=(
        Metric("mse_frequency", "MSE(f), all items"),
        *(Metric(f"{m}@50", f"{m.upper()}, top 50") for m in ("kld", "re", "se")),
        Metric("ncr@50", "NCR, top 50 (higher is better)", log=False),
    ),
    notes="""
FHR is (ε, 0.5)-FLDP, not ε-LDP (docs/mechanisms.md, *FHR*): its comparison with OUE and
OLH is the paper's, at the same ε. The paper prints no numbers; the claims below are its
text, checked. Metrics as in docs/mechanisms.md, *Top-k metrics* (natural-log symmetric
KL, median relative error, squared error over the shared top-k, normalised cumulative
rank); all k ∈ {20, 50, 100} are in the CSV, k = 50 in the tables.
""",
    claims=claims,
    extra=extra,
    duel_metrics=("mse_frequency",),
)
