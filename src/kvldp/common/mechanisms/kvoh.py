"""KVOH: one-hot over the sampled key's three states, each bit by RR at eps/2 (docs/mechanisms.md,
*KVOH*).

The device one-hot encodes the state code s of a uniformly sampled key into three
bits and reports each bit kept with p = e^(eps/2) / (e^(eps/2) + 1) (Sun et al. 2019, Alg. 5). The
report is (j, b) with b the 3-bit mask (bit i = reported A'[i]).

Statistics keep the histogram of the 8 patterns per key (EM needs the pattern, not
just the bit sums). ``unbiased`` is the paper's per-bit calibration
N_i* = ((e^(eps/2) + 1) M_i - N) / (e^(eps/2) - 1); ``em`` is the MLE over the 8
patterns, which differs from the linear estimate (more outputs than states) and is
more efficient. Two one-hot vectors differ in two bits: eps-LDP, tight.
"""

from __future__ import annotations

import numpy as np

from kvldp.common.channel.instantaneous import BitsOutput
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.keysampled import KeySampledMechanism
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, rr_keep

BITS = np.array([[(b >> i) & 1 for i in range(3)] for b in range(8)], dtype=np.float64)  # (pattern, bit)


@register
class KVOH(KeySampledMechanism):
    """KVOH: the one-hot of the sampled key's three states, every bit by randomized response at eps/2."""

    name = "kvoh"
    summary = "KVOH: one-hot of the sampled key's state, per-bit RR at eps/2 (Sun et al. 2019)"
    symbol_field = "b"

    def _setup(self) -> None:
        self.p = rr_keep(self.epsilon / 2.0)
        onehot = np.eye(3)
        # P[b | x] = prod_i (p if bit_i(b) == onehot_x[i] else 1 - p)
        agree = BITS[:, None, :] == onehot[None, :, :]
        self._p: FloatArray = np.prod(np.where(agree, self.p, 1.0 - self.p), axis=2, dtype=np.float64)

    def transition(self) -> FloatArray:
        return self._p

    def randomized_output(self) -> BitsOutput:
        return BitsOutput(self.symbol_field, 3, packed=False)

    def _contrast(self, epsilon: float) -> float:
        return 2.0 * rr_keep(epsilon / 2.0) - 1.0

    def _perturb_states(self, states: IntArray, rng: np.random.Generator) -> IntArray:
        onehot = (states[:, None] == np.arange(3)[None, :]).astype(np.int64)
        flipped = rng.random(onehot.shape) >= self.p
        bits = np.where(flipped, 1 - onehot, onehot)
        codes: IntArray = bits @ np.array([1, 2, 4], dtype=np.int64)
        return codes

    def linear_inverse(self) -> FloatArray:
        e = float(np.exp(self.epsilon / 2.0))
        a: FloatArray = ((e + 1.0) * BITS.T - 1.0) / (e - 1.0)
        return a
