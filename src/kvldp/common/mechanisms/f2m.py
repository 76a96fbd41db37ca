"""F2M, "frequency to mean": key bit and value perturbed independently (docs/mechanisms.md, *F2M*).

The device samples j uniformly, reports k' = RR_eps1(1[holds j]) and
v' = VPP(v, eps2) for a holder or VPP(v_default, eps2) for a non-holder (Sun et al. 2019, Alg. 3).
The report is (j, c) with c = 2 k' + (v' + 1) / 2.

``unbiased`` is the paper's estimator: f from the key bits, m_all from all value bits and
m = (m_all - (1 - f) v_default) / f (Eq. 2; eps2 in m_all per the erratum), NaN when
f <= 1/N, clipped into [-1, 1]. ``em`` fits the identifiable three-state model whose
non-holder value is Disc(v_default), the protocol's own known fake distribution.
eps1 + eps2 = eps by composition; tight when |v_default| = 1.

Instantaneous randomization flips the key bit and the value bit independently, each
with the same probability: the composed channel is F2M at the composed levels
p_i* = (1 - lambda)/2 + lambda p_i, estimated on the composed transition
(:class:`~kvldp.common.mechanisms.keysampled.TransitionComposed`), where the paper's
estimator at (p1*, p2*) is A M^-1.
"""

from __future__ import annotations

import numpy as np

from kvldp.common.channel.instantaneous import BitsOutput
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.keysampled import ABSENT, NEG, POS, TransitionComposed
from kvldp.common.mechanisms.privkv import KEY_FRACTION
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, disc, flip, rr_keep
from kvldp.common.spec.params import Param

DEFAULT_VALUE = Param(
    "default_value",
    float,
    1.0,
    "value v_default a non-holder perturbs in place of a real one (Sun et al. 2019 use 1)",
    check=lambda v: -1.0 <= float(v) <= 1.0,
    check_doc="must lie in [-1, 1]",
)


@register
class F2M(TransitionComposed):
    """F2M: the sampled key's bit by randomized response at eps1, its value by VPP at eps2, a
    default value for non-holders."""

    name = "f2m"
    summary = "F2M: sampled key bit RR(eps1) and value VPP(eps2) with a default value (Sun et al. 2019)"
    symbol_field = "c"
    params_spec = (KEY_FRACTION, DEFAULT_VALUE)

    def _setup(self) -> None:
        self.eps1 = float(self.params["key_fraction"]) * self.epsilon
        self.eps2 = self.epsilon - self.eps1
        self.p1 = rr_keep(self.eps1)
        self.p2 = rr_keep(self.eps2)
        self.v_default = float(self.params["default_value"])
        p1, p2 = self.p1, self.p2
        key = {1: np.array([1 - p1, p1]), 0: np.array([p1, 1 - p1])}  # P(k' = 0, 1 | holds)
        val = {1: np.array([1 - p2, p2]), -1: np.array([p2, 1 - p2])}  # P(v' = -1, +1 | v*)
        pi = (1.0 + self.v_default) / 2.0
        fake = pi * val[1] + (1 - pi) * val[-1]
        p = np.empty((4, 3))
        p[:, POS] = np.outer(key[1], val[1]).ravel()
        p[:, NEG] = np.outer(key[1], val[-1]).ravel()
        p[:, ABSENT] = np.outer(key[0], fake).ravel()
        self._p = p

    def client_transition(self) -> FloatArray:
        return self._p

    def randomized_output(self) -> BitsOutput:
        """The key bit (bit 1 of c) and the value bit (bit 0)."""
        return BitsOutput(self.symbol_field, 2, packed=False)

    def _perturb_states(self, states: IntArray, rng: np.random.Generator) -> IntArray:
        n = states.shape[0]
        held = states != ABSENT
        key_kept = rng.random(n) < self.p1
        k_rep = np.where(held, key_kept, ~key_kept)
        fake = disc(np.full(n, self.v_default), rng)  # a non-holder perturbs Disc(v_default)
        v_star = np.where(held, np.where(states == POS, 1, -1), fake).astype(np.int8)
        v_rep = flip(v_star, self.p2, rng)
        return (2 * k_rep.astype(np.int64) + (v_rep.astype(np.int64) + 1) // 2).astype(np.int64)

    def client_inverse(self) -> FloatArray:
        ones = np.ones(4)
        key1 = np.array([0.0, 0.0, 1.0, 1.0])  # pi(k' = 1)
        vdiff = np.array([-1.0, 1.0, -1.0, 1.0])  # pi(v' = +1) - pi(v' = -1)
        f_row = (key1 + (self.p1 - 1.0) * ones) / (2 * self.p1 - 1.0)
        mall_row = vdiff / (2 * self.p2 - 1.0)
        diff_row = mall_row - self.v_default * (ones - f_row)  # theta_2 - theta_0
        a = np.empty((3, 4))
        a[POS] = (f_row + diff_row) / 2
        a[NEG] = (f_row - diff_row) / 2
        a[ABSENT] = ones - f_row
        return a

    def _mean_of(self, theta: FloatArray, reports: FloatArray) -> FloatArray:
        f = theta[:, NEG] + theta[:, POS]
        with np.errstate(divide="ignore", invalid="ignore"):
            m = (theta[:, POS] - theta[:, NEG]) / f
        return np.where((f > 1.0 / np.maximum(reports, 1)) & (reports > 0), np.clip(m, -1.0, 1.0), np.nan)
