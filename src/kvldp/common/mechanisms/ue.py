"""Unary encoding oracles: OUE and SUE (docs/mechanisms.md, *OUE and SUE*).

The device one-hot encodes its sampled item over D = d (+1 for ``none``) bits and
reports bit i as 1 with probability p if it is the item's bit, q otherwise:
SUE (symmetric, RAPPOR's basic one-time form) p = e^(eps/2) / (e^(eps/2) + 1), q = 1 - p;
OUE (optimised, Wang et al. 2017) p = 1/2, q = 1 / (e^eps + 1). Two one-hot vectors
differ in two bits, so eps = ln[p(1-q) / (q(1-p))], tight for both.

Reports are 2^D-symbol bit vectors, so there is no count EM (the alphabet is not
finite in practice); ``normsub`` provides consistency.

Plausibility (docs/plausibility.md): a report with more set bits than any input makes
plausible is refused; the estimators use the probabilities of the accepted reports,
p' = Pr[item bit set | accepted] and q' = Pr[other bit set | accepted], which every item
shares whenever the refusal region is a set of total set-bit counts.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from kvldp.common.channel.instantaneous import BitsOutput
from kvldp.common.channel.output_model import PatternLayout
from kvldp.common.channel.plausibility import RefusalRule, set_bits
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.itemoracle import ItemOracle, bernoulli_count_variance, enumerate_bit_outputs
from kvldp.common.mechanisms.registry import register
from kvldp.common.mechanisms.unary_plausibility import OneHotAccepted, one_hot_rule
from kvldp.common.primitives import FloatArray, bit_column_sums, one_hot_bits


class UnaryEncoding(ItemOracle):
    """Shared client, statistics and estimator of OUE and SUE."""

    symmetric: ClassVar[bool]

    def _setup_oracle(self) -> None:
        self.p, self.q = self._probabilities(self.epsilon)
        rule, accepted = self._plausibility()
        # the estimators' (p, q): the client's, conditioned on the report being accepted
        self.accepted = accepted if rule.active else OneHotAccepted(1.0, self.p, self.q, 1.0)
        self.est_p, self.est_q = self.accepted.p, self.accepted.q

    def _probabilities(self, epsilon: float) -> tuple[float, float]:
        """(p, q) at ``epsilon``: SUE's randomized response at epsilon/2 per bit, or OUE's."""
        if self.symmetric:
            p = 1.0 / (1.0 + math.exp(-epsilon / 2.0))
            return p, 1.0 - p
        return 0.5, 1.0 / (math.exp(epsilon) + 1.0)

    def _contrast(self, epsilon: float) -> float:
        p, q = self._probabilities(epsilon)
        return p - q

    def randomized_output(self) -> BitsOutput:
        return BitsOutput("bits", self.domain, packed=True)

    def _plausibility(self) -> tuple[RefusalRule, OneHotAccepted]:
        return one_hot_rule(self.d, self.p, self.q, self.ell, type(self).false_refusal_bound)

    def plausibility_rule(self) -> RefusalRule:
        """Refuses reports with too many set bits (docs/plausibility.md, *OUE and SUE*)."""
        return self._plausibility()[0]

    def report_statistic(self, batch: ReportBatch) -> NDArray[np.int64]:
        """k set key bits (``ell = 0``), else 2k + z with z the ``none`` bit."""
        packed = batch["bits"]
        total = set_bits(packed)
        if self.ell == 0:
            return np.minimum(total, self.d)
        z = (packed[:, self.d >> 3] >> np.uint8(self.d & 7)) & np.uint8(1)
        return 2 * np.clip(total - z, 0, self.d) + z.astype(np.int64)

    def acceptance(self) -> float:
        return self.accepted.alpha

    def fields(self) -> tuple[Field, ...]:
        return (Field("bits", "bits", 0, self.domain),)

    def _perturb_items(
        self, items: IntArray, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        return {"bits": one_hot_bits(items, self.domain, self.p, self.q, rng)}

    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"ones": (self.domain,)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        arrays["ones"] += bit_column_sums(batch["bits"], self.domain)

    def count_estimate(self, arrays: dict[str, IntArray]) -> FloatArray:
        n = float(arrays["n"][0])
        return np.asarray((arrays["ones"] - n * self.est_q) / (self.est_p - self.est_q), dtype=np.float64)

    def count_variance(self, n: float, holders: FloatArray) -> FloatArray:
        return bernoulli_count_variance(n, holders, self.est_p, self.est_q, 1.0 / self.scale)

    def expected_arrays(self, totals: FloatArray, n: float) -> dict[str, FloatArray]:
        return {"ones": n * self.est_q + (self.est_p - self.est_q) * totals}

    def _mixture_output_probs(self, weights: FloatArray) -> FloatArray:
        # bits of items no input can sample are Bernoulli(q) for everyone and cancel
        used = np.flatnonzero(weights.sum(axis=0) > 0)
        p_one = np.where(np.eye(self.domain, dtype=bool), self.p, self.q)[np.ix_(used, used)]
        return enumerate_bit_outputs(weights[:, used], p_one)

    def _output_layout(self, outputs: int) -> PatternLayout:
        """Every pattern of the bits some input can sample, one axis per bit."""
        return PatternLayout(blocks=1, coords=outputs.bit_length() - 1, size=2)


@register
class OUE(UnaryEncoding):
    """Optimized unary encoding: the true bit kept with p = 1/2, every other bit set with q =
    1/(e^eps + 1)."""

    name = "oue"
    summary = "optimized unary encoding, p = 1/2, q = 1/(e^eps + 1) (frequency oracle)"
    symmetric = False


@register
class SUE(UnaryEncoding):
    """Symmetric unary encoding: every bit by randomized response at eps/2."""

    name = "sue"
    summary = "symmetric unary encoding, per-bit RR at eps/2 (frequency oracle)"
    symmetric = True
