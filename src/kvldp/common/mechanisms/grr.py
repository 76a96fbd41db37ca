"""Generalized randomized response (k-RR) over the keys plus ``none`` (docs/mechanisms.md, *GRR*).

The device reports its sampled item with probability p = e^eps / (e^eps + D - 1) and
each other item with q = 1 / (e^eps + D - 1), D = d + 1 (or d with ell = 0).

Its MLE has a closed form, preferred to iterating EM: maximising
sum_z c_z ln(q + (p - q) theta_z) over the simplex gives the water-filling solution
theta_z = max(0, c_z / lambda - q / (p - q)) with lambda fixing the sum to one; it is
the fixed point of count EM (docs/mechanisms.md, *Count EM*), which a test checks. eps-LDP, tight.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvldp.common.channel.instantaneous import SymbolOutput
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.estimation.em import parse_em_options
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.itemoracle import ItemOracle, bernoulli_count_variance
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, grr_probs
from kvldp.common.spec.params import InvalidParameter


def grr_mle(counts: FloatArray, p: float, q: float) -> FloatArray:
    """Closed-form MLE of the item distribution under GRR (water-filling over sorted counts)."""
    total = float(counts.sum())
    if total <= 0:
        return np.full(counts.shape[0], np.nan)
    r = q / (p - q)
    order = np.argsort(-counts, kind="stable")
    top = counts[order]
    k = np.arange(1, top.shape[0] + 1, dtype=np.float64)
    lam = np.cumsum(top) / (1.0 + k * r)
    feasible = top / lam > r  # the k-th largest count stays positive with k active symbols
    kstar = int(np.flatnonzero(feasible)[-1]) + 1
    theta = np.zeros_like(counts, dtype=np.float64)
    theta[order[:kstar]] = top[:kstar] / lam[kstar - 1] - r
    return theta


@register
class GRR(ItemOracle):
    """Generalized randomized response over the keys and ``none``: one symbol per report."""

    name = "grr"
    summary = "generalized randomized response over keys + none (frequency oracle)"

    def _setup_oracle(self) -> None:
        if self.domain < 2:
            raise InvalidParameter("grr needs at least two items (use ell >= 1 or more keys)")
        self.p, self.q = grr_probs(self.epsilon, self.domain)

    def supports_em(self) -> bool:
        return True

    def fields(self) -> tuple[Field, ...]:
        return (Field("y", "uint", 0, self.domain),)

    def randomized_output(self) -> SymbolOutput:
        return SymbolOutput(("y",), self.domain)

    def _contrast(self, epsilon: float) -> float:
        p, q = grr_probs(epsilon, self.domain)
        return p - q

    def _perturb_items(
        self, items: IntArray, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        keep = rng.random(items.shape[0]) < self.p
        other = (items + rng.integers(1, self.domain, size=items.shape[0])) % self.domain
        return {"y": np.where(keep, items, other).astype(np.int64)}

    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"counts": (self.domain,)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        arrays["counts"] += np.bincount(batch["y"].astype(np.int64), minlength=self.domain)

    def count_estimate(self, arrays: dict[str, IntArray]) -> FloatArray:
        n = float(arrays["n"][0])
        return np.asarray((arrays["counts"] - n * self.q) / (self.p - self.q), dtype=np.float64)

    def count_variance(self, n: float, holders: FloatArray) -> FloatArray:
        return bernoulli_count_variance(n, holders, self.p, self.q, 1.0 / self.scale)

    def transition(self) -> FloatArray:
        return np.where(np.eye(self.domain, dtype=bool), self.p, self.q)

    def output_counts(self, arrays: dict[str, IntArray]) -> FloatArray:
        return arrays["counts"].astype(np.float64)

    def maximum_likelihood(
        self, counts: FloatArray, options: dict[str, Any]
    ) -> tuple[FloatArray, dict[str, Any]]:
        parse_em_options(options, (1, self.domain))  # validated; the closed form needs none of them
        return grr_mle(counts, self.p, self.q), {
            "em_iterations": 0,
            "em_converged": True,
            "mle": "closed form",
        }

    def expected_arrays(self, totals: FloatArray, n: float) -> dict[str, FloatArray]:
        return {"counts": n * self.q + (self.p - self.q) * totals}
