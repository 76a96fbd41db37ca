"""``kvldp bench rounds``: PrivKVM's rounds streamed live against the in-process reference.

For each number of rounds c, an embedded broker, an in-process aggregator and a
simulated fleet (:class:`~kvldp.sim.round_fleet.RoundFleet`) run the c rounds live
(``round_period`` 1 s, ``round_min_reports`` = the fleet, so every round closes on every
device's report). Each live run is checked against ``collect`` with the same generator
(the statistics must be identical); the live runs' MSE of the means after the last
round (averaged over ``live_repeats`` runs) is set next to the in-process reference's
(averaged over ``reference_repeats`` other seeds), on the same population, n, d and
epsilon.

A round's time end to end is from the fleet seeing round r open on the control topic to
it seeing round r + 1 open: perturbing and sending every device's report, the
aggregator folding them, the 1 s ``round_period`` floor, the checkpoint and the control
record's ``acks=all`` write, and the fleet reading it back. ``send_s`` is the fleet's
part (perturb, send, every acknowledgement).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from kvldp.aggregator.service import Aggregator
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.producer.collector import Collector
from kvldp.sim import simulate
from kvldp.sim.round_fleet import RoundFleet, RoundReport

ROUNDS_COLUMNS = [
    "rounds",
    "users",
    "estimator",
    "live_mse",
    "reference_mse",
    "identical",
    "round_s_median",
    "send_s_median",
]
DATASET = "gaussian"


def _collection(name: str, users: int, keys: int, epsilon: float, rounds: int) -> Collection:
    return parse_collection(
        {
            "name": name,
            "mechanism": "privkvm",
            "epsilon": epsilon,
            "key_count": keys,
            "value_range": [-1.0, 1.0],
            "params": {"rounds": rounds, "round_period": "1s", "round_min_reports": users},
            "aggregate": {"refit_interval_s": 5, "estimators": ["paper"], "partitions": 4},
        }
    )


def _mse(mechanism: PrivKVM, stats: Any, estimator: str, truth: np.ndarray) -> float:
    mean = mechanism.estimate(stats, estimator).mean
    ok = np.isfinite(truth)
    return float(np.mean(np.square(np.where(np.isfinite(mean[ok]), mean[ok], 0.0) - truth[ok])))


async def _live(
    collection: Collection, users: KVData, bootstrap: str, seed: int
) -> tuple[Any, list[RoundReport], list[float]]:
    aggregator = Aggregator(collection, bootstrap, metrics_port=0, log=lambda _: None)
    stop = asyncio.Event()
    task = asyncio.create_task(aggregator.run(stop))
    seen: list[float] = []
    try:
        while aggregator.bound_port is None and not task.done():
            await asyncio.sleep(0.05)
        async with Collector(collection, bootstrap, rng=np.random.default_rng(seed)) as sdk:
            assert sdk.control is not None
            fleet = RoundFleet(users, simulate.device_ids(users.n_users))
            reports = await fleet.run(sdk, on_round=lambda _: None)
            seen = [r.opened for r in reports]
            await sdk.control.wait(lambda c: c.complete)
            seen.append(time.monotonic())
        rounds = aggregator.state.rounds
        assert rounds is not None
        while not rounds.complete:
            await asyncio.sleep(0.05)
        return aggregator.state.all_stats(), reports, seen
    finally:
        stop.set()
        await task


def bench_rounds(
    users: int,
    keys: int,
    epsilon: float,
    rounds_list: list[int],
    live_repeats: int,
    reference_repeats: int,
    seed: int,
) -> list[dict[str, Any]]:
    """``live_repeats`` live runs per c in ``rounds_list`` and the in-process reference."""
    rows: list[dict[str, Any]] = []
    with EmbeddedBroker(0) as broker:
        for rounds in rounds_list:
            mechanism = _collection("reference", users, keys, epsilon, rounds).mechanism
            assert isinstance(mechanism, PrivKVM)
            population = simulate.simulate(
                _collection("x", users, keys, epsilon, rounds), DATASET, users, seed
            )
            truth = population.truth()[1]
            live: list[Any] = []
            identical = True
            round_s: list[float] = []
            send_s: list[float] = []
            for i in range(live_repeats):
                collection = _collection(f"bench-rounds-{rounds}-{seed}-{i}", users, keys, epsilon, rounds)
                run_seed = seed + 1000 + i
                stats, reports, seen = asyncio.run(
                    _live(collection, population, broker.bootstrap_servers, run_seed)
                )
                identical &= stats == collection.mechanism.collect(
                    population, np.random.default_rng(run_seed)
                )
                live.append(stats)
                round_s += np.diff(seen).tolist()
                send_s += [r.seconds for r in reports]
            references = [
                mechanism.collect(population, np.random.default_rng(seed + 1 + i))
                for i in range(reference_repeats)
            ]
            for estimator in ("paper", "unbiased"):
                rows.append(
                    {
                        "rounds": rounds,
                        "users": users,
                        "estimator": estimator,
                        "live_mse": float(np.mean([_mse(mechanism, s, estimator, truth) for s in live])),
                        "reference_mse": float(
                            np.mean([_mse(mechanism, s, estimator, truth) for s in references])
                        ),
                        "identical": identical,
                        "round_s_median": float(np.median(round_s)),
                        "send_s_median": float(np.median(send_s)),
                    }
                )
    return rows
