"""``kvldp advise`` and the predictions behind it, against simulation.

The issue's check: on a small grid of deployments, the mechanism advise ranks first has
a simulated error within 20% of the best simulated one. The predictions themselves are
checked against the simulated MSE with a tolerance from the spread of the repeats.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kvldp.common.mechanisms import create
from kvldp.evaluation.advisor import (
    CANDIDATES,
    OBJECTIVES,
    advise,
    advise_many,
    named_population,
    reference_population,
)
from kvldp.evaluation.prediction import DRAWS, clipped_normal_mse, predict, predict_by_draws
from kvldp.evaluation.scoring import evaluate
from kvldp.experiments import EXPERIMENTS
from kvldp.experiments.grid import run
from kvldp.sim.datasets import GENERATORS, Dataset, generate

from support import run_kvldp

GRID = [(10, 1.0, 1), (10, 4.0, 3), (40, 2.0, 1), (40, 1.0, 8)]


def _simulated(
    name: str,
    params: dict[str, object],
    d: int,
    eps: float,
    ell: int,
    users: int,
    repeats: int,
    estimator: str = "unbiased",
) -> dict[str, float]:
    pop = reference_population(d, ell, users)
    mech = create(name, d, eps, **params)
    out = evaluate(mech, estimator, Dataset("ref", pop, 0), repeats, seed=11, show_progress=False)
    return {"f": out["mse_frequency"], "m": out["mse_mean"], "sd_f": out["mse_frequency_sd"]}


@pytest.mark.slow
@pytest.mark.parametrize(("d", "eps", "ell"), GRID)
def test_recommended_mechanism_is_within_20_percent_of_the_best_simulated(
    d: int, eps: float, ell: int
) -> None:
    """The candidate advise ranks first simulates within 20% of the best simulated one, up
    to 4 Monte Carlo standard errors of the two means over 8 repeats (candidates whose
    errors differ by about 10%, as em and eb now do where em declines rare keys' means,
    are not told apart by 8 repeats)."""
    users, repeats = 20_000, 8
    ranking = advise(d, eps, ell, users)
    pop = Dataset("ref", reference_population(d, ell, users), 0)
    runs: dict[str, list[float]] = {}
    for a in ranking:
        mech = create(a.mechanism, d, eps, **a.params)
        per_repeat = [
            evaluate(mech, a.estimator, pop, 1, seed=11 + r, show_progress=False) for r in range(repeats)
        ]
        runs[a.label] = [r["mse_frequency"] + r["mse_mean"] for r in per_repeat]
    total = {label: float(np.mean(v)) for label, v in runs.items()}
    sem = {label: float(np.std(v, ddof=1)) / math.sqrt(repeats) for label, v in runs.items()}
    best = min(total, key=total.__getitem__)
    pick = ranking[0].label
    # within 20% of the best, up to 4 Monte Carlo standard errors of the two simulated means
    assert total[pick] <= 1.2 * total[best] + 4 * math.hypot(sem[pick], 1.2 * sem[best]), (pick, total, sem)


@pytest.mark.parametrize(
    ("name", "params"), [("pckv_ue", {"ell": 2}), ("pckv_grr", {"ell": 1}), ("kvue", {}), ("privkv", {})]
)
def test_predicted_frequency_mse_matches_simulation(name: str, params: dict[str, object]) -> None:
    """MSE_f over keys is averaged over R repeats: |simulated - predicted| < 4 sd/sqrt(R)."""
    d, eps, ell, users, repeats = 20, 2.0, 3, 20_000, 30
    pop = reference_population(d, ell, users)
    pred_f, _ = predict(create(name, d, eps, **params), pop).average()
    sim = _simulated(name, params, d, eps, ell, users, repeats)
    assert abs(sim["f"] - pred_f) < 4 * sim["sd_f"] / math.sqrt(repeats), (sim, pred_f)


@pytest.mark.parametrize("name", ["pckv_ue", "kvue", "privkv"])
def test_predicted_mean_mse_matches_simulation(name: str) -> None:
    """Where every key has enough holders for its mean to be defined (3,000 of 20,000
    devices), the clipped-normal prediction of MSE_m matches R = 20 simulated collections
    within 4 standard errors of their average."""
    d, eps, ell, users, repeats = 20, 2.0, 3, 20_000, 20
    pop = reference_population(d, ell, users)
    mech = create(name, d, eps, **({"ell": 2} if name == "pckv_ue" else {}))
    _, pred_m = predict(mech, pop).average()
    sims = [
        evaluate(mech, "unbiased", Dataset("ref", pop, 0), 1, seed=s, show_progress=False)["mse_mean"]
        for s in range(repeats)
    ]
    assert abs(np.mean(sims) - pred_m) < 4 * np.std(sims, ddof=1) / math.sqrt(repeats), (
        np.mean(sims),
        pred_m,
    )


def test_scaled_prediction_equals_the_prediction_for_the_larger_population() -> None:
    """Variances are first order in 1/n: predicting for 5x the devices by scaling equals
    predicting on a population 5x as large with the same composition (up to the rounding
    of expected counts to integers, relative 1/count)."""
    small, large = reference_population(20, 3, 2000), reference_population(20, 3, 10_000)
    assert large.n_users == 5 * small.n_users
    for name in ("pckv_grr", "kvue"):
        mech = create(name, 20, 1.0)
        scaled, direct = predict(mech, small, scale_users=5.0), predict(mech, large)
        np.testing.assert_allclose(scaled.mse_frequency, direct.mse_frequency, rtol=1e-3)


def test_reference_population_stays_within_its_pair_budget() -> None:
    pop = reference_population(10_000, 5_000, 1_000_000)
    assert pop.keys.shape[0] <= 2_000_000
    f, _ = pop.truth()
    assert np.allclose(f, 0.5)  # device u holds keys from u * 5000: two devices cover every key once


def test_padding_bias_is_in_the_prediction() -> None:
    """ell = 1 for devices with 4 keys: each key is sampled 1/4 of the time, so PCKV's
    frequency estimate is f/4 in expectation — a bias of -3f/4 = -0.15 at f = 0.2."""
    pop = reference_population(20, 4, 2000)
    pred = predict(create("pckv_ue", 20, 2.0, ell=1), pop)
    assert np.allclose(pred.bias_frequency, -0.15)
    assert np.allclose(predict(create("pckv_ue", 20, 2.0, ell=4), pop).bias_frequency, 0.0, atol=1e-9)


def test_clipped_normal_mse_matches_monte_carlo() -> None:
    rng = np.random.default_rng(3)
    mu, sigma, target = (
        np.array([0.2, 1.5, -0.7, 0.0]),
        np.array([0.3, 2.0, 0.01, 5.0]),
        np.array([0.1, 0.9, -0.7, 0.5]),
    )
    draws = np.clip(rng.normal(mu, sigma, (400_000, 4)), -1, 1)
    sq = (draws - target) ** 2
    # 4 standard errors of the Monte Carlo mean
    sem = sq.std(axis=0) / math.sqrt(draws.shape[0])
    assert np.all(np.abs(sq.mean(axis=0) - clipped_normal_mse(mu, sigma, target)) < 4 * sem)


def test_advise_cli_json_ranks_best_first() -> None:
    done = run_kvldp(
        "advise", "--keys", "50", "--epsilon", "1", "--keys-per-device", "5", "--json", timeout=60
    )
    assert done.returncode == 0, done.stderr
    ranking = json.loads(done.stdout)["ranking"]
    assert {(r["mechanism"], r["estimator"]) for r in ranking} == {
        (c.mechanism, c.estimator) for c in CANDIDATES
    }
    totals = [r["predicted_mse_frequency"] + r["predicted_mse_mean"] for r in ranking]
    assert totals == sorted(totals)
    assert all(
        {"mechanism", "predicted_mse_frequency", "predicted_mse_mean", "why"} <= set(r) for r in ranking
    )
    assert ranking[0]["why"].startswith("lowest predicted error")


def test_advise_rejects_more_keys_per_device_than_keys() -> None:
    done = run_kvldp("advise", "--keys", "5", "--epsilon", "1", "--keys-per-device", "6", timeout=60)
    assert done.returncode == 2 and "exceeds --keys 5" in done.stderr


@pytest.mark.parametrize(("eps", "t"), [(1.0, 1), (2.0, 1), (3.0, 2), (4.0, 2), (5.0, 3)])
def test_frequency_ranking_offers_kvue_multi_with_t_chosen_by_the_prediction(eps: float, t: int) -> None:
    """Like PCKV's ell, kvue_multi's t is the argmin of the predicted MSE_f on the reference
    population (t = 1..4 scored here); on Sun's Fig. 1 setting it is the rule's t."""
    d, per_device, users = 100, 50, 100_000
    ranking = advise(d, eps, per_device, users, "frequency")
    ours = next(a for a in ranking if a.mechanism == "kvue_multi")
    assert ours.params == {"t": t}
    pop = reference_population(d, per_device, users)
    scale = users / pop.n_users
    scores = {
        k: predict(create("kvue_multi", d, eps, t=k), pop, scale_users=scale).average()[0]
        for k in (1, 2, 3, 4)
    }
    assert min(scores, key=lambda k: scores[k]) == t
    assert ours.predicted_mse_frequency == pytest.approx(scores[t], rel=1e-12)
    if t > 1:  # on Sun's kind of data (key frequencies spread over [0, 1]) it ranks first
        top = advise(d, eps, per_device, users, "frequency", dataset="sun_uniform")[0]
        assert top.mechanism == "kvue_multi" and f"t={t} keys per report" in top.why


def test_kvue_multi_is_ranked_for_the_frequency_objective_only_on_the_reference_population() -> None:
    """The reference population hides kvue_multi's rare-key mean cost; a named one shows it."""
    reference = advise_many(100, 5.0, 50, 100_000, ("sum", "mean"))
    named = advise_many(100, 5.0, 50, 20_000, ("sum", "mean"), dataset="sun_uniform")
    for objective in ("sum", "mean"):
        assert all(a.mechanism != "kvue_multi" for a in reference[objective])
        assert any(a.mechanism == "kvue_multi" for a in named[objective])


