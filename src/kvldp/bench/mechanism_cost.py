"""``kvldp bench fold`` and ``kvldp bench estimate``: folding throughput and refit cost, per mechanism.

Benchmarks live here, not in the test suite: they print measurements and never
assert. ``fold`` times folding a pre-generated batch (best of three, so the figure is
the code's speed and not the machine's noise); ``estimate`` times every estimator on
statistics of a fixed population for several key counts (median of three).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from kvldp.common.data.schema import batch_len
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.conditional import ConditionalQuery
from kvldp.common.mechanisms import create, get, names
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.ioh import JointStateMechanism
from kvldp.progress import Progress
from kvldp.sim.datasets import generate

#: joint-state mechanisms are benchmarked at these key counts (their cost grows with d)
JOINT_STATE_KEYS = (4, 8)


def _joint(name: str) -> bool:
    return issubclass(get(name), JointStateMechanism)


def _fold_domains(name: str, d: int) -> list[int]:
    if _joint(name):
        return list(JOINT_STATE_KEYS)
    limit = get(name).max_keys
    return [d if limit is None else min(d, limit)]


def two_way_queries(d: int) -> list[ConditionalQuery]:
    """f(k | j=1) and f(k | j=0) for every ordered pair of keys."""
    return [
        ConditionalQuery.build(d, k, {j: v}) for k in range(d) for j in range(d) if j != k for v in (1, 0)
    ]


#: largest pre-generated batch (wide reports such as IOH's 3^d bits get fewer of them)
MAX_BATCH_BYTES = 256 << 20


def _report_bytes(name: str, d: int, epsilon: float) -> int:
    mech = create(name, d, epsilon)
    return sum(8 if f.kind != "bits" else f.nbytes for f in mech.fields())


def bench_fold(
    mechanisms: list[str] | None, reports: int, d: int, epsilon: float, seed: int, repeats: int = 3
) -> list[dict[str, Any]]:
    rows = []
    chosen = mechanisms or names()
    rng = np.random.default_rng(seed)
    with Progress(len(chosen), "bench fold") as bar:
        for name in chosen:
            for keys in _fold_domains(name, d):
                mech = create(name, keys, epsilon)
                count = min(reports, max(1, MAX_BATCH_BYTES // _report_bytes(name, keys, epsilon)))
                users = generate("uniform", count, keys, seed).users
                batch = mech.plausible(mech.perturb_many(users, rng))
                n = batch_len(batch)
                times = []
                for _ in range(repeats):
                    stats = mech.new_stats()
                    start = time.perf_counter()
                    stats.fold(batch)
                    times.append(time.perf_counter() - start)
                best = min(times)
                rows.append(
                    {
                        "mechanism": name,
                        "keys": keys,
                        "reports": n,
                        "seconds": best,
                        "reports_per_second": n / best,
                    }
                )
            bar.advance()
    return rows


def bench_estimate(
    mechanisms: list[str] | None,
    key_counts: list[int],
    users: int,
    epsilon: float,
    seed: int,
    repeats: int = 3,
) -> list[dict[str, Any]]:
    rows = []
    chosen = mechanisms or names()
    rng = np.random.default_rng(seed)
    with Progress(len(chosen) * len(key_counts), "bench estimate") as bar:
        for name in chosen:
            for d in key_counts:
                limit = get(name).max_keys
                if limit is not None and d > limit:
                    rows.append(
                        {
                            "mechanism": name,
                            "keys": d,
                            "estimator": "-",
                            "seconds": None,
                            "note": f"{name} supports at most {limit} keys",
                        }
                    )
                    bar.advance()
                    continue
                mech = create(name, d, epsilon)
                stats = mech.collect(generate("uniform", users, d, seed).users, rng)
                for est in mech.estimator_names:
                    times = []
                    result = None
                    for _ in range(repeats):
                        start = time.perf_counter()
                        result = mech.estimate(stats, est)
                        times.append(time.perf_counter() - start)
                    row: dict[str, Any] = {
                        "mechanism": name,
                        "keys": d,
                        "estimator": est,
                        "seconds": statistics.median(times),
                    }
                    if result is not None and "em_iterations" in result.diagnostics:
                        row["em_iterations"] = result.diagnostics["em_iterations"]
                    rows.append(row)
                bar.advance()
            if _joint(name):
                rows += _bench_two_way(name, users, epsilon, seed, repeats, rng)
    return rows


def _bench_two_way(
    name: str, users: int, epsilon: float, seed: int, repeats: int, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Time to answer every two-way conditional query (d (d-1) * 2 of them) from one snapshot."""
    rows = []
    for d in JOINT_STATE_KEYS:
        mech = create(name, d, epsilon)
        assert isinstance(mech, JointStateMechanism)
        stats = mech.collect(generate("conditional", users, d, seed).users, rng)
        queries = two_way_queries(d)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            mech.conditional_many(stats, queries)
            times.append(time.perf_counter() - start)
        rows.append(
            {
                "mechanism": name,
                "keys": d,
                "estimator": f"{len(queries)} two-way queries",
                "seconds": statistics.median(times),
            }
        )
    return rows


