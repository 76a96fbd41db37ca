"""``kvldp bench peers``: kvldp's frequency oracles against pure-ldp and multi-freq-ldpy.

kvldp's performance target, for GRR, OUE and OLH (classic one-item oracles, ``ell = 0``),
is server-side aggregation at least 10x faster than the peer libraries at equal MSE
(within 5%). This module measures exactly that and asserts nothing.

* **Server side only.** kvldp's time is ``Stats.fold`` with its validation (the
  aggregator validates every decoded batch too; the peers validate nothing) plus
  ``estimate``; a peer's is its server's aggregation plus estimation. Clients are not
  timed, and neither is the conversion of reports into a peer's Python-level format
  (lists of ints, arrays of rows): that is built before the clock starts.
* **Same reports where the format allows.** A GRR report is an item index and an OUE
  report a bit vector in every library, so our perturbed reports are converted exactly
  (:func:`grr_items`, :func:`ue_rows`) and both sides estimate from identical data.
  Their estimators are closed forms of the same counts, so ``max_abs_diff`` (peer
  estimate minus the peer's formula applied to kvldp's unbiased estimate) is rounding
  noise. An OLH report is (seed, hashed value) and each library has its own hash family
  (kvldp: ``mix64``; the peers: xxh32 of ``str(item)``), so our reports mean nothing to
  a peer's aggregator: for OLH the peer's own client perturbs the *same inputs* and the
  two MSEs come from independent randomness.
* **Comparable estimators.** pure-ldp's estimate is the standard unbiased one and is
  compared with kvldp's ``unbiased``. multi-freq-ldpy's (``MI``) clips negative
  estimates to 0 and renormalises them to sum to 1 (biased, and more accurate on small
  frequencies), so it is compared with kvldp's consistency post-processing,
  ``normsub``.
* **Data.** Zhao et al. 2022's Zipf population (one item per user, as the peers expect). MSE is the
  mean over keys and repeats of (estimate - true frequency)^2; ``analytic_mse`` is the
  exact MSE of the unbiased estimator on this population, the expected value of both
  sides' unbiased MSE. With R repeats and d keys a measured MSE has a relative standard
  error of about sqrt(2 / (R d)) (6% for R = 5, d = 100), so on "same inputs" rows a
  5% MSE difference is below the resolution of the run.
* **Timing.** Median over the repeats, kvldp and peer alternated in the same process
  (order swapped every repeat so neither always runs on a warm cache).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.schema import ReportBatch
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.itemoracle import ItemOracle
from kvldp.common.primitives import FloatArray
from kvldp.common.spec.params import InvalidParameter
from kvldp.progress import Progress
from kvldp.sim.datasets import generate

#: mechanisms both peers implement
MECHANISMS = ("grr", "oue", "olh")

#: population of the benchmark: one item per user, skewed like real telemetry
DATASET = "zipf"

#: the modules each peer distribution must import (pure-ldp's package imports
#: scikit-learn and statsmodels without declaring them, so its import is the real test)
PEER_MODULES: dict[str, tuple[str, ...]] = {
    "pure-ldp": ("pure_ldp.frequency_oracles",),
    "multi-freq-ldpy": (
        "multi_freq_ldpy.pure_frequency_oracles.GRR",
        "multi_freq_ldpy.pure_frequency_oracles.UE",
        "multi_freq_ldpy.pure_frequency_oracles.LH",
    ),
}

SAME_REPORTS = "same reports"
SAME_INPUTS = "same inputs"

#: table columns: speedup = peer_seconds / kvldp_seconds; mse_ratio = kvldp_mse / peer_mse
#: (at most 1.05 meets the target's "equal MSE"); max_abs_diff only on same-report rows
COLUMNS: list[str] = [
    "mechanism",
    "peer",
    "data",
    "kvldp_estimator",
    "peer_estimator",
    "kvldp_seconds",
    "peer_seconds",
    "speedup",
    "kvldp_mse",
    "peer_mse",
    "mse_ratio",
    "analytic_mse",
    "max_abs_diff",
]


class PeersMissing(KvldpError):
    """A peer library is not installed (it lives in the optional ``bench`` extra)."""


def peers_available() -> dict[str, str | None]:
    """Installed version of each peer, or None when it (or an undeclared dependency) is missing."""
    found: dict[str, str | None] = {}
    for dist, modules in PEER_MODULES.items():
        try:
            for module in modules:
                importlib.import_module(module)
            found[dist] = importlib.metadata.version(dist)
        except ImportError:  # importlib.metadata.PackageNotFoundError is one too
            found[dist] = None
    return found


def require_peers() -> dict[str, str]:
    """Versions of all peers, or :class:`PeersMissing` naming the install command."""
    found = peers_available()
    missing = [dist for dist, version in found.items() if version is None]
    if missing:
        raise PeersMissing(
            f"kvldp bench peers needs {' and '.join(missing)}, which are not installed: "
            "install the bench extra with `make bench-deps` (pip install -e '.[bench]')"
        )
    return {dist: str(version) for dist, version in found.items()}


# ------------------------------------------------------------------ report formats
def grr_items(batch: ReportBatch) -> list[int]:
    """kvldp GRR reports (``ell = 0``) as both peers' servers take them: one item index in
    [0, d) per report, as Python ints (what their clients return)."""
    items: list[int] = batch["y"].tolist()
    return items


def ue_rows(batch: ReportBatch, d: int, dtype: type[np.generic]) -> NDArray[Any]:
    """kvldp OUE reports (packed little-endian bitsets) as one 0/1 row per report, the
    peers' format (pure-ldp's client returns int64 rows, multi-freq-ldpy's float64)."""
    return np.unpackbits(batch["bits"], axis=1, count=d, bitorder="little").astype(dtype)