@pytest.mark.parametrize("dataset", [None, "sun_uniform"])
def test_one_set_of_predictions_ranks_every_objective_as_advise_does(dataset: str | None) -> None:
    """advise_many scores each candidate once for all objectives; each objective's ranking,
    PCKV's ell and kvue_multi's t chosen for it, is advise's for that objective."""
    many = advise_many(20, 2.0, 4, 5_000, OBJECTIVES, dataset=dataset)
    for objective in OBJECTIVES:
        assert many[objective] == advise(20, 2.0, 4, 5_000, objective, dataset=dataset)


def test_frequency_pick_on_sun_data_is_within_20_percent_of_the_best_simulated() -> None:
    """Sun et al.'s uniform data (d = 100, 20,000 devices, eps = 5): the first three of the
    frequency ranking for that kind of data simulated (R = 3, their own estimators) on
    another draw of it; the first has the lowest MSE_f up to 20%."""
    ranking = advise(100, 5.0, 50, 20_000, "frequency", dataset="sun_uniform")[:3]
    pop = Dataset("sun", GENERATORS["sun_uniform"](20_000, 100, np.random.default_rng(5)), 0)
    simulated = {
        a.label: evaluate(
            create(a.mechanism, 100, 5.0, **a.params), a.estimator, pop, 3, seed=7, show_progress=False
        )["mse_frequency"]
        for a in ranking
    }
    assert simulated[ranking[0].label] <= 1.2 * min(simulated.values()), simulated


