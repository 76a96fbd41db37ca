"""Minimal fake reports for the detection tests.

* M2GA (maximal gain): each fake device sends the report that maximises the gain of a
  target key, without running the client: PCKV-GRR ``<t, +1>`` for a uniform target t,
  PCKV-UE the ``pos`` bit of every target and nothing else, and for a key-sampled
  mechanism ``<t, z>`` with z the symbol that raises t's estimated +1 state the most
  (the largest entry of A's +1 row);
* a plausible mix (PCKV-GRR): ``<t, +1>`` or ``<t, -1>`` with probability 3/4 and 1/4,
  so the targets' means stay inside [-1, 1];
* RKVA (input poisoning): each fake runs the genuine client on the pair ``<t, +1>``.
"""

from __future__ import annotations

import numpy as np

from kvldp.common.kvdata import KVData
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.keysampled import POS, KeySampledMechanism
from kvldp.common.primitives import IntArray
from kvldp.common.schema import ReportBatch


def fake_count(beta: float, genuine: int) -> int:
    """Fake devices making up the fraction ``beta`` of all devices."""
    return round(beta / (1.0 - beta) * genuine)


def m2ga_reports(
    mechanism: Mechanism, targets: IntArray, count: int, rng: np.random.Generator
) -> ReportBatch:
    """``count`` maximal-gain fake reports promoting ``targets`` (see the module docstring)."""
    t = rng.choice(np.asarray(targets, dtype=np.int64), size=count)
    if mechanism.name == "pckv_grr":
        return {"k": t, "v": np.ones(count, dtype=np.int64)}
    if mechanism.name == "pckv_ue":
        bits = np.zeros((count, mechanism.d), dtype=np.uint8)
        bits[:, targets] = 1
        pos = np.packbits(bits, axis=1, bitorder="little")
        return {"pos": pos, "neg": np.zeros_like(pos)}
    if isinstance(mechanism, KeySampledMechanism) and mechanism.fields()[0].name == "j":
        symbol = int(np.argmax(mechanism.linear_inverse()[POS]))
        return {"j": t, mechanism.symbol_field: np.full(count, symbol, dtype=np.int64)}
    raise ValueError(f"no maximal-gain fake for {mechanism.name}")


def mixed_grr_reports(targets: IntArray, count: int, rng: np.random.Generator) -> ReportBatch:
    """PCKV-GRR fakes ``<t, +-1>`` for uniform targets, +1 with probability 3/4."""
    t = rng.choice(np.asarray(targets, dtype=np.int64), size=count)
    return {"k": t, "v": np.where(rng.random(count) < 0.75, 1, -1).astype(np.int64)}


def rkva_reports(
    mechanism: Mechanism, targets: IntArray, count: int, rng: np.random.Generator
) -> ReportBatch:
    """Input poisoning: the genuine client run on ``<t, +1>`` for uniform targets t."""
    t = rng.choice(np.asarray(targets, dtype=np.int64), size=count)
    return mechanism.perturb_many(KVData.from_single_key(mechanism.d, t, np.ones(count)), rng)


def fake_reports(
    kind: str, mechanism: Mechanism, targets: IntArray, count: int, rng: np.random.Generator
) -> ReportBatch:
    """``count`` fakes of ``kind`` (``m2ga``, ``mix``, ``rkva``)."""
    if kind == "m2ga":
        return m2ga_reports(mechanism, targets, count, rng)
    if kind == "mix" and mechanism.name == "pckv_grr":
        return mixed_grr_reports(targets, count, rng)
    if kind == "rkva":
        return rkva_reports(mechanism, targets, count, rng)
    raise ValueError(f"no {kind} fakes for {mechanism.name}")
