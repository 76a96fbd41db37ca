"""Minimal maximal-gain fake reports (M2GA) for the detection tests.

Each fake device sends the report that maximises the gain of a target key, without
running the client: PCKV-GRR ``<t, +1>`` for a uniform target t, PCKV-UE the ``pos`` bit
of every target and nothing else, and for a key-sampled mechanism ``<t, z>`` with z the
symbol that raises t's estimated +1 state the most (the largest entry of A's +1 row).
"""

from __future__ import annotations

import numpy as np

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