def clip_renormalise(frequency: FloatArray) -> FloatArray:
    """multi-freq-ldpy's ``MI`` post-processing of the unbiased frequencies: negatives to
    0, then divided by their sum when it is positive."""
    clipped = np.clip(frequency, 0.0, None)
    total = float(clipped.sum())
    return clipped / total if total > 0 else clipped


# ------------------------------------------------------------------ peer adapters
@dataclass(frozen=True)
class _Case:
    """One peer's implementation of one mechanism, as the benchmark drives it."""

    peer: str
    data: str
    peer_estimator: str
    kvldp_estimator: str
    #: untimed: the peer's reports, converted from ours or made by its client from the items
    prepare: Callable[[ReportBatch, IntArray], Any]
    #: timed: the peer's aggregation and estimation, as frequencies (fractions of users)
    aggregate: Callable[[Any], FloatArray]
    #: same reports only: the peer's estimator applied to kvldp's unbiased frequencies
    reference: Callable[[FloatArray], FloatArray] | None


def _identity(x: int) -> int:
    """pure-ldp's ``index_mapper`` defaults to x - 1 (items 1..d); ours are already 0..d-1."""
    return x


def _pure_ldp(name: str, d: int, epsilon: float) -> _Case:
    from pure_ldp.frequency_oracles import DEServer, LHClient, LHServer, UEServer

    def run(server: Any, reports: Any) -> FloatArray:
        server.aggregate_all(reports)
        counts = server.estimate_all(range(d), suppress_warnings=True)
        return np.asarray(counts, dtype=np.float64) / float(server.n)

    def unchanged(frequency: FloatArray) -> FloatArray:
        return frequency

    case = partial(_Case, "pure-ldp")
    same_reports = partial(case, SAME_REPORTS, "unbiased", "unbiased")
    if name == "grr":
        return same_reports(
            lambda batch, _items: grr_items(batch),
            lambda reports: run(DEServer(epsilon, d, index_mapper=_identity), reports),
            unchanged,
        )
    if name == "oue":
        return same_reports(
            lambda batch, _items: ue_rows(batch, d, np.int64),
            lambda reports: run(UEServer(epsilon, d, use_oue=True, index_mapper=_identity), reports),
            unchanged,
        )

    def olh_reports(_batch: ReportBatch, items: IntArray) -> list[tuple[int, int]]:
        client = LHClient(epsilon, d, use_olh=True, index_mapper=_identity)
        return [client.privatise(item) for item in items.tolist()]

    return case(
        SAME_INPUTS,
        "unbiased",
        "unbiased",
        olh_reports,
        lambda reports: run(LHServer(epsilon, d, use_olh=True, index_mapper=_identity), reports),
        None,
    )


def _multi_freq_ldpy(name: str, d: int, epsilon: float) -> _Case:
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI
    from multi_freq_ldpy.pure_frequency_oracles.LH import LH_Aggregator_MI, LH_Client
    from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Aggregator_MI

    def frequencies(estimate: Any) -> FloatArray:
        return np.asarray(estimate, dtype=np.float64)

    case = partial(_Case, "multi-freq-ldpy")
    same_reports = partial(case, SAME_REPORTS, "MI (clip + renormalise)", "normsub")
    if name == "grr":
        return same_reports(
            lambda batch, _items: grr_items(batch),
            lambda reports: frequencies(GRR_Aggregator_MI(reports, d, epsilon)),
            clip_renormalise,
        )
    if name == "oue":
        return same_reports(
            lambda batch, _items: ue_rows(batch, d, np.float64),
            lambda reports: frequencies(UE_Aggregator_MI(reports, epsilon, optimal=True)),
            clip_renormalise,
        )
    return case(
        SAME_INPUTS,
        "MI (clip + renormalise)",
        "normsub",
        lambda _batch, items: [LH_Client(item, d, epsilon, optimal=True) for item in items.tolist()],
        lambda reports: frequencies(LH_Aggregator_MI(reports, d, epsilon, optimal=True)),
        None,
    )


