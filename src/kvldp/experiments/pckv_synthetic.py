"""Gu et al. 2020: PCKV on synthetic data, Sec. 6.1 (docs/mechanisms.md, *PCKV experiments*).

UU and GG populations (n = 10^6, d = 100, one pair per user, ell = 1). The paper's
series are PrivKVM with c = 1, PrivKVM with one round and five virtual iterations
(1r5v), KVUE, PCKV-UE and PCKV-GRR (Algorithm 4 estimator), each PCKV also with its
theoretical MSE (Theorem 4; here the analytic prediction of :mod:`kvldp.evaluation.prediction`, which
equals it). kvldp adds EM, Norm-Sub and empirical Bayes (``eb``: the EM fit shrunk toward
priors fitted across the keys) on the same PCKV reports.
"""

from __future__ import annotations

from kvldp.evaluation.advisor import advise
from kvldp.experiments.model import THEORY, Cell, Claim, Experiment, Metric, Row, series_values

EPSILONS = (0.1, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
PANELS = {"UU": "uniform", "GG": "gaussian_pckv"}
D = 100
PAPER: tuple[tuple[str, str, str, dict[str, object], bool], ...] = (
    ("PrivKVM (c=1)", "privkvm", "paper", {"rounds": 1}, False),
    ("PrivKVM (1r5v)", "privkvm", "paper", {"rounds": 1, "virtual": 5}, False),
    ("KVUE", "kvue", "unbiased", {}, False),
    ("PCKV-UE", "pckv_ue", "paper", {"ell": 1}, True),
    ("PCKV-GRR", "pckv_grr", "paper", {"ell": 1}, True),
)
KVLDP: tuple[tuple[str, str, str, dict[str, object]], ...] = (
    ("PCKV-UE + EM", "pckv_ue", "em", {"ell": 1}),
    ("PCKV-GRR + EM", "pckv_grr", "em", {"ell": 1}),
    ("PCKV-UE + Norm-Sub", "pckv_ue", "normsub", {"ell": 1}),
    ("PCKV-UE + EB", "pckv_ue", "eb", {"ell": 1}),
    ("PCKV-GRR + EB", "pckv_grr", "eb", {"ell": 1}),
)


def cells(quick: bool) -> list[Cell]:
    users, repeats = (20_000, 10) if quick else (1_000_000, 5)
    epsilons = (1.0, 4.0) if quick else EPSILONS
    panels = ("UU",) if quick else tuple(PANELS)
    out: list[Cell] = []
    for panel in panels:
        for e in epsilons:
            out += [
                Cell(panel, e, s, "paper", PANELS[panel], users, D, e, m, est, repeats, p, theory=t)
                for s, m, est, p, t in PAPER
            ]
            out += [
                Cell(panel, e, s, "kvldp", PANELS[panel], users, D, e, m, est, repeats, p)
                for s, m, est, p in KVLDP
            ]
            top = advise(D, e, 1, users, dataset=PANELS[panel])[0]
            out.append(
                Cell(
                    panel, e, f"advise: {top.label}", "kvldp", PANELS[panel], users, D, e,
                    top.mechanism, top.estimator, repeats, dict(top.params),
                )
            )  # fmt: skip
    return out


def claims(rows: list[Row]) -> list[Claim]:
    out: list[Claim] = []
    for panel in dict.fromkeys(r["panel"] for r in rows):
        c1f, vf = (
            series_values(rows, panel, "PrivKVM (c=1)", "mse_frequency"),
            series_values(rows, panel, "PrivKVM (1r5v)", "mse_frequency"),
        )
        same = [abs(c1f[x] / vf[x] - 1) < 0.2 for x in c1f if x in vf]
        out.append(
            Claim(
                f"{panel}: the two PrivKVM variants have equal MSE(f)",
                all(same),
                f"within 20% at {sum(same)} of {len(same)} ε",
            )
        )
        ue = series_values(rows, panel, "PCKV-UE", "mse_frequency")
        lower = [ue[x] < 0.5 * c1f[x] for x in ue if x in c1f and x >= 1]
        out.append(
            Claim(
                f"{panel}: PCKV has much lower MSE(f) (< half of PrivKVM's, ε ≥ 1)",
                all(lower) if lower else None,
                f"{sum(lower)} of {len(lower)} ε",
            )
        )
        c1m = series_values(rows, panel, "PrivKVM (c=1)", "mse_mean")
        xs = sorted(x for x in c1m if x >= 1)
        if len(xs) >= 2:
            flat = c1m[xs[-1]] > 0.5 * c1m[xs[0]]
            out.append(
                Claim(
                    f"{panel}: PrivKVM (c=1) MSE(m) stops falling after ε = 0.5",
                    flat,
                    f"MSE(m) {c1m[xs[0]]:.3g} at ε = {xs[0]:g}, {c1m[xs[-1]]:.3g} at ε = {xs[-1]:g}",
                )
            )
        vm = series_values(rows, panel, "PrivKVM (1r5v)", "mse_mean")
        uem = series_values(rows, panel, "PCKV-UE", "mse_mean")
        high = [x for x in vm if x >= 4 and x in c1m and x in uem]
        better = [vm[x] < c1m[x] and vm[x] > uem[x] for x in high]
        out.append(
            Claim(
                f"{panel}: 1r5v improves on c=1 at larger ε (≥ 4) but stays worse than PCKV (MSE(m))",
                all(better) if better else None,
                f"{sum(better)} of {len(better)} ε",
            )
        )
        far = [uem[x] < 0.2 * c1m[x] for x in uem if x > 2 and x in c1m]
        out.append(
            Claim(
                f"{panel}: PCKV MSE(m) is far smaller for ε > 2 (< 1/5 of PrivKVM's)",
                all(far) if far else None,
                f"{sum(far)} of {len(far)} ε",
            )
        )
        for series in ("PCKV-UE", "PCKV-GRR"):
            for column, theory in THEORY.items():
                pairs = [
                    (r["x"], r[column] / r[theory])
                    for r in rows
                    if r["panel"] == panel and r["series"] == series and r.get(theory)
                ]
                ok = [0.75 < q < 1.33 for x, q in pairs if x >= 2]
                out.append(
                    Claim(
                        f"{panel}: {series} {column} matches Theorem 4 where Algorithm 4 rarely clips (ε ≥ 2; "
                        "empirical/theory within 0.75-1.33)",
                        all(ok) if ok else None,
                        "empirical/theory by ε: "
                        + ", ".join(f"{x:g}: {q:.2f}" for x, q in pairs)
                        + " (below ε = 2 the clipping of Algorithm 4 keeps the error under the first-order theory)",
                    )
                )
    return out


EXPERIMENT = Experiment(
    name="pckv-synthetic",
    title="MSE of frequency and mean vs ε, n = 10^6, d = 100, UU and GG (Gu et al. 2020, Sec. 6.1)",
    source="Gu et al. 2020: PCKV, USENIX Security 2020, Sec. 6.1, Figs 4-5",
    x_name="epsilon",
    cells=cells,
    metrics=(Metric("mse_frequency", "MSE(f)"), Metric("mse_mean", "MSE(m)")),
    notes="""
The paper plots its figures without printed numbers: the `(theory)` columns are its
Theorem 4 (for PCKV), the empirical columns kvldp's runs. KVUE is run with the plain
unbiased estimator (the paper's PrivKVM-style clipping of the estimates is not applied).
Frequencies and means are scored over all keys: an undefined mean is scored as 0 (what
Algorithm 4's clipping prints for such a key) and counted in the CSV (`undefined_means`).
`+ EB` is kvldp's empirical Bayes on the same reports (the EM fit shrunk toward priors
fitted across the keys; see docs/mechanisms.md). The `advise` series is what
`kvldp advise --keys 100 --keys-per-device 1 --dataset NAME` ranks first (mechanism and
estimator, predicted on another draw of the same kind of population).

### Every attempt to beat PCKV, kept or not

Measured on the same reports unless marked *analytic* (Theorem 4's variances, which the
claims below show match the runs within 0.8-1.3 at ε ≥ 2; UU: f = 0.01, m² averaging 1/3).

1. **EM against Algorithm 4 (fixed, kept).** EM lost on means because of a boundary
   artefact, not a wrong likelihood: on keys with fewer than one estimated holder whose +1
   count alone exceeds the background, the maximiser sits on θ− = 0 with thousands of
   fitted holders and a plug-in mean of exactly ±1, where Algorithm 4 prints 0. Same reports,
   n = 10^6, ε = 1, every key scored: EM's MSE(m) was +5% (GG, PCKV-UE) and +23% (GG,
   PCKV-GRR) above Algorithm 4's, +21% on UU at ℓ = 2, n = 10^5; nearly all of it on those
   keys. With Algorithm 4's rule there, the gap is +0.06%, +0.09% and +0.4%. The per-key
   model is exact at ℓ = 1 for one-pair users, and the joint model of PCKV-GRR has the same
   interior maximiser (its transition is square), so an exact-model EM has nothing more to
   give here: EM equals Algorithm 4 wherever no clipping binds.
2. **Consistency from padding.** At ℓ = 1 "each device holds at most ℓ padded keys" is
   Σ_j (θ+_j + θ−_j) ≤ 1, which is exactly the simplex Norm-Sub projects onto
   (`PCKV-UE + Norm-Sub`): it pays at ε = 0.1 only, where it is kept.
3. **Empirical Bayes (kept: `+ EB`).** Frequencies and means shrunk toward normal priors
   fitted across the keys, with standard errors that are not understated (docs/mechanisms.md).
   It pays where keys are alike relative to the noise: every UU frequency (all keys share
   f = 1/d), GG frequencies at small ε, and the means of rare keys (GG at most ε, UU at
   ε ≤ 1). Where each key's estimate is already precise, the prior moves nothing. No prior
   can do much better there (*analytic*): on UU's means, even the Bayes rule under the true
   prior (uniform on [−1, 1]) with Gaussian noise at the measured error lowers MSE(m) by
   only 5.1, 3.0, 1.8, 0.8 and 0.6% against Algorithm 4's clipped estimate (ε = 2 … 6).
4. **Mixture reduction (LDP-EM-MR) for values: does not apply.** PCKV discretises every
   value to ±1 on the device, so a key's value model is the sign split θ+/θ−, which the
   estimators above already fit; there is no value mixture left to reduce.
5. **Budget split (analytic, not kept).** Along Theorem 2's (UE) and Theorem 3's (GRR)
   families, PCKV's optimised split is the minimum of MSE(m) at every ε of the grid. Moving
   budget to the key trades one metric for the other: cutting MSE(f) by 15% raises MSE(m)
   by 7/19/34/47/61/89/189% (UE, ε = 0.1 … 6) or 11/11/12/15/22/40/73% (GRR); cutting it by
   half multiplies MSE(m) by 2.1-601 (UE, ε ≤ 3; at ε ≥ 4 no UE split halves it) or 2.3-83
   (GRR). No split is better on both.
6. **ℓ from the population (analytic, not kept).** Every UU and GG user holds one key, so
   ℓ > 1 only adds dummy samples: Theorem 4's MSE(f) grows as ℓ², and `kvldp advise`
   already picks ℓ = 1 for one key per device.
7. **A better frequency oracle over the 2d (key, sign) symbols (analytic, not built).** At
   ℓ = 1 PCKV is a frequency oracle over the 2d' pairs. Subset selection (the best known
   ε-LDP oracle) would change the variance of each pair's share by ×0.77, 0.92, 0.96,
   0.94, 0.85, 1.00, 1.00 (ε = 0.1 … 6) against the better of PCKV-UE and PCKV-GRR: at most
   8% except at ε = 0.1 (already won) and ε = 4.
8. **A richer value channel (analytic, not built).** PCKV sends the sign of the rounded
   value through a two-output channel. With PCKV-GRR's key channel fixed (so MSE(f) does
   not move), a numeric search over every ε-LDP value channel with up to three input levels
   (the value rounded at random to −1, 0 or 1), up to four outputs and any value
   distribution for the reports whose key was replaced (exact constraints: ratio ≤ e^ε
   between any two inputs at every output; delta-method variances) lowers MSE(m) by at most
   0.1% at ε ≤ 3, 0.8% at ε = 4, 3.7% at ε = 5 and 11% at ε = 6 on UU (GG: 0.1%, 0.1%, 0.9%,
   6.3%); with PCKV-UE's key bits fixed instead (the paper's best at ε ≤ 4), at most 0.2% at
   ε = 1-4 on both. The UU ε = 6 gain comes from the 0 level, which pays because every UU
   holder of a key has the same value; one setting, at the edge of Monte-Carlo noise, does
   not justify a new mechanism and wire format. Giving the key 0.1 more of ε instead, with the best
   value channel for the rest, cuts MSE(f) by 6-33% and raises MSE(m) by 6-17%.

What the grid leaves open, and why: once every key has thousands of holders (means:
UU at ε ≥ 2, GG at ε = 4 and 6; frequencies: GG at ε = 3-5), the error is the privacy noise
of a (key, sign) frequency oracle at the split that minimises MSE(m), with nothing for a
prior to borrow across keys; the levers above change it by under 10% (6-8, but for UU
ε = 6 in 8) or trade one metric for the other (5, 8).
""",
    claims=claims,
)
