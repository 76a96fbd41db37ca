"""Instantaneous randomization: the randomizer of every send and the composed channels
(docs/mechanisms.md, *Instantaneous randomization*).

For every mechanism that can be memoized (all but ``privkvm``), at a few configurations:

* privacy, exactly: the composed channel's audit (the device's exact model composed with
  the randomizer) is eps1, tight, and equals the composed mechanism's own model to float
  round-off; the device's own audit (the per-state guarantee eps-infinity) is unchanged;
* the randomizer's output law against its solved keep probability, per output kind (fixed
  seeds, tolerances from the binomial variances);
* the composed client is the device's client followed by the randomizer, public fields
  untouched;
* estimation: the composed channel's expected statistics go back to the truth through
  ``unbiased``, and on simulated composed reports its frequencies are unbiased within 4
  analytic standard errors (the population replicated R times: one pooled estimate of a
  linear estimator is the mean of R).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvldp.aggregator.devices import epsilon_per_charge
from kvldp.cli import main
from kvldp.common.channel.instantaneous import (
    BitsOutput,
    SymbolOutput,
    TernaryOutput,
    kept_and_other,
    solve_contrast,
    symbol_kernel,
)
from kvldp.common.channel.output_model import DenseModel, OutputModel, compose_model
from kvldp.common.config.collection_file import load_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.guarantees.privacy_audit import audit
from kvldp.common.mechanisms import create, names
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.pckv import PCKV
from kvldp.common.mechanisms.pckv_budget import composed_probabilities
from kvldp.common.primitives import pack_bits
from kvldp.common.spec.params import InvalidParameter

from support import population_for

MEMOIZABLE = [name for name in names() if name != "privkvm"]
EPS = 2.0

#: (mechanism, keys, parameters): every memoizable mechanism, and the variants whose
#: composed channel is built differently (padding, other allocations, a default value
#: that makes F2M loose, several sampled keys)
SETTINGS = [(name, 3, {}) for name in MEMOIZABLE] + [
    ("grr", 4, {"ell": 2}),
    ("oue", 4, {"ell": 2}),
    ("olh", 3, {"ell": 0}),
    ("kvue_multi", 3, {"t": 2}),
    ("f2m", 3, {"default_value": 0.3, "key_fraction": 0.3}),
    ("privkv", 3, {"key_fraction": 0.7}),
    ("pckv_ue", 4, {"ell": 2}),
    ("pckv_ue", 3, {"allocation": "naive"}),
    ("pckv_grr", 4, {"ell": 2}),
    ("pckv_grr", 3, {"ell": 3, "allocation": "nonoptimized"}),
]


def channel(name: str, d: int, params: dict[str, object]) -> tuple[Mechanism, Mechanism]:
    """(device, composed) at EPS, eps1 at 0.6 of the device's exact per-report level (PrivKV's
    and PCKV's naive allocations lie below EPS)."""
    device = create(name, d, EPS, **params)
    return device, device.composed(0.6 * audit(device, exhaustive=True).max_log_ratio)


def matrix(model: OutputModel) -> np.ndarray:
    return model.probs if isinstance(model, DenseModel) else model.factors


@pytest.mark.parametrize(("name", "d", "params"), SETTINGS)
def test_composed_channel_is_exactly_eps1_and_its_own_model(
    name: str, d: int, params: dict[str, object]
) -> None:
    device, composed = channel(name, d, params)
    assert composed.composition is not None and composed.composition.device is device
    randomizer = composed.composition.randomizer
    eps1 = randomizer.epsilon_per_report
    assert composed.epsilon == eps1 == composed.claimed_epsilon()
    for exhaustive in (True, False):
        own = composed.audit_model(exhaustive)
        via = compose_model(device.audit_model(exhaustive), randomizer.output.size, randomizer.contrast)
        assert own.inputs == via.inputs
        np.testing.assert_allclose(matrix(own), matrix(via), rtol=0, atol=1e-14)
        result = audit(composed, exhaustive=exhaustive)
        assert result.notion == "ldp" and result.ok and result.tight, result
        assert abs(result.max_log_ratio - eps1) <= 1e-9
    # per state: the memoized report is the device's, its guarantee unchanged
    state = audit(device, exhaustive=True)
    assert (
        state.ok
        and state.max_log_ratio == audit(create(name, d, EPS, **params), exhaustive=True).max_log_ratio
    )
    assert randomizer.epsilon_on_output >= eps1


