"""The result of an estimator: per-key frequency and mean, each with a standard error.

Frequencies are fractions of users (docs/mechanisms.md, *Data model*). A mean that is
undefined (no holders estimated, no reports for the key, or a mechanism that collects
keys only) is NaN and the diagnostics say why; callers never receive a silent 0
(docs/mechanisms.md, *Undefined means*).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

#: the two-sided 95% normal quantile of every exported interval
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """Estimates for the ``d`` keys of one statistics snapshot.

    ``latent`` holds the per-key latent distribution an EM fit converged to, so that the
    next refit can warm-start from it (only where the model is identifiable).
    """

    mechanism: str
    estimator: str
    frequency: FloatArray
    frequency_stderr: FloatArray
    mean: FloatArray
    mean_stderr: FloatArray
    n_reports: int
    latent: FloatArray | None = None
    diagnostics: Mapping[str, Any] = field(default_factory=dict)
    #: explicit (low, high) interval bounds where the interval is not estimate ± Z95·stderr
    #: (a clipped or shrunk point estimate; docs/mechanisms.md, *Calibration of standard errors*)
    frequency_bounds: tuple[FloatArray, FloatArray] | None = None
    mean_bounds: tuple[FloatArray, FloatArray] | None = None

    @property
    def frequency_interval(self) -> tuple[FloatArray, FloatArray]:
        """The 95% interval of each frequency: the explicit bounds, else estimate ± Z95·stderr."""
        return _interval(self.frequency, self.frequency_stderr, self.frequency_bounds)

    @property
    def mean_interval(self) -> tuple[FloatArray, FloatArray]:
        """The 95% interval of each mean: the explicit bounds, else estimate ± Z95·stderr."""
        return _interval(self.mean, self.mean_stderr, self.mean_bounds)

    @property
    def frequency_clipped(self) -> FloatArray:
        """The frequency clipped into [0, 1] (NaN stays NaN)."""
        return np.clip(self.frequency, 0.0, 1.0)

    def to_dict(self, keys: list[str] | None = None) -> dict[str, Any]:
        """JSON-ready form with the 95% intervals' ends; NaN becomes None."""
        names = keys or [str(i) for i in range(self.frequency.shape[0])]

        def col(a: FloatArray) -> dict[str, float | None]:
            return {k: (None if not np.isfinite(v) else float(v)) for k, v in zip(names, a, strict=True)}

        return {
            "mechanism": self.mechanism,
            "estimator": self.estimator,
            "n_reports": self.n_reports,
            "frequency": col(self.frequency),
            "frequency_stderr": col(self.frequency_stderr),
            "mean": col(self.mean),
            "mean_stderr": col(self.mean_stderr),
            "frequency_low": col(self.frequency_interval[0]),
            "frequency_high": col(self.frequency_interval[1]),
            "mean_low": col(self.mean_interval[0]),
            "mean_high": col(self.mean_interval[1]),
            "diagnostics": {k: _jsonable(v) for k, v in self.diagnostics.items()},
        }


def _interval(
    value: FloatArray, se: FloatArray, bounds: tuple[FloatArray, FloatArray] | None
) -> tuple[FloatArray, FloatArray]:
    if bounds is not None:
        return bounds
    return value - Z95 * se, value + Z95 * se


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value
