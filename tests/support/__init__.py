"""Shared populations and mechanism settings for the test suite (imported by the tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.mechanisms import create, get
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.itemoracle import ItemOracle

#: settings that keep generic tests fast (PrivKVM's default is 10 rounds)
FAST_PARAMS: dict[str, dict[str, object]] = {"privkvm": {"rounds": 2}}


def single_key_mechanism(name: str) -> bool:
    """Mechanisms whose estimates assume at most ell (= 1 by default) keys per user."""
    return issubclass(get(name), ItemOracle) or name.startswith("pckv")


def make(name: str, d: int, epsilon: float, **params: object) -> Mechanism:
    return create(name, d, epsilon, **{**FAST_PARAMS.get(name, {}), **params})


def multi_key_population(n: int, d: int, rng: np.random.Generator) -> KVData:
    """Users hold key k independently (frequencies spread over (0.15, 0.85)) with
    fractional values clip(N(mu_k, 0.3^2)) so that Disc is exercised."""
    f = np.linspace(0.15, 0.85, d) if d > 1 else np.array([0.4])
    mu = np.linspace(-0.6, 0.6, d) if d > 1 else np.array([0.3])
    present = rng.random((n, d)) < f[None, :]
    values = np.clip(rng.normal(mu[None, :], 0.3, size=(n, d)), -1.0, 1.0)
    return KVData.from_dense(present, values)


def single_key_population(n: int, d: int, rng: np.random.Generator) -> KVData:
    """Each user holds one key (weights rising with the key index) or, with
    probability 0.1, none; fractional values as above."""
    weights = np.arange(1, d + 1, dtype=np.float64)
    probs = np.append(0.9 * weights / weights.sum(), 0.1)
    keys = rng.choice(d + 1, size=n, p=probs)
    keys = np.where(keys == d, -1, keys)
    mu = np.linspace(-0.6, 0.6, d) if d > 1 else np.array([0.3])
    values = np.clip(rng.normal(mu[np.maximum(keys, 0)], 0.3), -1.0, 1.0)
    return KVData.from_single_key(d, keys.astype(np.int64), values)


def population_for(name: str, n: int, d: int, rng: np.random.Generator) -> KVData:
    if single_key_mechanism(name):
        return single_key_population(n, d, rng)
    return multi_key_population(n, d, rng)


def kvue_collection(name: str, **aggregate: object) -> Collection:
    """KVUE at epsilon 1 over four keys with values in [0, 1], one window (``all``), and the
    ``[aggregate]`` settings given: the ingest filters' tests."""
    return parse_collection(
        {
            "name": name,
            "mechanism": "kvue",
            "epsilon": 1.0,
            "key_count": 4,
            "value_range": [0.0, 1.0],
            "aggregate": {"windows": ["all"], **aggregate},
        }
    )


class Rec(NamedTuple):
    """A Kafka record as the ingest path sees it (offset, timestamp, key, value): a named
    tuple, the cheapest record to build by the million."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    timeout: float = 120,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``argv`` as a child process: output captured as text, the exit status kept; ``env``
    adds variables to this process's environment, ``unset`` removes some. With ``check``
    an exit status other than 0 fails the test, showing the end of the output."""
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    done = subprocess.run(
        list(argv),
        cwd=cwd,
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert not check or done.returncode == 0, (list(argv), done.stdout[-3000:] + done.stderr[-3000:])
    return done


def run_kvldp(
    *args: str,
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    cwd: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``kvldp ARGS`` as a user runs it (``python -P -m kvldp``, so the working directory
    stays off ``sys.path``), through :func:`run`."""
    return run([sys.executable, "-P", "-m", "kvldp", *args], cwd=cwd, env=env, unset=unset, timeout=timeout)


def record_and_fold(
    toml: Path, recording: Path, *kafka_args: str, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``kvldp record`` a collection's reports topic from its beginning into ``recording``
    (until it has been idle for 1.5 s), then ``kvldp aggregate --from-file`` it: the
    estimates' JSON. ``kafka_args`` and ``env`` say where the broker is."""
    recorded = run_kvldp(
        "record",
        "--collection",
        str(toml),
        "--out",
        str(recording),
        "--from-beginning",
        "--idle-timeout",
        "1.5",
        *kafka_args,
        env=env,
    )
    assert recorded.returncode == 0, recorded.stderr
    folded = run_kvldp("aggregate", "--collection", str(toml), "--from-file", str(recording))
    assert folded.returncode == 0, folded.stderr
    payload: dict[str, Any] = json.loads(folded.stdout)
    return payload


def random_ratings(path: Path, users: int, items: int, share: float, seed: int) -> int:
    """Write a ``user,item,rating`` file where each user rates each item with probability
    ``share`` (ratings 1-5); return the number of users that rated anything."""
    rng = np.random.default_rng(seed)
    rated = rng.random((users, items)) < share
    stars = rng.integers(1, 6, size=(users, items))
    lines = ["user,item,rating"] + [
        f"u{u},i{i},{stars[u, i]}" for u, i in zip(*np.nonzero(rated), strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return int(rated.any(axis=1).sum())
