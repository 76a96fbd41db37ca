"""FHR, flexible Hadamard response, under (eps, eta = 0.5)-FLDP — NOT eps-LDP (docs/mechanisms.md, *FHR*).

Item t (wire index; row t + 1 of H_r, r = ceil(log2(D + 1)), L = 2^r) has the halves
P_t = {c : H[t+1, c] = +1} and N_t. The device picks x uniform in P_t and y uniform in
N_t, and with probability p = e^eps / (e^eps + 1) places +1 at x and -1 at y, else the
reverse (Zhao et al. 2022, Alg. 1). The report is that signed vector: the position of its +1
and the position of its -1. (The paper's literal triple (index_x, s, index_y) would also reveal which
index was drawn from P_t — index_x is in P_t whatever s is — so kvldp sends the two
positions only; that is the output whose supports give eta = 0.5.)

Outputs outside R(t) ∩ R(t') have probability 0 under one input, so the eps-LDP ratio is
unbounded: FHR only satisfies FLDP (ratio <= e^eps on the common support and supports
overlapping by eta = 0.5), and kvldp labels it so. FLDP is not preserved by mixing
inputs — a device sampling one of several keys could exceed e^eps on the common
support — so FHR accepts devices with at most one key (``ell`` 0 or 1, no sampling).

Estimator (Zhao et al. 2022, Eq. 7): c(t) = (e^eps + 1) / (2(e^eps - 1)) * (z . H[t+1]) with z the sum of
the reported vectors, all at once by one fast Walsh-Hadamard transform. No EM: z is not
sufficient for the likelihood.

Instantaneous randomization (docs/mechanisms.md, *Instantaneous randomization*): the
ordered pair of positions is one symbol of K = L(L - 1), randomized by K-ary randomized
response of contrast lambda. The composed channel gives every valid pair a positive
probability, (1 - lambda)/K + lambda Pr[pair | t]: it is eps1-LDP (no longer only FLDP),
with e^eps1 = 1 + lambda p K / ((1 - lambda) (L/2)^2). A uniform pair adds nothing to
z . H[t+1] on average, so the estimator is c / lambda times the same transform, and the
variance gains the uniform pairs' share (see :meth:`FHR.count_variance`).
"""

from __future__ import annotations

import math

import numpy as np

from kvldp.common.channel.instantaneous import InstantaneousRandomizer, SymbolOutput
from kvldp.common.channel.output_model import DenseModel, OutputModel, SymbolLayout
from kvldp.common.data.kvdata import InvalidUserData, KVData
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.hr import uniform_in_half
from kvldp.common.mechanisms.itemoracle import ItemOracle
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, ceil_log2, fwht, hadamard_entry
from kvldp.common.spec.params import InvalidParameter


