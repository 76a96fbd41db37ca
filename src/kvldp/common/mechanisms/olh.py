"""Optimized local hashing (OLH; docs/mechanisms.md, *OLH*), with g = round(e^eps + 1).

The device draws a public 64-bit seed, hashes its sampled item into [g) with
``mix64(seed, item) mod g`` and reports (seed, GRR_g(hash)). The aggregator keeps the
*support* C(t) = #{reports : H_seed(t) = y} for every item t: folding costs O(D) per
report (inherent to OLH; Zhao et al. 2022, Table 2) but the state is a fixed (D,) vector, additive
and mergeable like every other statistic.

Estimator: c(t) = (C(t) - n/g) / (p - 1/g). The hash behaves as a random function
(collision probability 1/g up to 2^-64), so a user holding another item supports t
with probability exactly 1/g. eps-LDP, tight (GRR_g over the hashed value).
"""

from __future__ import annotations

import math

import numpy as np

from kvldp.common.channel.instantaneous import SymbolOutput
from kvldp.common.channel.output_model import DenseModel, OutputModel, PatternLayout
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.itemoracle import ELL, ItemOracle, bernoulli_count_variance
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, grr_probs, mix64
from kvldp.common.spec.params import Param, ParamValue

#: hash evaluations per fold block (bounds the (reports, D) temporary)
_BLOCK = 1 << 22

HASH_RANGE = Param(
    "g",
    int,
    0,
    "hash range; 0 = the optimum round(e^eps + 1)",
    check=lambda v: int(v) == 0 or int(v) >= 2,
    check_doc="must be 0 (automatic) or at least 2",
)


def olh_hash(seeds: NDArrayU64, items: NDArrayU64, g: int) -> IntArray:
    """H_seed(item) in [0, g): the hash family shared by devices and aggregator."""
    return (mix64(seeds, items) % np.uint64(g)).astype(np.int64)


NDArrayU64 = np.ndarray[tuple[int, ...], np.dtype[np.uint64]]


@register
class OLH(ItemOracle):
    """Optimized local hashing: a per-report seeded hash into g buckets, then GRR over the buckets."""

    name = "olh"
    summary = "optimized local hashing: seeded hash into g = round(e^eps+1) buckets + GRR (frequency oracle)"
    params_spec = (ELL, HASH_RANGE)

    def _setup_oracle(self) -> None:
        g = int(self.params["g"])
        self.g = g if g else max(2, round(math.exp(self.epsilon) + 1.0))
        self.p, _ = grr_probs(self.epsilon, self.g)

    def fields(self) -> tuple[Field, ...]:
        return (Field("seed", "uint", 0, 2**64), Field("y", "uint", 0, self.g))

    def public_fields(self) -> tuple[str, ...]:
        """The hash seed is drawn whatever the item."""
        return ("seed",)

    def randomized_output(self) -> SymbolOutput:
        return SymbolOutput(("y",), self.g)

    def _contrast(self, epsilon: float) -> float:
        p, q = grr_probs(epsilon, self.g)
        return p - q

    def _family_params(self) -> dict[str, ParamValue]:
        """The hash range stays this configuration's (its default follows epsilon)."""
        return {**self.params, "g": self.g}

    def _perturb_items(
        self, items: IntArray, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        n = items.shape[0]
        seeds = np.asarray(public.integers(0, 2**64, size=n, dtype=np.uint64), dtype=np.uint64)
        hashed = olh_hash(seeds, items.astype(np.uint64), self.g)
        keep = rng.random(n) < self.p
        other = (hashed + rng.integers(1, self.g, size=n)) % self.g
        return {"seed": seeds, "y": np.where(keep, hashed, other).astype(np.int64)}

    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"support": (self.domain,)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        seeds = batch["seed"].astype(np.uint64)
        ys = batch["y"].astype(np.int64)
        items = np.arange(self.domain, dtype=np.uint64)
        rows = max(1, _BLOCK // self.domain)
        for start in range(0, seeds.shape[0], rows):
            hashed = olh_hash(seeds[start : start + rows, None], items[None, :], self.g)
            arrays["support"] += np.sum(hashed == ys[start : start + rows, None], axis=0, dtype=np.int64)

    def count_estimate(self, arrays: dict[str, IntArray]) -> FloatArray:
        n = float(arrays["n"][0])
        return np.asarray((arrays["support"] - n / self.g) / (self.p - 1.0 / self.g), dtype=np.float64)

    def count_variance(self, n: float, holders: FloatArray) -> FloatArray:
        return bernoulli_count_variance(n, holders, self.p, 1.0 / self.g, 1.0 / self.scale)

    def expected_arrays(self, totals: FloatArray, n: float) -> dict[str, FloatArray]:
        return {"support": n / self.g + (self.p - 1.0 / self.g) * totals}

    def audit_model(self, exhaustive: bool) -> OutputModel:
        """For any public seed the report is GRR_g applied to H_seed(item); inputs with equal
        hashes emit identical rows, and any two items are separated by some seed. The exact
        model over all seeds and items is therefore GRR_g over the g hashed values; a user
        sampling among several items is a mixture of these rows and cannot exceed them."""
        p, q = grr_probs(self.epsilon, self.g)
        probs = np.where(np.eye(self.g, dtype=bool), p, q)
        return DenseModel(probs, tuple(f"H(item)={h}" for h in range(self.g)), PatternLayout(1, 1, self.g))
