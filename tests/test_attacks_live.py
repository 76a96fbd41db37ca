"""Fake devices live: ``kvldp produce --fake-fraction`` sends genuine and fake devices
through the SDK and the broker to the aggregator, whose statistics equal the in-process
experiment's for the same seed exactly (so do the gains)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from kvldp.aggregator.service import Aggregator
from kvldp.attacks import experiment
from kvldp.attacks.defenses import get as defense
from kvldp.attacks.fakes import Round, fake_reports
from kvldp.attacks.target import choose_targets
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.sim import simulate

from support import run_kvldp
from support.pipeline import collection_toml, start, unique_collection, wait_for

pytestmark = pytest.mark.asyncio

USERS, BETA, SEED = 3000, 0.05, 7


@pytest.mark.parametrize(
    ("mechanism", "params", "attack", "targets"),
    [("pckv_ue", {"ell": 2}, "m2ga", 3), ("kvue", None, "adaptive", 2)],
)
async def test_live_fakes_fold_exactly_as_in_process(
    broker: EmbeddedBroker, tmp_path: Path, mechanism: str, params: dict | None, attack: str, targets: int
) -> None:
    collection = unique_collection(mechanism, 8, params=params)
    toml = collection_toml(collection, tmp_path / "c.toml")
    users = simulate.simulate(collection, "gaussian_pckv", USERS, SEED)
    mech = collection.mechanism
    n_fakes = experiment.fake_count(USERS, BETA)
    target = choose_targets(users.truth()[0], targets, 1.0, SEED)
    genuine = experiment.genuine_reports(mech, users, experiment.genuine_rng(SEED, 0))
    fakes = fake_reports(mech, attack, n_fakes, target, experiment.fake_rng(SEED, 0))
    expected = experiment.fold_once(mech, genuine, fakes, defense("plausibility"))

    agg = Aggregator(
        collection, broker.bootstrap_servers, metrics_port=0, refit_interval=0.5, log=lambda _: None
    )
    stop, task = await start(agg)
    try:
        done = await asyncio.to_thread(
            run_kvldp,
            "produce", "--collection", str(toml), "--simulate", "gaussian_pckv", "--users", str(USERS),
            "--seed", str(SEED), "--fake-fraction", str(BETA), "--attack", attack, "--targets", str(targets),
            "--batch-size", "20", "--bootstrap-servers", broker.bootstrap_servers,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert (
            f"{USERS + n_fakes} reports" in done.stderr
            and f"{n_fakes} of them from fake devices" in done.stderr
        )
        await wait_for(lambda: agg.state.reports_total == USERS + n_fakes, 60, "every report folded")
        live = agg.state.all_stats()
    finally:
        stop.set()
        await task
    assert live == expected.with_fakes
    # so the gains agree: the live estimate minus the in-process estimate without fakes
    for estimator in ("unbiased", "em"):
        got = mech.estimate(live, estimator).frequency[target.keys]
        want = mech.estimate(expected.with_fakes, estimator).frequency[target.keys]
        np.testing.assert_array_equal(got, want)


async def test_live_fakes_take_part_in_every_privkvm_round(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """PrivKVM: the fakes report in every round on the means the aggregator published,
    which the fakes helped to compute; the aggregator's counts of every round equal the
    in-process rounds with fakes."""
    n, beta, seed = 1500, 0.02, 3
    n_fakes = experiment.fake_count(n, beta)
    base = unique_collection("privkvm", 6)
    collection = parse_collection(
        {
            "name": base.name,
            "mechanism": "privkvm",
            "epsilon": 2.0,
            "key_count": 6,
            "value_range": [0.0, 10.0],
            "params": {"rounds": 3, "round_period": "1s", "round_min_reports": n + n_fakes},
            "aggregate": {"refit_interval_s": 0.5, "estimators": ["unbiased"]},
        }
    )
    toml = collection_toml(collection, tmp_path / "c.toml")
    mech = collection.mechanism
    assert isinstance(mech, PrivKVM)
    users = simulate.simulate(collection, "gaussian_pckv", n, seed)
    target = choose_targets(users.truth()[0], 2, 1.0, seed)
    f_rng = experiment.fake_rng(seed, 0)

    def fakes(r: int, published: np.ndarray):
        return fake_reports(mech, "m2ga", n_fakes, target, f_rng, Round(r, published))

    expected = experiment.privkvm_rounds(
        mech, users, experiment.genuine_rng(seed, 0), fakes, defense("plausibility")
    )
    agg = Aggregator(
        collection, broker.bootstrap_servers, metrics_port=0, refit_interval=0.5, log=lambda _: None
    )
    stop, task = await start(agg)
    try:
        done = await asyncio.to_thread(
            run_kvldp,
            "produce", "--collection", str(toml), "--simulate", "gaussian_pckv", "--users", str(n),
            "--seed", str(seed), "--fake-fraction", str(beta), "--targets", "2",
            "--bootstrap-servers", broker.bootstrap_servers,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"{n_fakes} per round from fake devices" in done.stderr
        await wait_for(lambda: agg.state.reports_total == 3 * (n + n_fakes), 60, "every round folded")
        live = agg.state.all_stats()
    finally:
        stop.set()
        await task
    assert live == expected
    assert np.all(live.arrays["counts"][:, target.keys, 2] >= n_fakes // 2 - 3 * np.sqrt(n_fakes))


async def test_produce_refuses_fake_flags_alone(tmp_path: Path) -> None:
    toml = collection_toml(unique_collection("kvue", 4), tmp_path / "c.toml")
    base = ["produce", "--collection", str(toml), "--bootstrap-servers", "127.0.0.1:1"]
    for extra, words in [
        (
            ["--simulate", "uniform", "--users", "10", "--attack", "m2ga"],
            "--attack goes with --fake-fraction",
        ),
        (["--simulate", "uniform", "--users", "10", "--targets", "2"], "--targets goes with --fake-fraction"),
        (["--from-csv", str(toml), "--fake-fraction", "0.1"], "--fake-fraction goes with --simulate"),
        (["--simulate", "uniform", "--users", "10", "--fake-fraction", "0.1", "--targets", "9"], "--targets"),
    ]:
        done = await asyncio.to_thread(run_kvldp, *base, *extra)
        assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, done.stderr
