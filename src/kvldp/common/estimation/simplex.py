"""Norm-Sub consistency post-processing (Wang et al. 2020) as a simplex projection
(docs/mechanisms.md, *Norm-Sub*).

Norm-Sub sets negative estimates to zero and subtracts one common amount from the
positive ones until they sum to the known total. That is exactly the Euclidean
projection onto {x >= 0, sum x = total}, computed here for many rows at once by the
sort-and-threshold algorithm (O(K log K) per row). It is post-processing, so it costs
no privacy, and it is a consistent estimate: it never leaves the simplex.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def project_simplex(x: FloatArray, total: float | FloatArray = 1.0) -> FloatArray:
    """Project each row of ``x`` (G, K) onto {y >= 0, sum y = total}; NaN rows stay NaN."""
    x = np.asarray(x, dtype=np.float64)
    squeeze = x.ndim == 1
    rows = np.atleast_2d(x)
    tot = np.broadcast_to(np.asarray(total, dtype=np.float64), (rows.shape[0],))
    out = np.full_like(rows, np.nan)
    ok = np.all(np.isfinite(rows), axis=1) & np.isfinite(tot)
    if np.any(ok):
        r = rows[ok]
        t = tot[ok]
        u = -np.sort(-r, axis=1)
        css = np.cumsum(u, axis=1) - t[:, None]
        ks = np.arange(1, r.shape[1] + 1, dtype=np.float64)
        cond = u - css / ks > 0
        rho = r.shape[1] - 1 - np.argmax(cond[:, ::-1], axis=1)
        tau = css[np.arange(r.shape[0]), rho] / (rho + 1)
        out[ok] = np.maximum(r - tau[:, None], 0.0)
    return out[0] if squeeze else out
