"""The poisoning scores through the aggregator: every refit tests every window of a
key-value collection, the newest window against the rest for a jump, and the scores
reach /metrics (``kvldp_poisoning_score``, ``kvldp_poisoning_population_score``) and the
/estimates JSON; item oracles get none."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvldp.aggregator.exporter import POISONING_BASIS, SnapshotCollector
from kvldp.aggregator.refit import jump_windows, refit
from kvldp.aggregator.state import AggregatorState
from kvldp.attacks.fakes import fake_reports
from kvldp.attacks.target import Target
from kvldp.common.config.collection import Collection
from kvldp.common.data.stats import Stats
from kvldp.common.untrusted.poisoning import ALERT_SCORE
from kvldp.sim.datasets import generate

from support.pipeline import unique_collection


def samples(
    collection: Collection, snapshot_windows: dict[str, Stats]
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The exporter's series after one refit of ``snapshot_windows``, by metric name."""
    registry = CollectorRegistry()
    collector = SnapshotCollector(collection, lambda: AggregatorState(collection))
    collector.snapshot = refit(collection, snapshot_windows, None)
    registry.register(collector)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_jump_windows_pick_the_shortest_and_the_longest() -> None:
    c = unique_collection("kvue", 3, windows=["1h", "1m", "all"])
    assert jump_windows(c, {"1h", "1m", "all"}) == ("1m", "all")
    assert jump_windows(c, {"1h", "1m"}) == ("1m", "1h")
    assert jump_windows(c, {"all"}) == (None, None)
    assert jump_windows(unique_collection("kvue", 3, windows=["all"]), {"all"}) == (None, None)


def test_an_attacked_key_is_flagged_on_the_metric_within_one_refit() -> None:
    c = unique_collection("pckv_grr", 8, windows=["1m", "all"])
    mech = c.mechanism
    users = generate("gaussian_pckv", 20_000, 8, seed=6).users
    rng = np.random.default_rng(6)
    old = mech.collect(users.rows(0, 18_000), rng)
    recent = mech.collect(users.rows(18_000, 20_000), rng)
    target = int(np.argmin(np.bincount(users.keys, minlength=8)))
    recent.fold(fake_reports(mech, "m2ga", 202, Target(np.array([target])), rng))  # 1% of all devices
    windows = {"1m": recent, "all": old.merge(recent)}
    series = samples(c, windows)
    scores = {(labels["key"], labels["window"]): value for labels, value in series["kvldp_poisoning_score"]}
    assert {labels["estimator"] for labels, _ in series["kvldp_poisoning_score"]} == {POISONING_BASIS}
    assert len(scores) == 2 * len(c.keys)
    flagged = {key for (key, window), v in scores.items() if window == "1m" and v >= ALERT_SCORE}
    assert flagged == {c.keys[target]}
    population = series["kvldp_poisoning_population_score"]
    assert {labels["window"] for labels, _ in population} == {"1m", "all"}
    payload = refit(c, windows, None).to_json()
    newest = payload["windows"]["1m"]["poisoning"]
    assert newest["keys"][c.keys[target]]["score"] >= ALERT_SCORE
    assert newest["keys"][c.keys[target]]["test"] == "jump_pos"
    assert newest["alert_score"] == ALERT_SCORE and newest["score"] >= ALERT_SCORE
    # PCKV counts two states per key; only the newest window is tested for a jump
    assert newest["jump_tests"] == 2 * len(c.keys)
    assert payload["windows"]["all"]["poisoning"]["jump_tests"] == 0


def test_item_oracles_export_no_poisoning_score() -> None:
    c = unique_collection("grr", 4, windows=["1m", "all"])
    users = generate("zipf", 2000, 4, seed=1).users
    stats = c.mechanism.collect(users, np.random.default_rng(1))
    series = samples(c, {"1m": stats, "all": stats.copy()})
    assert "kvldp_poisoning_score" not in series and "kvldp_frequency" in series
    assert "poisoning" not in refit(c, {"all": stats}, None).to_json()["windows"]["all"]


def test_genuine_reports_score_below_the_alert() -> None:
    c = unique_collection("kvue", 6, windows=["1m", "all"])
    users = generate("gaussian_pckv", 20_000, 6, seed=7).users
    rng = np.random.default_rng(7)
    recent = c.mechanism.collect(users.rows(15_000, 20_000), rng)
    whole = c.mechanism.collect(users.rows(0, 15_000), rng).add(recent)
    series = samples(c, {"1m": recent, "all": whole})
    assert max(v for _, v in series["kvldp_poisoning_score"]) < ALERT_SCORE
    assert "kvldp_poisoning_population_score" not in series  # key-sampled: no population test