@pytest.mark.parametrize(
    "name", ["grr", "oue", "sue", "olh", "hr", "kvue", "kvoh", "ioh", "ioh_oue", "ioh_hrr"]
)
def test_in_family_channels_are_the_mechanism_at_eps1(name: str) -> None:
    """A channel whose family is closed under the randomizer is the mechanism at eps1 (with
    the parameters a default would resolve from epsilon fixed: OLH's g): the randomizer's
    contrast is the ratio of the family's contrasts p - q."""
    device = create(name, 3, EPS)
    composed = device.composed(0.8)
    assert type(composed) is type(device)
    plain = create(name, 3, 0.8, **({"g": device.g} if name == "olh" else {}))  # type: ignore[attr-defined]
    randomizer = composed.composition.randomizer  # type: ignore[union-attr]
    via = compose_model(device.audit_model(True), randomizer.output.size, randomizer.contrast)
    np.testing.assert_allclose(matrix(plain.audit_model(True)), matrix(via), rtol=0, atol=1e-14)
    assert composed.config == {**device.config, "instantaneous_epsilon": 0.8}
    assert composed.digest != device.digest and device.config == create(name, 3, EPS).config


def test_solved_parameters_follow_the_closed_forms() -> None:
    # GRR over D items: the contrast multiplies p - q
    grr = create("grr", 4, 2.0)
    lam = grr.instantaneous(1.0).contrast
    p, q = math.e / (math.e + 4), 1 / (math.e + 4)
    big_p, big_q = math.exp(2) / (math.exp(2) + 4), 1 / (math.exp(2) + 4)
    assert lam == pytest.approx((p - q) / (big_p - big_q), rel=1e-14)
    # OUE: q* = 1/2 + lambda (q - 1/2) = 1/(e^eps1 + 1), p* stays 1/2
    oue = create("oue", 4, 2.0).instantaneous(1.0)
    assert 0.5 + oue.contrast * (1 / (math.exp(2) + 1) - 0.5) == pytest.approx(1 / (math.e + 1), rel=1e-14)
    assert oue.keep == pytest.approx(1 - kept_and_other(2, oue.contrast)[1])
    # FHR: e^eps1 = 1 + lambda p K / ((1 - lambda) (L/2)^2), L = 8 for 4 keys and none
    fhr = create("fhr", 4, 2.0).instantaneous(1.0)
    p_fhr = math.exp(2) / (math.exp(2) + 1)
    odds = fhr.contrast / (1 - fhr.contrast)
    assert 1 + odds * p_fhr * 56 / 16 == pytest.approx(math.e, rel=1e-12)
    # PCKV: every per-key probability P becomes q1 + lambda P
    ue = create("pckv_ue", 5, 2.0)
    assert isinstance(ue, PCKV)
    composed = ue.composed(1.0)
    assert isinstance(composed, PCKV)
    lam = composed.composition.randomizer.contrast  # type: ignore[union-attr]
    q1 = (1 - lam) / 3
    assert composed.client_a == pytest.approx(1 - (q1 + lam * (1 - ue.client_a)), rel=1e-14)
    assert composed.client_b / 2 == pytest.approx(q1 + lam * ue.client_b / 2, rel=1e-14)
    assert composed.client_a * composed.p == pytest.approx(q1 + lam * ue.client_a * ue.p, rel=1e-14)
    assert composed_probabilities(0.5, 0.2, 0.8, 3, 1.0) == pytest.approx((0.5, 0.2, 0.8))
    # F2M: each bit's randomized response at p_i becomes (1 - lambda)/2 + lambda p_i
    f2m = create("f2m", 3, 2.0)
    composed_f2m = f2m.composed(1.0)
    lam = composed_f2m.composition.randomizer.contrast  # type: ignore[union-attr]
    p1 = (1 - lam) / 2 + lam * f2m.p1  # type: ignore[attr-defined]
    p2 = (1 - lam) / 2 + lam * f2m.p2  # type: ignore[attr-defined]
    # |v_default| = 1: the composed level is ln(p1/(1-p1)) + ln(p2/(1-p2)) = eps1
    assert math.log(p1 / (1 - p1)) + math.log(p2 / (1 - p2)) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(
        composed_f2m.transition(),  # type: ignore[attr-defined]
        create("f2m", 3, 1.0, key_fraction=math.log(p1 / (1 - p1))).transition(),  # type: ignore[attr-defined]
        atol=1e-14,
    )


