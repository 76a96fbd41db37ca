"""Continuous collection: a fleet reporting over ten periods, memoized and not.

The reports go through the real wire format and the aggregator's ingest path (decode,
period ledger, device book, buckets), and the refit's exported standard errors are
compared with the Monte Carlo spread of the estimates:

* without memoization every report is fresh, so a 10-period window estimates the
  device-period average (each device counted once per period) from 10 n independent
  reports;
* with memoization a device repeats one report while its state holds, so the window
  counts each device once, at its latest report: it estimates the devices' latest state.

Memo entries are drawn here with the vectorised client and one generator per repeat
instead of one HMAC-keyed generator per device (``kvldp.common.guarantees.memo``), which would cost
~70 us per device-state in Python. Given the device's state both give the mechanism's
output distribution, and the keyed derivation itself is tested in
``tests/test_device_privacy.py``; what this test needs is the memo *logic* — alpha-point
rounding with a permanent alpha per device and key, an unchanged state re-sending the
identical report, a changed state drawing a new one, a return to an old state re-sending
the old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import pytest

from kvldp.aggregator.ingest import plan
from kvldp.aggregator.refit import refit
from kvldp.aggregator.state import AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.messages.wire import WireFormat

from support import Rec

D = 3
N = 2000
PERIODS = 10
CHURN = 0.3
REPEATS = 400
HOUR_MS = 3_600_000
T0 = 1_800_000_000_000
FREQ = np.array([0.7, 0.5, 0.4])
MEAN = np.array([0.3, -0.2, 0.1])


def fleet_collection(memoize: bool) -> Collection:
    return parse_collection(
        {
            "name": f"fleet-{'memo' if memoize else 'fresh'}",
            "mechanism": "pckv_ue",
            "epsilon": 3.0,
            "key_count": D,
            "value_range": [-1.0, 1.0],
            "params": {"ell": D},
            "aggregate": {"estimators": ["unbiased"], "windows": ["10h", "all"]},
            "privacy": {"memoize": memoize, "report_period": "1h"},
        }
    )


@dataclass(frozen=True)
class Fleet:
    """Every device's pairs in every period: present (P, N, D) and values (P, N, D)."""

    present: np.ndarray
    values: np.ndarray

    @classmethod
    def draw(cls, seed: int) -> Fleet:
        rng = np.random.default_rng(seed)

        def pairs() -> tuple[np.ndarray, np.ndarray]:
            present = rng.random((N, D)) < FREQ
            values = np.clip(MEAN + 0.35 * rng.standard_normal((N, D)), -1.0, 1.0)
            return present, values

        present, values = np.empty((PERIODS, N, D), bool), np.empty((PERIODS, N, D))
        present[0], values[0] = pairs()
        for t in range(1, PERIODS):
            churned = rng.random(N) < CHURN
            new_present, new_values = pairs()
            present[t] = np.where(churned[:, None], new_present, present[t - 1])
            values[t] = np.where(churned[:, None], new_values, values[t - 1])
        return cls(present, values)

    def truth(self, periods: slice) -> tuple[np.ndarray, np.ndarray]:
        """Frequency and mean over the device-periods in ``periods``."""
        present, values = self.present[periods], self.values[periods]
        holders = present.sum(axis=(0, 1))
        return holders / (present.shape[0] * N), (values * present).sum(axis=(0, 1)) / holders


def as_users(present: np.ndarray, values: np.ndarray) -> KVData:
    return KVData.from_dense(present, np.where(present, values, 0.0))


