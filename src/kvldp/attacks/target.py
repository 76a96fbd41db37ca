"""The attacker's goal: the target keys T and the target mean m*."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kvldp.common.data.schema import ReportBatch
from kvldp.common.errors import KvldpError
from kvldp.common.primitives import IntArray
from kvldp.common.typed_fields import is_number

if TYPE_CHECKING:
    from kvldp.common.mechanisms import Mechanism


class InvalidTarget(KvldpError):
    """Target keys outside the domain, repeated, none at all, or a mean outside [-1, 1]."""


@dataclass(frozen=True)
class Target:
    """Target keys (distinct indices) and the value m* in [-1, 1] the fakes promote."""

    keys: IntArray
    mean: float = 1.0

    def __post_init__(self) -> None:
        if self.keys.ndim != 1 or self.keys.size == 0:
            raise InvalidTarget("an attack needs at least one target key")
        if np.unique(self.keys).size != self.keys.size:
            raise InvalidTarget("target keys must be distinct")
        if not is_number(self.mean) or not -1.0 <= float(self.mean) <= 1.0:
            raise InvalidTarget(f"the target mean must lie in [-1, 1], got {self.mean!r}")

    def check(self, d: int) -> None:
        """Refuse targets outside [0, d)."""
        if self.keys.min() < 0 or self.keys.max() >= d:
            raise InvalidTarget(f"target keys must lie in [0, {d}), got {self.keys.tolist()}")

    @property
    def sign(self) -> int:
        """The value the maximal-gain reports favour: +1 for m* >= 0, else -1."""
        return 1 if self.mean >= 0 else -1

    def pick(self, n: int, rng: np.random.Generator) -> IntArray:
        """A uniform target per fake."""
        return np.asarray(self.keys[rng.integers(0, self.keys.size, size=n)], dtype=np.int64)


def rarest_keys(frequencies: np.ndarray, r: int, rng: np.random.Generator) -> IntArray:
    """The ``r`` keys of smallest true frequency, ties broken at random by ``rng``."""
    if not 1 <= r <= frequencies.size:
        raise InvalidTarget(f"--targets must lie in [1, {frequencies.size}] (the number of keys), got {r}")
    order = np.lexsort((rng.random(frequencies.size), frequencies))
    return np.sort(order[:r]).astype(np.int64)


#: a fake-report generator: (mechanism, number of fakes, target, generator) -> report batch
FakeGenerator = Callable[["Mechanism", int, Target, np.random.Generator], ReportBatch]


def choose_targets(frequencies: np.ndarray, r: int, mean: float, seed: int) -> Target:
    """The target of ``kvldp attack`` and ``kvldp produce --fake-fraction``: the ``r`` rarest
    keys of the population (ties broken by ``seed``) and the mean ``mean``."""
    return Target(rarest_keys(frequencies, r, np.random.default_rng([seed, 0x7A])), mean)