def test_solve_contrast_stays_at_or_below_its_target() -> None:
    lam = solve_contrast(lambda c: 2 * c, 0.5)
    assert lam == pytest.approx(0.25, abs=1e-15) and 2 * lam <= 0.5


def test_what_cannot_be_randomized_is_refused() -> None:
    privkv = create("privkv", 3, 1.0)  # its exact level is 0.719
    with pytest.raises(InvalidParameter, match=r"below the mechanism's own exact per-report level, 0\.7190"):
        privkv.composed(0.72)
    with pytest.raises(InvalidParameter, match="below"):
        create("grr", 3, 1.0).composed(1.0)
    with pytest.raises(InvalidParameter, match="below"):  # its level is 4 plus a rounding error
        create("pckv_ue", 5, 4.0).composed(4.0)
    with pytest.raises(InvalidParameter, match="positive"):
        create("grr", 3, 1.0).composed(0.0)
    with pytest.raises(InvalidParameter, match="privkvm has no instantaneous randomization"):
        create("privkvm", 3, 1.0).composed(0.5)
    with pytest.raises(InvalidParameter, match="already a composed channel"):
        create("grr", 3, 1.0).composed(0.5).composed(0.2)


# ----------------------------------------------------------------------- the randomizer
def within(counts: np.ndarray, probs: np.ndarray, what: str) -> None:
    """Every cell within 5 binomial standard deviations of its expectation."""
    total = counts.sum(axis=-1, keepdims=True)
    expected = total * probs
    sd = np.sqrt(total * probs * (1 - probs))
    assert np.all(np.abs(counts - expected) <= 5 * sd + 1e-9), (what, counts, expected)


def test_a_symbol_is_kept_with_p1_else_uniform() -> None:
    rng = np.random.default_rng(20)
    out = SymbolOutput(("y",), 5)
    n = 50_000
    for start in range(5):
        batch = {"y": np.full(n, start, dtype=np.int64), "seed": np.arange(n, dtype=np.uint64)}
        new = out.randomize(batch, 0.4, rng)
        assert set(new) == {"y"} and new["y"].dtype == np.int64
        within(np.bincount(new["y"], minlength=5), symbol_kernel(5, 0.4)[:, start], f"from {start}")
    keep, other = kept_and_other(5, 0.4)
    assert keep == pytest.approx(0.52) and other == pytest.approx(0.12)


@pytest.mark.parametrize("name", ["pckv_grr", "fhr"])
def test_a_group_of_fields_is_one_symbol(name: str) -> None:
    """PCKV-GRR's (k, v) and FHR's (x, y): the symbols are a bijection with the valid pairs,
    and randomized reports stay valid with the symbol kernel's law."""
    mech = create(name, 3, 2.0)
    out = mech.randomized_output()
    assert isinstance(out, SymbolOutput)
    symbols = np.arange(out.size, dtype=np.int64)
    assert out.decode is not None
    fields = out.decode(symbols)
    batch = {f: np.asarray(fields[f], dtype=np.int64) for f in out.fields}
    assert mech.valid_rows(batch).all()
    assert np.array_equal(out.symbols(batch), symbols)
    rng = np.random.default_rng(21)
    n = 40_000
    start = {f: np.repeat(col[:1], n) for f, col in batch.items()}
    new = out.randomize(start, 0.3, rng)
    assert mech.valid_rows(new).all()
    within(np.bincount(out.symbols(new), minlength=out.size), symbol_kernel(out.size, 0.3)[:, 0], name)