@register
class FHR(ItemOracle):
    """Flexible Hadamard response over keys plus dummies; its guarantee is (eps, 0.5)-FLDP, audited
    as such."""

    name = "fhr"
    summary = "flexible Hadamard response: (eps, 0.5)-FLDP, not eps-LDP (Zhao et al. 2022)"
    notion = "fldp"

    def _setup_oracle(self) -> None:
        if self.ell > 1:
            raise InvalidParameter(
                "fhr takes ell = 0 or 1: FLDP does not survive sampling among several keys"
            )
        self.r = ceil_log2(self.domain + 1)
        self.length: int = 2**self.r
        e = math.exp(self.epsilon)
        self.p = e / (e + 1.0)
        self.c = (e + 1.0) / (2.0 * (e - 1.0))
        #: the instantaneous randomizer's contrast (1: the reports are the client's own)
        self.contrast = 1.0

    def fldp_eta(self) -> float:
        return 0.5

    def sample_items(self, users: KVData, rng: np.random.Generator) -> IntArray:
        bad = np.flatnonzero(users.sizes > 1)
        if bad.size:
            u = int(bad[0])
            raise InvalidUserData(
                f"fhr accepts at most one key per device (user {u} holds {int(users.sizes[u])}); "
                "its FLDP guarantee does not survive sampling among several keys"
            )
        return super().sample_items(users, rng)

    def fields(self) -> tuple[Field, ...]:
        return (Field("x", "uint", 0, self.length), Field("y", "uint", 0, self.length))

    def _validate_extra(self, batch: ReportBatch) -> list[tuple[np.ndarray, str]]:
        return [(batch["x"] == batch["y"], "x and y must differ")]

    # --------------------------------------------------------------- instantaneous randomization
    @property
    def pairs(self) -> int:
        """K = L(L - 1): the ordered pairs of distinct positions, the report's symbols."""
        return self.length * (self.length - 1)

    def _pair_symbols(self, batch: ReportBatch) -> IntArray:
        x = batch["x"].astype(np.int64)
        y = batch["y"].astype(np.int64)
        return x * (self.length - 1) + y - (y > x)

    def _pair_fields(self, symbols: IntArray) -> ReportBatch:
        x, rest = np.divmod(symbols, self.length - 1)
        return {"x": x, "y": rest + (rest >= x)}

    def randomized_output(self) -> SymbolOutput:
        return SymbolOutput(("x", "y"), self.pairs, self._pair_symbols, self._pair_fields)

    def _per_report_level(self) -> float:
        return math.inf  # FLDP only: some output has probability 0 under another input

    def _instantaneous_contrast(self, epsilon_per_report: float) -> float:
        """lambda/(1 - lambda) = (e^eps1 - 1)(L/2)^2 / (p K): the largest ratio of the composed
        channel is that of a pair (+1 in P_t, -1 in N_t) against an input whose client never
        emits it (module docstring)."""
        odds = math.expm1(epsilon_per_report) * (self.length / 2) ** 2 / (self.p * self.pairs)
        return odds / (1.0 + odds)

    def _composed_channel(self, randomizer: InstantaneousRandomizer) -> FHR:
        channel = type(self)(self.d, self.epsilon, **self.params)
        channel.contrast = randomizer.contrast
        channel.notion = "ldp"
        return channel

    def _perturb_items(
        self, items: IntArray, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        n = items.shape[0]
        rows = items + 1
        x = uniform_in_half(rows, np.ones(n, dtype=np.int64), self.length, rng)
        y = uniform_in_half(rows, -np.ones(n, dtype=np.int64), self.length, rng)
        keep = rng.random(n) < self.p
        return {"x": np.where(keep, x, y), "y": np.where(keep, y, x)}

    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"z": (self.length,)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        plus = np.bincount(batch["x"].astype(np.int64), minlength=self.length)
        minus = np.bincount(batch["y"].astype(np.int64), minlength=self.length)
        arrays["z"] += plus - minus

    def count_estimate(self, arrays: dict[str, IntArray]) -> FloatArray:
        return np.asarray(
            self.c / self.contrast * fwht(arrays["z"].astype(np.float64))[1 : self.domain + 1],
            dtype=np.float64,
        )

    def count_variance(self, n: float, holders: FloatArray) -> FloatArray:
        """c^2 [2n + 2 sum_u w_u - 4(2p - 1)^2 sum_u w_u^2]: a holder's b.H_t is +-2 with mean
        2(2p - 1), anyone else's is -2, 0, 2 with probabilities 1/4, 1/2, 1/4 (docs/mechanisms.md,
        *FHR*). Composed (contrast lambda): a report is the client's with probability lambda and
        a uniform pair otherwise, whose b.H_t is +-2 with probability rho = L/(2(L - 1)) and 0
        on average, so the variance is (c/lambda)^2 [2 lambda (n + sum w) + 4(1 - lambda) rho n
        - 4 lambda^2 (2p - 1)^2 sum w^2]."""
        w = 1.0 / self.scale
        lam = self.contrast
        rho = self.length / (2.0 * (self.length - 1))
        spread = 4 * (1 - lam) / lam * rho * n
        return np.asarray(
            (self.c / lam) ** 2
            * lam
            * (2 * n + 2 * holders * w - 4 * lam * (2 * self.p - 1) ** 2 * holders * w * w + spread),
            dtype=np.float64,
        )

    def expected_arrays(self, totals: FloatArray, n: float) -> dict[str, FloatArray]:
        padded = np.zeros(self.length)
        padded[1 : self.domain + 1] = totals
        return {"z": 2.0 * (2 * self.p - 1) * self.contrast / self.length * fwht(padded)}

    def audit_model(self, exhaustive: bool) -> OutputModel:
        """Outputs are ordered pairs (position of +1, position of -1), L^2 of them; inputs are
        single items (FHR devices hold at most one key), restricted to three items when not
        exhaustive: every pair of distinct rows overlaps the same way, so any two items give
        the same ratios and supports. Composed, every valid pair (x != y) gains
        (1 - lambda)/K and the client's probabilities are scaled by lambda."""
        items = np.arange(self.domain if exhaustive else min(self.domain, 3))
        h = hadamard_entry(items[:, None] + 1, np.arange(self.length)[None, :]).astype(np.int64)
        quarter = (self.length / 2) ** 2
        plus_first = (h[:, :, None] > 0) & (h[:, None, :] < 0)
        minus_first = (h[:, :, None] < 0) & (h[:, None, :] > 0)
        probs = np.where(plus_first, self.p / quarter, np.where(minus_first, (1 - self.p) / quarter, 0.0))
        labels = tuple("{}" if i == self.d else f"{{{i}:+1}}" for i in items.tolist())
        valid = 1.0 - np.eye(self.length).reshape(-1)
        flat = probs.reshape(items.shape[0], -1)
        if self.contrast < 1.0:
            flat = (1.0 - self.contrast) / self.pairs * valid[None, :] + self.contrast * flat
        return DenseModel(flat, labels, SymbolLayout(valid))