#: kvldp's refit-scaling target (time at the larger n / the smaller)
REFIT_SCALING_TARGET = 1.2
#: users simulated per step while building the large collection (bounds memory)
SCALING_STEP = 1_000_000


def _stats_of(name: str, d: int, epsilon: float, users: int, seed: int) -> tuple[Mechanism, Stats, Stats]:
    """(mechanism, statistics of the first 90% of ``users`` simulated reports, of all of
    them): built in ten steps (at most a million users each), so the 90% point is the
    statistics of the previous refit of a live collection."""
    mech = create(name, d, epsilon)
    stats = previous = mech.new_stats()
    rng = np.random.default_rng(seed)
    step = min(SCALING_STEP, -(-users // 10))
    for start in range(0, users, step):
        previous = stats
        part = generate("uniform", min(step, users - start), d, seed + start).users
        stats = stats.merge(mech.collect(part, rng))
    return mech, previous, stats


def _median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_refit_scaling(
    mechanisms: list[str] | None,
    d: int,
    epsilon: float,
    small: int,
    large: int,
    seed: int,
    repeats: int = 3,
) -> list[dict[str, Any]]:
    """Refit time of every estimator on statistics of ``small`` and of ``large`` reports.

    A refit reads the sufficient statistics, never the reports, so its cost must not
    depend on how many reports were folded; the ratio shows it (median of ``repeats``).
    ``em`` is timed twice: from the uniform start, and warm-started from the fit of the
    first 90% of the reports, as the aggregator refits a live window
    (:mod:`kvldp.aggregator.refit`).
    """
    rows = []
    chosen = mechanisms or names()
    with Progress(len(chosen), "bench refit scaling") as bar:
        for name in chosen:
            keys = _fold_domains(name, d)[0]
            fits = [_stats_of(name, keys, epsilon, n, seed) for n in (small, large)]
            for est in fits[0][0].estimator_names:
                variants = [(est, False), *([(f"{est} (warm)", True)] if est == "em" else [])]
                for label, warm in variants:
                    seconds = []
                    for mech, previous, stats in fits:
                        options = {"warm_start": mech.estimate(previous, est)} if warm else {}
                        seconds.append(
                            _median_seconds(partial(mech.estimate, stats, est, **options), repeats)
                        )
                    ratio = seconds[1] / seconds[0]
                    rows.append(
                        {
                            "mechanism": name,
                            "keys": keys,
                            "estimator": label,
                            "n_small": small,
                            "seconds_small": seconds[0],
                            "n_large": large,
                            "seconds_large": seconds[1],
                            "ratio": ratio,
                            "met": ratio <= REFIT_SCALING_TARGET,
                        }
                    )
            bar.advance()
    return rows


SCALING_COLUMNS = [
    "mechanism",
    "keys",
    "estimator",
    "n_small",
    "seconds_small",
    "n_large",
    "seconds_large",
    "ratio",
    "met",
]