def test_packed_bits_flip_with_q1_exactly_and_padding_stays_zero() -> None:
    rng = np.random.default_rng(22)
    out = BitsOutput("bits", 13, packed=True)
    n = 20_000
    bits = rng.random((n, 13)) < 0.3
    packed = pack_bits(bits)
    new = out.randomize({"bits": packed}, 0.6, rng)["bits"]
    assert (new[:, -1] >> 5 == 0).all()  # bits 13..15 of the last byte are padding
    flipped = np.unpackbits(new ^ packed, axis=1, count=13, bitorder="little")
    _, flip = kept_and_other(2, 0.6)
    within(
        np.stack([flipped.sum(axis=0), n - flipped.sum(axis=0)], axis=1), np.array([flip, 1 - flip]), "flips"
    )
    # independent bits: the number of flips per report is Binomial(13, q1)
    per_report = flipped.sum(axis=1)
    assert per_report.var() == pytest.approx(13 * flip * (1 - flip), rel=0.05)


def test_bits_in_a_uint_follow_the_product_kernel() -> None:
    rng = np.random.default_rng(23)
    out = BitsOutput("b", 3, packed=False)
    kernel = out.matrix(0.5)
    assert np.allclose(kernel.sum(axis=0), 1.0)
    n = 40_000
    for start in (0, 5, 7):
        new = out.randomize({"b": np.full(n, start, dtype=np.int64)}, 0.5, rng)["b"]
        assert new.dtype == np.int64
        within(np.bincount(new, minlength=8), kernel[:, start], f"from {start}")


def test_ternary_coordinates_move_to_each_other_value_with_q1() -> None:
    rng = np.random.default_rng(24)
    out = TernaryOutput("pos", "neg", 11)
    n = 30_000
    values = rng.integers(0, 3, size=(n, 11))  # 0, +1 (1), -1 (2)
    pos, neg = pack_bits(values == 1), pack_bits(values == 2)
    new = out.randomize({"pos": pos, "neg": neg}, 0.45, rng)
    assert not np.any(new["pos"] & new["neg"])
    assert (new["pos"][:, -1] >> 3 == 0).all() and (new["neg"][:, -1] >> 3 == 0).all()
    after = np.unpackbits(new["pos"], axis=1, count=11, bitorder="little") + 2 * np.unpackbits(
        new["neg"], axis=1, count=11, bitorder="little"
    )
    kernel = symbol_kernel(3, 0.45)
    for start in range(3):
        within(np.bincount(after[values == start], minlength=3), kernel[:, start], f"from {start}")


@pytest.mark.parametrize("name", MEMOIZABLE)
def test_the_composed_client_is_the_device_client_then_the_randomizer(name: str) -> None:
    device, composed = channel(name, 3, {})
    users = population_for(name, 500, 3, np.random.default_rng(3))
    sent = composed.perturb_many(users, np.random.default_rng(9))
    rng = np.random.default_rng(9)
    stored = device.perturb_many(users, rng)
    assert composed.composition is not None
    again = composed.composition.randomizer.randomize(stored, rng)
    for f in device.fields():
        assert np.array_equal(sent[f.name], again[f.name])
    for f in device.public_fields():
        assert np.array_equal(sent[f], stored[f])
    assert composed.valid_rows(sent).all()


# ----------------------------------------------------------------------- estimation
@pytest.mark.parametrize("name", MEMOIZABLE)
def test_composed_estimators_are_unbiased(name: str) -> None:
    """Expected statistics go back to the truth exactly, and the frequencies of simulated
    composed reports (a population of 1,500 devices replicated 40 times, one pooled
    collection) lie within 4 analytic standard errors of their expectation."""
    device = create(name, 4, 3.0)
    composed = device.composed(1.5)
    rng = np.random.default_rng(4)
    users = population_for(name, 1_500, 4, rng)
    truth = composed.estimate(composed.expected_stats(users), "unbiased")
    assert np.allclose(truth.frequency, users.truth()[0], atol=1e-9)
    reps = 40
    pooled = KVData(
        4,
        np.concatenate([[0], np.cumsum(np.tile(users.sizes, reps))]),
        np.tile(users.keys, reps),
        np.tile(users.values, reps),
    )
    est = composed.estimate(composed.collect(pooled, rng), "unbiased")
    expected = composed.estimate(composed.expected_stats(pooled), "unbiased").frequency
    assert np.all(np.abs(est.frequency - expected) < 4 * est.frequency_stderr), (est.frequency, expected)


