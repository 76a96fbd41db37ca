"""``kvldp bench peers`` without the peers: exact report conversions and the missing-peer error.

The peer libraries live in the optional ``bench`` extra, which ``make test`` does not
install. Their estimators are transcribed here from their sources (pure-ldp 1.2.0
``DEServer`` / ``UEServer``, multi-freq-ldpy 0.2.5 ``MI``) and applied to our reports
after conversion to their formats: that they reproduce kvldp's estimates proves the
conversion is exact and that the benchmark compares like with like. One test runs the
real peers, and only it is skipped when they are absent.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from kvldp.bench import peers
from kvldp.common.data.schema import ReportBatch
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import create
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.primitives import FloatArray, pack_bits
from kvldp.common.spec.params import InvalidParameter
from kvldp.sim.datasets import generate


@pytest.fixture(autouse=True)
def _client_probabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    """These worked examples and folds check the client's p, q (a, b) exactly: the
    plausibility rule (docs/plausibility.md) refuses nothing here."""
    monkeypatch.setattr(Mechanism, "false_refusal_bound", 0.0)


EPS = 1.0


def _collect(name: str, d: int, n: int) -> tuple[ReportBatch, FloatArray]:
    """Our reports of a Zipf population and kvldp's unbiased frequency estimate from them."""
    mech = create(name, d, EPS, ell=0)
    batch = mech.perturb_many(generate("zipf", n, d, seed=3).users, np.random.default_rng(11))
    return batch, mech.estimate(mech.new_stats().fold(batch), "unbiased").frequency


def _multi_freq_ldpy_mi(counts: FloatArray, n: int, p: float, q: float) -> FloatArray:
    """multi-freq-ldpy 0.2.5 ``estimators.Histogram_estimator.MI``, transcribed."""
    est = np.array((counts - n * q) / (p - q)).clip(0)
    return est / sum(est) if sum(est) > 0 else est


def test_grr_items_are_our_reports_and_feed_the_peer_estimators() -> None:
    d, n = 7, 4000
    batch, unbiased = _collect("grr", d, n)
    items = peers.grr_items(batch)
    assert all(type(i) is int for i in items)
    np.testing.assert_array_equal(np.array(items), batch["y"])
    counts = np.bincount(items, minlength=d).astype(np.float64)
    # pure-ldp DEServer._update_estimates: (const * aggregated - n) / (const - d), a count
    const = math.exp(EPS) + d - 1
    np.testing.assert_allclose((const * counts - n) / (const - d) / n, unbiased, atol=1e-12)
    p = math.exp(EPS) / (math.exp(EPS) + d - 1)
    mi = _multi_freq_ldpy_mi(counts, n, p, (1 - p) / (d - 1))
    np.testing.assert_allclose(mi, peers.clip_renormalise(unbiased), atol=1e-12)


@pytest.mark.parametrize("d", [8, 13])  # a whole byte and a padded last byte
def test_ue_rows_are_our_bit_vectors_and_feed_the_peer_estimators(d: int) -> None:
    n = 3000
    batch, unbiased = _collect("oue", d, n)
    for dtype in (np.int64, np.float64):
        rows = peers.ue_rows(batch, d, dtype)
        assert rows.shape == (n, d) and rows.dtype == dtype
        assert set(np.unique(rows)) <= {0, 1}
        np.testing.assert_array_equal(pack_bits(rows.astype(bool)), batch["bits"])
    rows = peers.ue_rows(batch, d, np.float64)
    # pure-ldp UEServer.aggregate adds every row; _update_estimates: (sum - n q) / (p - q)
    p, q = 0.5, 1 / (math.exp(EPS) + 1)
    aggregated = np.zeros(d)
    for row in rows:
        aggregated += row
    np.testing.assert_allclose((aggregated - n * q) / (p - q) / n, unbiased, atol=1e-12)
    mi = _multi_freq_ldpy_mi(sum(rows), n, p, q)
    np.testing.assert_allclose(mi, peers.clip_renormalise(unbiased), atol=1e-12)


def test_clip_renormalise_matches_multi_freq_ldpy_edge_cases() -> None:
    out = peers.clip_renormalise(np.array([0.5, -0.2, 0.3, 0.0]))
    np.testing.assert_allclose(out, [0.625, 0.0, 0.375, 0.0])
    np.testing.assert_array_equal(peers.clip_renormalise(np.array([-0.1, -0.3])), [0.0, 0.0])


def _hide(monkeypatch: pytest.MonkeyPatch, dist: str) -> None:
    for module in peers.PEER_MODULES[dist]:
        monkeypatch.setitem(sys.modules, module, None)  # makes the import fail


def test_missing_peers_give_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for dist in peers.PEER_MODULES:
        _hide(monkeypatch, dist)
    assert peers.peers_available() == {"pure-ldp": None, "multi-freq-ldpy": None}
    with pytest.raises(peers.PeersMissing, match=r"pure-ldp and multi-freq-ldpy.*make bench-deps") as err:
        peers.bench_peers(["grr"], 10, EPS, 100, 1, 0)
    assert isinstance(err.value, KvldpError)  # the CLI prints it as one line, no traceback


def test_only_the_missing_peer_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "multi-freq-ldpy")
    assert peers.peers_available()["multi-freq-ldpy"] is None
    monkeypatch.setattr(peers, "peers_available", lambda: {"pure-ldp": "1.2.0", "multi-freq-ldpy": None})
    with pytest.raises(peers.PeersMissing, match=r"needs multi-freq-ldpy, which"):
        peers.require_peers()


def test_arguments_are_checked_before_the_peers() -> None:
    with pytest.raises(InvalidParameter, match="not sue"):
        peers.bench_peers(["grr", "sue"], 10, EPS, 100, 1, 0)
    with pytest.raises(InvalidParameter, match="at least one repeat"):
        peers.bench_peers(["grr"], 10, EPS, 100, 0, 0)


def test_against_the_installed_peers() -> None:
    """The one check that needs the bench extra: same reports give the peers' estimates."""
    if None in peers.peers_available().values():
        pytest.skip("the bench extra is not installed (make bench-deps)")
    rows = peers.bench_peers(list(peers.MECHANISMS), 12, EPS, 2000, 2, 5)
    assert [(r["mechanism"], r["peer"]) for r in rows] == [
        (m, p) for m in peers.MECHANISMS for p in ("pure-ldp", "multi-freq-ldpy")
    ]
    assert set(peers.COLUMNS) <= set(rows[0])
    for row in rows:
        assert row["kvldp_seconds"] > 0 and row["peer_seconds"] > 0
        if row["mechanism"] == "olh":
            assert row["data"] == peers.SAME_INPUTS and row["max_abs_diff"] is None
        else:
            assert row["data"] == peers.SAME_REPORTS and row["max_abs_diff"] < 1e-9
        if row["peer"] == "pure-ldp" and row["data"] == peers.SAME_REPORTS:
            assert row["kvldp_mse"] == pytest.approx(row["peer_mse"], rel=1e-9)