@pytest.mark.parametrize("name", ["pckv-synthetic", "sun-fig1"])
def test_advise_pick_on_the_quick_grid_is_within_20_percent_of_the_best_series(name: str) -> None:
    """Every setting of the quick grid: the series advise ranks first for that kind of
    population (mechanism and estimator) has MSE(f) + MSE(m) within 20% of the best
    series run, the paper's and kvldp's alike."""
    rows = run(EXPERIMENTS[name], quick=True, show_progress=False)
    for setting in dict.fromkeys((r["panel"], r["x"]) for r in rows):
        here = {
            r["series"]: r["mse_frequency"] + (r["mse_mean"] or 0.0)
            for r in rows
            if (r["panel"], r["x"]) == setting
        }
        ours = [v for k, v in here.items() if k.startswith("advise: ")]
        assert len(ours) == 1, here
        assert ours[0] <= 1.2 * min(here.values()), (setting, here)


@pytest.mark.parametrize(
    ("dataset", "name", "eps", "params"),
    [
        ("uniform", "pckv_ue", 1.0, {"ell": 1}),
        ("gaussian_pckv", "pckv_grr", 4.0, {"ell": 1}),
        ("sun_gaussian", "kvue", 0.5, {}),
    ],
)
def test_draw_based_prediction_of_empirical_bayes_matches_simulation(
    dataset: str, name: str, eps: float, params: dict[str, int]
) -> None:
    """``eb`` on 20,000 devices: MSE(f) and MSE(m) predicted from draws of the counts
    against R = 20 simulated collections, within 4 standard errors of both Monte-Carlo
    averages (the prediction's error from the spread of the collections over its DRAWS
    draws)."""
    mech = create(name, 100, eps, **params)
    pop = generate(dataset, 20_000, 100).users
    pred = predict_by_draws(mech, pop, ("eb",))["eb"]
    sims = np.array(
        [
            [r["mse_frequency"], r["mse_mean"]]
            for r in (
                evaluate(mech, "eb", Dataset("x", pop, 0), 1, seed=s, show_progress=False) for s in range(20)
            )
        ]
    )
    sd_sim = np.std(sims, axis=0, ddof=1) / math.sqrt(len(sims))
    sd_pred = np.std(sims, axis=0, ddof=1) / math.sqrt(DRAWS)  # same per-collection spread, DRAWS collections
    predicted = np.array(pred.average())
    assert np.all(np.abs(sims.mean(axis=0) - predicted) < 4 * np.hypot(sd_sim, sd_pred)), (
        sims.mean(axis=0),
        predicted,
    )