# ----------------------------------------------------------------------- the collection's audit
def test_audit_of_a_collection_states_eps1_per_report_and_eps_per_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kvldp audit --collection``: one report audited on the composed channel (eps1,
    tight), one state on the device's memoized report (eps), each with its rule and who
    keeps it; the lifetime spend still counts eps per new state."""
    path = tmp_path / "irr.toml"
    path.write_text(
        'name = "irr"\nmechanism = "pckv_ue"\nepsilon = 2.0\nkeys = ["a", "b", "c"]\n'
        "value_range = [0.0, 1.0]\n[privacy]\nmemoize = true\ninstantaneous_epsilon = 0.5\n"
    )
    assert main(["audit", "--collection", str(path), "--reports", "100", "--changes", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["instantaneous_epsilon"] == 0.5
    assert abs(out["max_log_ratio"] - 0.5) <= 1e-9 and abs(out["per_state_max_log_ratio"] - 2.0) <= 1e-9
    assert out["lifetime_epsilon"] == pytest.approx(10.0) and out["charged"] == 5
    assert out["randomizer"]["coordinates"] == 3 and out["randomizer"]["values"] == 3
    figures = out["epsilon"]
    assert list(figures) == ["per_report", "per_state", "lifetime"]
    assert figures["per_report"]["epsilon"] == 0.5 and figures["per_state"]["epsilon"] == 2.0
    assert "instantaneous_epsilon" in figures["per_report"]["rule"]
    assert all("the server can enforce neither" in figures[f]["kept_by"] for f in ("per_report", "per_state"))
    assert main(["audit", "--collection", str(path), "--reports", "100"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert (
        "epsilon 0.5 per report and 2 per state" in first and "audits per report ok and per state ok" in first
    )


def test_audit_per_window_of_a_collection_is_the_limit_times_the_per_send_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With max_reports_per_device, the per_window figure of an instantaneous collection is
    the limit x c, the per-send bound the aggregator's device book charges each report,
    below the limit x eps of the memoized report, with its explanation."""
    path = tmp_path / "window.toml"
    path.write_text(
        'name = "window"\nmechanism = "grr"\nepsilon = 3.0\nkey_count = 6\nvalue_range = [0.0, 1.0]\n'
        '[aggregate]\nmax_reports_per_device = 10\nbudget_window = "1d"\n'
        "[privacy]\nmemoize = true\ninstantaneous_epsilon = 1.0\n"
    )
    collection = load_collection(path)
    randomizer = collection.instantaneous_randomizer
    assert randomizer is not None
    c = randomizer.send_bound(3.0)
    assert c == epsilon_per_charge(collection) and 1.0 < c < 3.0
    assert main(["audit", "--collection", str(path), "--reports", "100", "--json"]) == 0
    window = json.loads(capsys.readouterr().out)["epsilon"]["per_window"]
    assert window["epsilon"] == pytest.approx(10 * c) and window["epsilon"] < 10 * 3.0
    assert "max_reports_per_device = 10 per budget_window" in window["rule"]
    assert f"per-send bound c = {c:g}" in window["rule"] and "at most 10 x c" in window["rule"]
    assert "memoized re-sends are free" not in window["rule"]
    assert "c by the device" in window["kept_by"] and window["horizon"] == "one budget_window (1d)"
    assert main(["audit", "--collection", str(path), "--reports", "100"]) == 0
    (line,) = [s for s in capsys.readouterr().out.splitlines() if s.startswith("  per_window:")]
    assert line.startswith(f"  per_window: epsilon {10 * c:g} over one budget_window (1d).")
