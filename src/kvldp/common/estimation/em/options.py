"""What an ``em`` estimator is asked for: tolerance, iteration cap and start point.

Every mechanism with an ``em`` estimator accepts the same options; :func:`parse_em_options`
reads them and :func:`warm_start` turns a previous fit into a start point. The solver
itself (:mod:`kvldp.common.estimation.em.solve`) takes the parsed values as plain arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvldp.common.estimation.em.likelihood import FloatArray

DEFAULT_TOL = 1e-8
DEFAULT_MAX_ITER = 10_000

#: share of the uniform distribution mixed into a warm start, so that no state starts at 0
#: (EM's multiplicative update can never revive a zero) or crawls back from near 0
WARM_START_MIX = 1e-3


def warm_start(previous: object, shape: tuple[int, int]) -> FloatArray | None:
    """Start point from a previous fit (an Estimate with ``latent``, or an array).

    Returns None when there is nothing usable (no latent, wrong shape, non-finite), so
    the caller falls back to the uniform start; otherwise (1 - mix) * previous + mix *
    uniform, row-normalised.
    """
    latent = getattr(previous, "latent", previous)
    if latent is None:
        return None
    prev = np.asarray(latent, dtype=np.float64)
    if prev.shape != shape or not np.all(np.isfinite(prev)) or np.any(prev < 0):
        return None
    prev = prev / np.maximum(prev.sum(axis=-1, keepdims=True), 1e-300)
    return np.asarray((1.0 - WARM_START_MIX) * prev + WARM_START_MIX / shape[-1], dtype=np.float64)


@dataclass(frozen=True)
class EMOptions:
    """Options every ``em`` estimator takes: start point, tolerance, iteration cap."""

    theta0: FloatArray | None
    tol: float
    max_iter: int


def parse_em_options(options: dict[str, Any], shape: tuple[int, int]) -> EMOptions:
    """Pop ``tol``, ``max_iter`` and ``warm_start`` from ``options``; anything else is an error."""
    tol = float(options.pop("tol", DEFAULT_TOL))
    max_iter = int(options.pop("max_iter", DEFAULT_MAX_ITER))
    warm = options.pop("warm_start", None)
    if options:
        raise TypeError(f"estimator em takes tol, max_iter and warm_start, got {sorted(options)}")
    return EMOptions(None if warm is None else warm_start(warm, shape), tol, max_iter)
