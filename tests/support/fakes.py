"""Minimal maximal-gain fake reports (Wu et al.'s M2GA) for the robust estimator's tests.

Each fake picks a target uniformly from ``targets`` and sends the one output that moves
the target's frequency and mean the most:

* PCKV-GRR: <t, +1>; PCKV-UE: the ``pos`` bits of every target set, nothing else;
* PrivKV, KVUE: <t, state "holds, +1">; KVOH: the one-hot of that state; F2M: key bit 1,
  value +1; KVUE over t keys: a key set holding the target, every other digit "absent".

Also a budget-matching attack (``spread``) for the key-sampled mechanisms: each fake
reports on a uniformly drawn key, as a genuine device does, and sends the maximal-gain
symbol when that key is a target and the absent state otherwise.
"""

from __future__ import annotations

import numpy as np

from kvldp.common.data.schema import ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms.base import Mechanism

#: the maximal-gain symbol of each key-sampled mechanism, and its absent-state symbol
KEY_SAMPLED_SYMBOLS: dict[str, tuple[int, int]] = {
    "privkv": (2, 1),
    "kvue": (2, 1),
    "kvue_multi": (2, 1),
    "kvoh": (4, 2),
    "f2m": (3, 1),
}


def fake_count(n_genuine: int, beta: float) -> int:
    """Fakes that are a share ``beta`` of all devices next to ``n_genuine`` genuine ones."""
    return round(beta / (1.0 - beta) * n_genuine)


def m2ga_batch(
    mech: Mechanism, targets: np.ndarray, fakes: int, rng: np.random.Generator, spread: bool = False
) -> ReportBatch:
    """The reports of ``fakes`` maximal-gain fake devices against ``targets``."""
    d = mech.d
    t = rng.choice(targets, size=fakes)
    if mech.name == "pckv_grr":
        return {"k": t.astype(np.int64), "v": np.ones(fakes, dtype=np.int64)}
    if mech.name == "pckv_ue":
        bits = np.zeros((fakes, d), dtype=bool)
        bits[:, targets] = True
        pos = np.packbits(bits, axis=1, bitorder="little")
        return {"pos": pos, "neg": np.zeros_like(pos)}
    up, absent = KEY_SAMPLED_SYMBOLS[mech.name]
    if spread:
        t = rng.integers(0, d, size=fakes)
    hit = np.isin(t, targets)
    if mech.name != "kvue_multi" or int(getattr(mech, "t", 1)) == 1:
        field = "j0" if mech.name == "kvue_multi" else "j"
        return {field: t.astype(np.int64), mech.fields()[-1].name: np.where(hit, up, absent).astype(np.int64)}
    k = int(getattr(mech, "t", 1))
    keys = np.empty((fakes, k), dtype=np.int64)
    symbol = np.zeros(fakes, dtype=np.int64)
    for i in range(fakes):
        others = rng.choice(np.setdiff1d(np.arange(d), [t[i]]), size=k - 1, replace=False)
        row = np.sort(np.append(others, t[i]))
        keys[i] = row
        digits = np.where(row == t[i], up if hit[i] else absent, absent)
        symbol[i] = int(np.sum(digits * 3 ** np.arange(k)))
    out: ReportBatch = {f"j{i}": keys[:, i] for i in range(k)}
    out[mech.fields()[-1].name] = symbol
    return out


def attacked(
    mech: Mechanism, genuine: Stats, targets: np.ndarray, beta: float, seed: int, spread: bool = False
) -> Stats:
    """``genuine`` plus the statistics of a share ``beta`` of maximal-gain fakes."""
    rng = np.random.default_rng(seed)
    batch = m2ga_batch(mech, targets, fake_count(genuine.n_reports, beta), rng, spread)
    return genuine.copy().fold(batch)