# ------------------------------------------------------------------ the benchmark
@dataclass
class _Tally:
    """Per (mechanism, peer) measurements accumulated over the repeats."""

    kvldp_seconds: list[float] = field(default_factory=list)
    peer_seconds: list[float] = field(default_factory=list)
    kvldp_sq_error: list[float] = field(default_factory=list)
    peer_sq_error: list[float] = field(default_factory=list)
    max_abs_diff: float = 0.0


def _kvldp_frequency(mech: ItemOracle, batch: ReportBatch, estimator: str) -> FloatArray:
    """kvldp's server side: fold the batch into fresh statistics (validating it) and estimate."""
    return mech.estimate(mech.new_stats().fold(mech.plausible(batch)), estimator).frequency


def _timed(run: Callable[[], FloatArray]) -> tuple[float, FloatArray]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def bench_peers(
    mechanisms: list[str], d: int, epsilon: float, n: int, repeats: int, seed: int
) -> list[dict[str, Any]]:
    """One row per (mechanism, peer): server-side time and frequency MSE of kvldp and the
    peer over ``repeats`` collections of ``n`` users over ``d`` keys (see the module
    docstring for what is compared and how). Raises :class:`PeersMissing` without the
    bench extra."""
    unknown = sorted(set(mechanisms) - set(MECHANISMS))
    if unknown:
        raise InvalidParameter(f"bench peers compares {', '.join(MECHANISMS)}; not {', '.join(unknown)}")
    if repeats < 1:
        raise InvalidParameter(f"bench peers needs at least one repeat, got {repeats}")
    versions = require_peers()
    users = generate(DATASET, n, d, seed).users
    truth = users.truth()[0]
    rows: list[dict[str, Any]] = []
    with Progress(len(mechanisms) * repeats, "bench peers") as bar:
        for name in mechanisms:
            mech = create(name, d, epsilon, ell=0)
            assert isinstance(mech, ItemOracle)
            analytic = float(np.mean(mech.count_variance(float(n), truth * n))) / n**2
            cases = [_pure_ldp(name, d, epsilon), _multi_freq_ldpy(name, d, epsilon)]
            tallies = [_Tally() for _ in cases]
            for r in range(repeats):
                rng = np.random.default_rng(np.random.SeedSequence([seed, r]))
                batch = mech.perturb_many(users, rng)
                unbiased = _kvldp_frequency(mech, batch, "unbiased")
                # the peers' OLH clients draw from Python's and numpy's global generators
                # (multi-freq-ldpy's numba-compiled GRR step has its own, which cannot be seeded here)
                peer_seed = int(rng.integers(2**32))
                random.seed(peer_seed)
                np.random.seed(peer_seed)  # noqa: NPY002 - the peers use the legacy global state
                for case, tally in zip(cases, tallies, strict=True):
                    ours = partial(_kvldp_frequency, mech, batch, case.kvldp_estimator)
                    theirs = partial(case.aggregate, case.prepare(batch, users.keys))
                    if r % 2 == 0:
                        kvldp_s, kvldp_f = _timed(ours)
                        peer_s, peer_f = _timed(theirs)
                    else:
                        peer_s, peer_f = _timed(theirs)
                        kvldp_s, kvldp_f = _timed(ours)
                    tally.kvldp_seconds.append(kvldp_s)
                    tally.peer_seconds.append(peer_s)
                    tally.kvldp_sq_error.append(float(np.mean((kvldp_f - truth) ** 2)))
                    tally.peer_sq_error.append(float(np.mean((peer_f - truth) ** 2)))
                    if case.reference is not None:
                        diff = float(np.max(np.abs(peer_f - case.reference(unbiased))))
                        tally.max_abs_diff = max(tally.max_abs_diff, diff)
                bar.advance()
            for case, tally in zip(cases, tallies, strict=True):
                kvldp_s = statistics.median(tally.kvldp_seconds)
                peer_s = statistics.median(tally.peer_seconds)
                kvldp_mse = statistics.fmean(tally.kvldp_sq_error)
                peer_mse = statistics.fmean(tally.peer_sq_error)
                rows.append(
                    {
                        "mechanism": name,
                        "peer": case.peer,
                        "peer_version": versions[case.peer],
                        "data": case.data,
                        "kvldp_estimator": case.kvldp_estimator,
                        "peer_estimator": case.peer_estimator,
                        "kvldp_seconds": kvldp_s,
                        "peer_seconds": peer_s,
                        "speedup": peer_s / kvldp_s,
                        "kvldp_mse": kvldp_mse,
                        "peer_mse": peer_mse,
                        "mse_ratio": kvldp_mse / peer_mse,
                        "analytic_mse": analytic,
                        "max_abs_diff": tally.max_abs_diff if case.reference is not None else None,
                        "d": d,
                        "epsilon": epsilon,
                        "n": n,
                        "repeats": repeats,
                    }
                )
    return rows
