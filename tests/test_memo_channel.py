"""The memoized channel is the mechanism's own channel.

Over device secrets, the report :func:`kvldp.common.guarantees.memo.memoized_report` derives for a state
must have exactly the distribution the mechanism's client gives that state (values +-1),
whose exact per-report audit (``kvldp.common.guarantees.privacy_audit``) is the one the collection passes. Checked
by a chi-square homogeneity test against the client's own reports (alpha = 1e-6), and the
audit itself on the same mechanism.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.guarantees.memo import State, memoized_report
from kvldp.common.guarantees.privacy_audit import audit
from kvldp.common.mechanisms import create


def chi_square_even_df_sf(x: float, df: int) -> float:
    """Pr[chi2_df > x] for even df: exp(-x/2) * sum_{i < df/2} (x/2)^i / i!."""
    half = x / 2.0
    return math.exp(-half) * sum(half**i / math.factorial(i) for i in range(df // 2))


@pytest.mark.parametrize("permanent_public", [False, True])
def test_memoized_reports_over_secrets_follow_the_mechanism(permanent_public: bool) -> None:
    mech = create("kvue", 3, 1.0)
    state = State(np.array([0, 2]), np.array([1.0, -1.0]))
    draws = 20_000
    memo = np.empty(draws, dtype=np.int64)
    for i in range(draws):
        secret = hashlib.sha256(b"channel-%d" % i).digest()
        report = memoized_report(mech, secret, 0x5EED, state, permanent_public)
        memo[i] = int(report["j"]) * 3 + int(report["s"])
    # the client's own reports of the same state, ``draws`` devices at once
    users = KVData(3, np.arange(0, 2 * draws + 1, 2), np.tile(state.keys, draws), np.tile(state.signs, draws))
    batch = mech.perturb_many(users, np.random.default_rng(11))
    fresh = batch["j"].astype(np.int64) * 3 + batch["s"].astype(np.int64)
    table = np.stack([np.bincount(memo, minlength=9), np.bincount(fresh, minlength=9)])
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    used = expected.sum(axis=0) > 0
    statistic = float((((table - expected) ** 2)[:, used] / expected[:, used]).sum())
    df = int(used.sum()) - 1
    assert df % 2 == 0, df
    assert chi_square_even_df_sf(statistic, df) > 1e-6, (statistic, table)
    # the memoized report of a state depends on the secret only: the same secret, the same report
    secret = hashlib.sha256(b"fixed").digest()
    assert memoized_report(mech, secret, 1, state) == memoized_report(mech, secret, 1, state)
    result = audit(mech, exhaustive=True)
    assert result.ok and result.max_log_ratio <= mech.epsilon + 1e-9


STATES = [
    State(np.array(k, dtype=np.int64), np.array(s))
    for k, s in (([0], [1.0]), ([1, 2], [-1.0, 1.0]), ([], []))
]


@pytest.mark.parametrize(
    ("name", "params"), [("kvue", {}), ("privkv", {}), ("olh", {}), ("kvue_multi", {"t": 2}), ("ioh_hrr", {})]
)
def test_permanent_public_fields_do_not_change_with_the_state(name: str, params: dict[str, int]) -> None:
    """With instantaneous randomization a device's public fields (the sampled keys, OLH's
    seed) come from its secret alone: every state of the device reports them alike, and
    without it they are keyed by the state as before (the client run with the state's
    generator for both streams)."""
    mech = create(name, 3, 2.0, **params)
    public = mech.public_fields()
    assert public
    changed = False
    for i in range(20):
        secret = hashlib.sha256(b"public-%d" % i).digest()
        permanent = [memoized_report(mech, secret, 7, s, permanent_public=True) for s in STATES]
        assert all(r[f] == permanent[0][f] for r in permanent for f in public)
        keyed = [memoized_report(mech, secret, 7, s) for s in STATES]
        changed |= any(r[f] != keyed[0][f] for r in keyed for f in public)
    assert changed