def test_advise_ranks_on_a_named_population() -> None:
    """--dataset: the ranking is for that kind of population, devices sized from it."""
    done = run_kvldp(
        "advise", "--keys", "100", "--epsilon", "2", "--dataset", "gaussian_pckv", "--users", "1000000", "--json",
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ranking = json.loads(done.stdout)["ranking"]
    assert {r["params"].get("ell") for r in ranking if r["mechanism"].startswith("pckv")} == {1}
    bad = run_kvldp("advise", "--keys", "100", "--epsilon", "2", "--dataset", "nope", timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--dataset nope" in bad.stderr
    none = run_kvldp("advise", "--keys", "100", "--epsilon", "2", timeout=60)
    assert none.returncode == 2 and "--keys-per-device is required without --dataset" in none.stderr


def test_advice_says_which_ell_and_why_from_the_pairs_per_device() -> None:
    """On a population of 1 to 3 pairs per device the explanation names the pairs per
    device and the share of devices the chosen ell truncates (none when it covers them)."""
    sizes = named_population("gaussian", 3, 50_000).sizes
    held = f"devices hold {sizes.mean():.3g} pairs on average, {sizes.max()} at most"
    for advice in advise(3, 2.0, None, 50_000, dataset="gaussian"):
        if not advice.mechanism.startswith("pckv"):
            continue
        ell = advice.params["ell"]
        assert f"ell={ell}" in advice.why and held in advice.why
        if ell < sizes.max():
            assert f"{np.mean(sizes > ell):.1%} of devices hold more than ell" in advice.why
        else:
            assert "covers every device's pairs" in advice.why


@pytest.mark.parametrize("name", ["kvue", "kvoh", "f2m"])
def test_analytic_prediction_models_the_share_of_estimable_means(name: str) -> None:
    """A mean is not estimable where its holders are not significantly above none
    (d = 10, eps = 1, 2,000 holders per key of 20,000 devices: P(estimable) 0.36-0.91):
    P = Phi(E[D]/sd(D) - Z95) against the share of R = 60 collections x 10 keys that answer,
    within 4 binomial standard errors; and the prediction is finite on every key."""
    d, eps, repeats = 10, 1.0, 60
    pop = reference_population(d, 1, 20_000)
    mech = create(name, d, eps)
    _, z, _ = mech.first_order_mean(mech.expected_stats(pop))
    p = float(np.mean(0.5 * (1 + np.vectorize(math.erf)((z - 1.959963984540054) / math.sqrt(2)))))
    rng = np.random.default_rng(7)
    answered = np.mean(
        [np.isfinite(mech.estimate(mech.collect(pop, rng), "unbiased").mean) for _ in range(repeats)]
    )
    assert 0.3 < p < 0.95
    assert abs(answered - p) < 4 * math.sqrt(p * (1 - p) / (repeats * d)), (answered, p)
    assert np.all(np.isfinite(predict(mech, pop).mse_mean))
