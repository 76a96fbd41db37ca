"""KVUE: generalized randomized response over a sampled key's three states (docs/mechanisms.md,
*KVUE*).

Same as the "state encoding" (SE) of Sun, Ping and Ye 2021. The device samples j uniformly, encodes
<k, Disc(v)> as the state code s in {0, 1, 2}, and reports s with probability
p = e^eps / (e^eps + 2), each other state with q = 1 / (e^eps + 2) (Sun et al. 2019, Alg. 4).

The closed form N_s* = ((e^eps + 2) M_s - M) / (e^eps - 1) (Eq. 4) is P^-1; the mean
uses the corrected sign (N_2* - N_0*) / (N_0* + N_2*) with counts clipped into [0, M]
(docs/mechanisms.md, *Sun et al. 2019 errata*; PCKV's correction of KVUE). eps-LDP, tight.
"""

from __future__ import annotations

import numpy as np

from kvldp.common.channel.instantaneous import SymbolOutput
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.keysampled import KeySampledMechanism
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, grr_probs


@register
class KVUE(KeySampledMechanism):
    """KVUE: generalized randomized response over the sampled key's three states."""

    name = "kvue"
    summary = (
        "KVUE / state encoding: GRR over the sampled key's 3 states (Sun et al. 2019; Sun, Ping, Ye 2021)"
    )
    symbol_field = "s"

    def _setup(self) -> None:
        self.p, self.q = grr_probs(self.epsilon, 3)
        self._p: FloatArray = np.where(np.eye(3, dtype=bool), self.p, self.q)

    def transition(self) -> FloatArray:
        return self._p

    def randomized_output(self) -> SymbolOutput:
        return SymbolOutput((self.symbol_field,), 3)

    def _contrast(self, epsilon: float) -> float:
        p, q = grr_probs(epsilon, 3)
        return p - q

    def _perturb_states(self, states: IntArray, rng: np.random.Generator) -> IntArray:
        keep = rng.random(states.shape[0]) < self.p
        other = (states + rng.integers(1, 3, size=states.shape[0])) % 3  # one of the two others, uniformly
        return np.where(keep, states, other).astype(np.int64)

    def linear_inverse(self) -> FloatArray:
        e = float(np.exp(self.epsilon))
        a: FloatArray = ((e + 2.0) * np.eye(3) - 1.0) / (e - 1.0)
        return a