def period_reports(
    collection: Collection, fleet: Fleet, memoize: bool, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """The reports every device sends in every period, as columnar batches."""
    mech = collection.mechanism
    if not memoize:
        return [mech.perturb_many(as_users(fleet.present[t], fleet.values[t]), rng) for t in range(PERIODS)]
    alpha = rng.random((N, D))  # drawn once per device and key
    signs = np.where(alpha < (1.0 + fleet.values) / 2.0, 1.0, -1.0)
    # state code per (period, device): key k absent 0, present with sign -1 -> 1, +1 -> 2
    state = (fleet.present * (1 + (signs > 0)) * 3 ** np.arange(D)).sum(axis=2)
    # every (device, state) pair met, as device * 3^D + state, sorted
    pairs = np.unique(np.arange(N) * 3**D + state)
    digits = (pairs[:, None] % 3**D // 3 ** np.arange(D)) % 3
    memo = mech.perturb_many(as_users(digits > 0, np.where(digits == 2, 1.0, -1.0)), rng)
    out = []
    for t in range(PERIODS):
        row = np.searchsorted(pairs, np.arange(N) * 3**D + state[t])
        out.append({name: column[row] for name, column in memo.items()})
    return out


def aggregate(collection: Collection, batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Send every period's reports through the wire and the ingest path; refit."""
    wire = WireFormat(collection)
    state = AggregatorState(collection)
    keys = [b"device-%d" % i for i in range(N)]
    offset = 0
    for t, batch in enumerate(batches):
        ts = T0 + t * HOUR_MS
        rids = np.arange(1 + t * N, 1 + (t + 1) * N, dtype=np.uint64)
        records = list(
            map(Rec, range(offset, offset + N), repeat(ts, N), keys, wire.encode_many(batch, ts, rids))
        )
        offset += N
        work = plan(state, wire, 0, records, b"ledger")
        assert work is not None and not work.rejected
        work.apply(state)
    now = T0 + (PERIODS - 1) * HOUR_MS + 1
    windows = state.window_stats(now)
    assert windows["10h"] == windows["all"]
    fit = refit(collection, {"10h": windows["10h"]}, None).fits["10h"]
    return {"n": fit.n_reports, "estimate": fit.estimates["unbiased"], "state": state}


@pytest.mark.slow
@pytest.mark.parametrize(
    "memoize",
    # without memoization the window is ten ordinary windows' worth of fresh reports,
    # whose error bars tests/test_calibration.py checks for every mechanism: the long
    # run of that case is kept for `pytest -m full`
    [pytest.param(False, marks=pytest.mark.full), True],
    ids=["fresh", "memoized"],
)
def test_ten_period_window_stderr_matches_monte_carlo(memoize: bool) -> None:
    """Over 400 repeats of the fleet: every key's estimate unbiased for what its window
    estimates (4 sd), the exported standard errors within 15% of the Monte Carlo spread,
    and the exported 95% intervals covering 0.95 of the pairs (4 sd of a proportion)."""
    collection = fleet_collection(memoize)
    fleet = Fleet.draw(seed=7)
    rng = np.random.default_rng(1234 + memoize)
    # memoized: the devices' latest state; fresh: the device-period average of all ten
    f_true, m_true = fleet.truth(slice(PERIODS - 1, PERIODS) if memoize else slice(0, PERIODS))
    est = {k: np.empty((REPEATS, D)) for k in ("f", "m", "f_se", "m_se", "f_lo", "f_hi", "m_lo", "m_hi")}
    for r in range(REPEATS):
        result = aggregate(collection, period_reports(collection, fleet, memoize, rng))
        assert result["n"] == (N if memoize else N * PERIODS)
        e = result["estimate"]
        est["f"][r], est["m"][r] = e.frequency, e.mean
        est["f_se"][r], est["m_se"][r] = e.frequency_stderr, e.mean_stderr
        (est["f_lo"][r], est["f_hi"][r]), (est["m_lo"][r], est["m_hi"][r]) = (
            e.frequency_interval,
            e.mean_interval,
        )
    for value, se, truth in (("f", "f_se", f_true), ("m", "m_se", m_true)):
        sd = est[value].std(axis=0, ddof=1)
        bias = est[value].mean(axis=0) - truth
        ratio = sd / est[se].mean(axis=0)
        assert np.all(np.abs(bias) < 4 * sd / np.sqrt(REPEATS)), (value, bias, sd)
        assert np.all(np.abs(ratio - 1) < 0.15), (value, ratio)
        # the exported 95% intervals hold the truth for 0.95 of the REPEATS x D pairs,
        # within 4 sd of a proportion over them
        covered = (est[f"{value}_lo"] <= truth) & (truth <= est[f"{value}_hi"])
        assert abs(covered.mean() - 0.95) < 4 * np.sqrt(0.95 * 0.05 / covered.size), (value, covered.mean())
