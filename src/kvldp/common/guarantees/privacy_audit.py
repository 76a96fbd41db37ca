"""Exact privacy audit: max over inputs x, x' and outputs z of ln Pr[z|x] / Pr[z|x'].

Each mechanism declares its exact output distribution over a finite input set (an
:mod:`~kvldp.common.channel.output_model`); this module takes the maximum log ratio over every
pair of inputs and every output, exactly, and compares it with the mechanism's epsilon
(docs/mechanisms.md, *Privacy audit*).

FLDP (FHR; docs/mechanisms.md, *FHR*) is audited on its own terms: the ratio is taken over outputs in
the intersection of the two supports, and eta = min |R(t) ∩ R(t')| / max(|R(t)|, |R(t')|).

A composed channel (a memoized report randomized again at every send; docs/mechanisms.md,
*Instantaneous randomization*) is audited on its device's exact model composed with the
randomizer (:func:`~kvldp.common.channel.output_model.compose_model`), not on the composed
channel's own parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from kvldp.common.channel.output_model import DenseModel, OutputModel, compose_model

if TYPE_CHECKING:
    from kvldp.common.mechanisms.base import Mechanism

FloatArray = NDArray[np.float64]
TOLERANCE = 1e-9
_CHUNK = 1 << 22


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one audit: the exact max log ratio, the epsilon it is checked against,
    and the pair of inputs that attains it."""

    mechanism: str
    epsilon: float
    notion: str
    max_log_ratio: float
    claimed: float
    ok: bool
    tight: bool
    exhaustive: bool
    n_inputs: int
    witness: tuple[str, str]
    eta: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "notion": self.notion,
            "max_log_ratio": self.max_log_ratio if math.isfinite(self.max_log_ratio) else "inf",
            "claimed_epsilon": self.claimed,
            "ok": self.ok,
            "tight": self.tight,
            "exhaustive": self.exhaustive,
            "inputs": self.n_inputs,
            "witness": list(self.witness),
        }
        if self.eta is not None:
            out["eta"] = self.eta
        return out


def _check_distribution(model: OutputModel) -> None:
    if isinstance(model, DenseModel):
        p = model.probs
        sums = p.sum(axis=1)
    else:
        p = model.factors
        sums = p.sum(axis=-1)
    if np.any(p < 0) or not np.allclose(sums, 1.0, rtol=0, atol=1e-12):
        raise AssertionError("output model is not a probability distribution (rows must sum to 1)")


def _log(p: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore"):
        return np.log(p)


def _pairwise_max(logp: FloatArray, restrict_to_common: bool) -> FloatArray:
    """(X, X) matrix of max_z logp[x, z] - logp[x', z] (inf if x' cannot emit a z x emits)."""
    x, z = logp.shape
    out = np.full((x, x), -np.inf)
    rows_per_chunk = max(1, _CHUNK // max(1, x * z))
    finite = np.isfinite(logp)
    for start in range(0, x, rows_per_chunk):
        a = logp[start : start + rows_per_chunk, None, :]
        fa = finite[start : start + rows_per_chunk, None, :]
        with np.errstate(invalid="ignore"):
            diff = a - logp[None, :, :]
        both = fa & finite[None, :, :]
        if restrict_to_common:
            diff = np.where(both, diff, -np.inf)
        else:
            only_a = fa & ~finite[None, :, :]
            diff = np.where(both, diff, np.where(only_a, np.inf, -np.inf))
        out[start : start + rows_per_chunk] = diff.max(axis=2)
    np.fill_diagonal(out, 0.0)
    return out


def max_log_ratio(model: OutputModel, restrict_to_common: bool = False) -> tuple[float, tuple[int, int]]:
    """The exact max log ratio of a model and a pair of inputs attaining it."""
    _check_distribution(model)
    if isinstance(model, DenseModel):
        pair = _pairwise_max(_log(model.probs), restrict_to_common)
    else:
        logf = _log(model.factors)  # (X, C, R, S)
        x = logf.shape[0]
        pair = np.zeros((x, x))
        for c in range(logf.shape[1]):
            # worst scenario and worst symbol of this coordinate, for every pair
            per_scenario = [_pairwise_max(logf[:, c, r, :], restrict_to_common) for r in range(logf.shape[2])]
            pair = pair + np.max(np.stack(per_scenario), axis=0)
    i, j = np.unravel_index(int(np.argmax(pair)), pair.shape)
    return float(pair[i, j]), (int(i), int(j))


def fldp_eta(model: DenseModel) -> float:
    """min over input pairs of |R(t) ∩ R(t')| / max(|R(t)|, |R(t')|) (supports of rows)."""
    support = model.probs > 0
    sizes = support.sum(axis=1).astype(np.float64)
    inter = support.astype(np.float64) @ support.T.astype(np.float64)
    denom = np.maximum(sizes[:, None], sizes[None, :])
    ratio = inter / denom
    np.fill_diagonal(ratio, np.inf)
    return float(ratio.min()) if ratio.shape[0] > 1 else 1.0


def audited_model(mechanism: Mechanism, exhaustive: bool) -> OutputModel:
    """The exact model the audit checks: the mechanism's own, or for a composed channel its
    device's model composed with the instantaneous randomizer."""
    if mechanism.composition is None:
        return mechanism.audit_model(exhaustive=exhaustive)
    device, randomizer = mechanism.composition.device, mechanism.composition.randomizer
    return compose_model(
        device.audit_model(exhaustive=exhaustive), randomizer.output.size, randomizer.contrast
    )


def audit(mechanism: Mechanism, exhaustive: bool | None = None) -> AuditResult:
    """Audit ``mechanism`` exactly. ``exhaustive=None`` enumerates every input when the
    mechanism says that is feasible and otherwise uses its symmetry-reduced model."""
    use_exhaustive = mechanism.exhaustive_feasible() if exhaustive is None else exhaustive
    model = audited_model(mechanism, use_exhaustive)
    fldp = mechanism.notion == "fldp"
    value, (i, j) = max_log_ratio(model, restrict_to_common=fldp)
    eps = mechanism.epsilon
    claimed = mechanism.claimed_epsilon()
    eta = None
    ok = value <= eps + TOLERANCE
    if fldp:
        if not isinstance(model, DenseModel):
            raise TypeError("FLDP audits need a dense model to compute eta")
        eta = fldp_eta(model)
        ok = ok and eta >= mechanism.fldp_eta() - TOLERANCE
    return AuditResult(
        mechanism=mechanism.name,
        epsilon=eps,
        notion=mechanism.notion,
        max_log_ratio=value,
        claimed=claimed,
        ok=bool(ok),
        tight=abs(value - eps) <= TOLERANCE,
        exhaustive=use_exhaustive,
        n_inputs=len(model.inputs),
        witness=(model.inputs[i], model.inputs[j]),
        eta=eta,
    )
