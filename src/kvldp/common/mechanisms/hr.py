"""Hadamard response (Acharya, Sun and Zhang, AISTATS 2019) as a frequency oracle.

None of the key-value papers defines it, so kvldp's choices are documented here and in
docs/mechanisms.md, *HR*: the classic HR with K = 2^ceil(log2(D + 1)) outputs. Item x
owns row x + 1 of the Sylvester matrix H_K (row 0, all ones, is skipped) and its set
C_x = {y : H[x+1, y] = +1} of K/2 outputs. The device reports y in C_x with total
probability e^eps / (e^eps + 1), uniformly inside the chosen half:
Pr[y | x] = 2 e^eps / (K (e^eps + 1)) on C_x and 2 / (K (e^eps + 1)) off it. eps-LDP, tight.

Two different rows agree on exactly half the columns, so a user holding x' != x lands
in C_x with probability 1/2 and ``c_x = ((e^eps + 1)/(e^eps - 1)) * (H counts)[x + 1]``
is unbiased; all D estimates come from one fast Walsh-Hadamard transform.
Var(c_x) = c^2 n - sum_u w_u(x)^2 exactly (c = (e^eps + 1)/(e^eps - 1)). The report is one
symbol of a K-letter alphabet, so count EM applies.
"""

from __future__ import annotations

import math

import numpy as np

from kvldp.common.channel.instantaneous import SymbolOutput
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.itemoracle import ItemOracle
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, ceil_log2, fwht, hadamard_entry


def lowest_set_bit(x: IntArray) -> IntArray:
    """x & -x for positive integers: flipping this column bit flips the sign of row x."""
    return np.bitwise_and(x, -x)


def uniform_in_half(rows: IntArray, sign: IntArray, size: int, rng: np.random.Generator) -> IntArray:
    """A uniform column y in [0, size) with H[row, y] = sign, for rows >= 1 (vectorised).

    Draw y uniformly; where the sign is wrong, flip a bit that ``row`` has set — this
    flips H[row, y] and maps the wrong half bijectively onto the right one.
    """
    y = np.asarray(rng.integers(0, size, size=rows.shape[0]), dtype=np.int64)
    wrong = hadamard_entry(rows, y).astype(np.int64) != sign
    return np.where(wrong, np.bitwise_xor(y, lowest_set_bit(rows)), y)


@register
class HR(ItemOracle):
    """Hadamard response: one row index of a Hadamard matrix per report, log2(K) bits."""

    name = "hr"
    summary = "Hadamard response (Acharya-Sun-Zhang): one log2(K)-bit index (frequency oracle)"

    def _setup_oracle(self) -> None:
        self.k = 2 ** ceil_log2(self.domain + 1)
        e = math.exp(self.epsilon)
        self.p_in = e / (e + 1.0)
        self.c = (e + 1.0) / (e - 1.0)

    def supports_em(self) -> bool:
        return True

    def fields(self) -> tuple[Field, ...]:
        return (Field("y", "uint", 0, self.k),)

    def randomized_output(self) -> SymbolOutput:
        return SymbolOutput(("y",), self.k)

    def _contrast(self, epsilon: float) -> float:
        """2 p_in - 1: K/2 times the gap between a column inside the item's half and one outside."""
        return math.tanh(epsilon / 2.0)

    def _perturb_items(
        self, items: IntArray, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        inside = rng.random(items.shape[0]) < self.p_in
        sign = np.where(inside, 1, -1).astype(np.int64)
        return {"y": uniform_in_half(items + 1, sign, self.k, rng)}

    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"counts": (self.k,)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        arrays["counts"] += np.bincount(batch["y"].astype(np.int64), minlength=self.k)

    def count_estimate(self, arrays: dict[str, IntArray]) -> FloatArray:
        return np.asarray(
            self.c * fwht(arrays["counts"].astype(np.float64))[1 : self.domain + 1], dtype=np.float64
        )

    def count_variance(self, n: float, holders: FloatArray) -> FloatArray:
        return np.asarray(self.c**2 * n - holders / self.scale**2, dtype=np.float64)

    def transition(self) -> FloatArray:
        h = hadamard_entry(np.arange(1, self.domain + 1)[None, :], np.arange(self.k)[:, None])
        return np.asarray(
            np.where(h > 0, 2.0 * self.p_in / self.k, 2.0 * (1.0 - self.p_in) / self.k), dtype=np.float64
        )

    def output_counts(self, arrays: dict[str, IntArray]) -> FloatArray:
        return arrays["counts"].astype(np.float64)

    def expected_arrays(self, totals: FloatArray, n: float) -> dict[str, FloatArray]:
        return {"counts": self.transition() @ totals}
