"""Instantaneous randomization: every send of a memoized report randomized again, freshly.

A memoized report (:mod:`kvldp.common.guarantees.memo`) is RAPPOR's *permanent* randomized response
(Erlingsson et al. 2014): a device re-sends it unchanged while its state holds, so the
server sees when the state changes. RAPPOR hides the change times behind an
*instantaneous* randomized response of every send. This module is that second layer: a
randomizer of a report's output fields (never of its public fields, which do not depend
on the input), applied at every send with fresh randomness. Reference:
docs/mechanisms.md, *Instantaneous randomization*.

The randomizer has one strength, its *contrast* lambda in (0, 1): on each randomized
coordinate, a symbol over K values is kept with probability p1 = lambda + (1 - lambda)/K
and otherwise replaced by one of the K - 1 others uniformly (q1 = (1 - lambda)/K each).
Any law P of the coordinate becomes q1 + lambda P, so a channel described by a few
probability levels keeps its shape at levels moved toward 1/K, and a channel's contrast
(the gap between the probability of the true symbol and of another) is multiplied by
lambda. Each mechanism solves lambda so that the composed channel, its client then this
randomizer, is exactly eps1-LDP with respect to the device's input
(:meth:`kvldp.common.mechanisms.base.Mechanism.instantaneous`).

Three kinds of output, one implementation each:

* :class:`SymbolOutput`: one symbol, a uint field or a group of fields forming one symbol
  (PCKV-GRR's key and sign, FHR's two positions): K-ary randomized response.
* :class:`BitsOutput`: a bit vector, a ``bits`` field or a uint holding a few bits (KVOH's
  three state bits, F2M's key and value bits): every bit flipped with probability q1.
* :class:`TernaryOutput`: PCKV-UE's vector over {0, +1, -1}, two exclusive bitsets: every
  coordinate kept with probability p1, else one of its two other values uniformly.

What one send reveals about the memoized report itself is the randomizer's own LDP level
on its input, coordinates x ln(p1/q1) (:attr:`InstantaneousRandomizer.epsilon_on_output`):
two reports that differ in h coordinates are told apart at most at h ln(p1/q1).

The n sends of one state are not n independent eps1-LDP releases: they randomize one
memoized report, so a send is eps1-LDP on its own but not given the sends before it, and
n sends can reveal more than n eps1 (:func:`epsilon_per_send_bound` has an example). What
does hold: n sends reveal at most min(eps_inf, eps1 + (n - 1) eps_out), the first send eps1
and each later one at most eps_out given those before it (a mixture of the randomizer's
rows); so a device that sent R reports, however they fall into states, revealed at most R
times :func:`epsilon_per_send_bound`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.schema import ReportBatch
from kvldp.common.primitives import FloatArray, IntArray, bernoulli_bits

#: bisection steps of :func:`solve_contrast` (float64 resolves the contrast long before)
_BISECTION_STEPS = 200


def kept_and_other(size: int, contrast: float) -> tuple[float, float]:
    """(p1, q1): the chance a coordinate over ``size`` values is kept, and of each other value."""
    other = (1.0 - contrast) / size
    return contrast + other, other


def symbol_kernel(size: int, contrast: float) -> FloatArray:
    """The K x K randomized response q1 + lambda I: entry [y', y] = Pr[y' | y]."""
    _, other = kept_and_other(size, contrast)
    return np.full((size, size), other) + contrast * np.eye(size)


@dataclass(frozen=True)
class SymbolOutput:
    """One symbol over ``size`` values coded in ``fields``. Without ``encode``/``decode`` the
    symbol is the single field's value; a group of fields supplies both."""

    fields: tuple[str, ...]
    size: int
    encode: Callable[[ReportBatch], IntArray] | None = None
    decode: Callable[[IntArray], ReportBatch] | None = None

    @property
    def coords(self) -> int:
        return 1

    def symbols(self, batch: ReportBatch) -> IntArray:
        """The symbol of every report of a batch, in [0, size)."""
        if self.encode is not None:
            return self.encode(batch)
        return np.asarray(batch[self.fields[0]], dtype=np.int64)

    def randomize(self, batch: ReportBatch, contrast: float, rng: np.random.Generator) -> ReportBatch:
        """The randomized fields: kept with probability p1, else a uniform other symbol."""
        keep, _ = kept_and_other(self.size, contrast)
        symbols = self.symbols(batch)
        n = symbols.shape[0]
        kept = rng.random(n) < keep
        other = (symbols + rng.integers(1, self.size, size=n)) % self.size
        new = np.where(kept, symbols, other).astype(np.int64)
        if self.decode is not None:
            return self.decode(new)
        field = self.fields[0]
        return {field: new.astype(batch[field].dtype)}

    def matrix(self, contrast: float) -> FloatArray:
        return symbol_kernel(self.size, contrast)


@dataclass(frozen=True)
class BitsOutput:
    """``nbits`` bits in ``field``: a ``bits`` field (``packed``) or a uint holding them, bit
    i of the value being coordinate i."""

    field: str
    nbits: int
    packed: bool

    @property
    def fields(self) -> tuple[str, ...]:
        return (self.field,)

    @property
    def size(self) -> int:
        return 2

    @property
    def coords(self) -> int:
        return self.nbits

    def randomize(self, batch: ReportBatch, contrast: float, rng: np.random.Generator) -> ReportBatch:
        """Every bit flipped with probability q1, exactly (:func:`~kvldp.common.primitives.bernoulli_bits`)."""
        column = batch[self.field]
        _, flip = kept_and_other(2, contrast)
        flips = bernoulli_bits(column.shape[0], self.nbits, flip, rng)
        if self.packed:
            return {self.field: np.bitwise_xor(column, flips)}
        return {self.field: np.bitwise_xor(column, flips[:, 0].astype(column.dtype))}

    def matrix(self, contrast: float) -> FloatArray:
        """Pr[b' | b] over the 2^nbits values (bit i of the value = coordinate i)."""
        out: FloatArray = np.ones((1, 1))
        for _ in range(self.nbits):
            out = np.asarray(np.kron(out, symbol_kernel(2, contrast)), dtype=np.float64)
        return out


@dataclass(frozen=True)
class TernaryOutput:
    """``nbits`` coordinates over {0, +1, -1} as two exclusive bitsets: ``positive`` holds
    the +1 coordinates, ``negative`` the -1 ones."""

    positive: str
    negative: str
    nbits: int

    @property
    def fields(self) -> tuple[str, ...]:
        return (self.positive, self.negative)

    @property
    def size(self) -> int:
        return 3

    @property
    def coords(self) -> int:
        return self.nbits

    def randomize(self, batch: ReportBatch, contrast: float, rng: np.random.Generator) -> ReportBatch:
        """Every coordinate moved with probability 2 q1 (exactly), to the next value of the
        cycle 0 -> +1 -> -1 -> 0 or to the one after with probability 1/2 each; in bitwise
        form on the packed rows (the padding bits never move)."""
        pos, neg = batch[self.positive], batch[self.negative]
        n = pos.shape[0]
        _, other = kept_and_other(3, contrast)
        moved = bernoulli_bits(n, self.nbits, 2.0 * other, rng)
        twice = bernoulli_bits(n, self.nbits, 0.5, rng)
        once = moved & ~twice
        both = moved & twice
        zero = ~pos & ~neg
        new_pos = (~moved & pos) | (once & zero) | (both & neg)
        new_neg = (~moved & neg) | (once & pos) | (both & zero)
        return {self.positive: new_pos, self.negative: new_neg}

    def matrix(self, contrast: float) -> FloatArray:
        raise NotImplementedError(
            "a ternary vector is randomized coordinate by coordinate, not as one symbol"
        )


RandomizedOutput = SymbolOutput | BitsOutput | TernaryOutput


@dataclass(frozen=True)
class InstantaneousRandomizer:
    """The instantaneous randomization of one mechanism: its ``output``, its ``contrast``
    lambda and the guarantee it was solved for, ``epsilon_per_report`` (eps1: the composed
    channel's exact level with respect to the device's input)."""

    output: RandomizedOutput
    contrast: float
    epsilon_per_report: float

    @property
    def keep(self) -> float:
        """p1: the chance that a coordinate is kept."""
        return kept_and_other(self.output.size, self.contrast)[0]

    @property
    def other(self) -> float:
        """q1: the chance of each other value of a coordinate."""
        return kept_and_other(self.output.size, self.contrast)[1]

    @property
    def epsilon_on_output(self) -> float:
        """The randomizer's own LDP level on its input, the memoized report:
        coords x ln(p1/q1) (two memoized reports differing in every coordinate)."""
        k = self.output.size
        return self.output.coords * math.log1p(k * self.contrast / (1.0 - self.contrast))

    def send_bound(self, state_epsilon: float) -> float:
        """What each send reveals at most, averaged over the sends of any state, when the
        memoized report is ``state_epsilon``-LDP (:func:`epsilon_per_send_bound`)."""
        return epsilon_per_send_bound(state_epsilon, self.epsilon_per_report, self.epsilon_on_output)

    def randomize(self, batch: ReportBatch, rng: np.random.Generator) -> ReportBatch:
        """The batch with its output fields randomized (fresh draws from ``rng``); every
        other column, the public fields included, is the batch's own."""
        return {**batch, **self.output.randomize(batch, self.contrast, rng)}

    def matrix(self) -> FloatArray:
        """Pr[y' | y] over the values of a symbol or a few bits."""
        return self.output.matrix(self.contrast)

    def describe(self) -> dict[str, Any]:
        """The solved parameters, as JSON fields."""
        return {
            "fields": list(self.output.fields),
            "values": self.output.size,
            "coordinates": self.output.coords,
            "contrast": self.contrast,
            "keep": self.keep,
            "epsilon_per_report": self.epsilon_per_report,
            "epsilon_on_output": self.epsilon_on_output,
        }


def solve_contrast(level: Callable[[float], float], target: float) -> float:
    """The contrast at which the increasing function ``level`` (the composed channel's exact
    privacy level, 0 at contrast 0) reaches ``target``, by bisection to float resolution;
    the largest contrast found whose level does not exceed the target."""
    low, high = 0.0, 1.0
    for _ in range(_BISECTION_STEPS):
        mid = (low + high) / 2.0
        if mid in (low, high):
            break
        if level(mid) <= target:
            low = mid
        else:
            high = mid
    return low


def max_log_ratio_of(channel: NDArray[np.float64]) -> float:
    """max over outputs z and inputs x, x' of ln P[z | x] / P[z | x'] of a (outputs, inputs)
    channel with positive entries."""
    logs = np.log(channel)
    return float(np.max(logs.max(axis=1) - logs.min(axis=1)))


def epsilon_per_send_bound(state_epsilon: float, per_report: float, on_output: float) -> float:
    """c = max over n >= 1 of min(eps_inf, eps1 + (n - 1) eps_out) / n: n sends of one state
    reveal at most n c, so R sends of a device, in any number of states, at most R c.

    ``state_epsilon`` is eps_inf (the memoized report's level), ``per_report`` eps1 (one
    send's), ``on_output`` eps_out (the randomizer's on the memoized report, >= eps1). The
    bound n eps1 does not hold: for GRR over 5 items at eps_inf = 1, eps1 = 0.1, two sends
    of one state reveal 0.2116 exactly. For n >= 2 the ratio is at most eps_inf / n, so c <=
    max(eps1, eps_inf / 2): c is eps1 when eps_inf <= 2 eps1, and max(eps1, eps_inf / 2)
    whenever eps_out >= eps_inf - eps1.

    The numerator grows by eps_out per send until it reaches eps_inf at n* = 1 + (eps_inf -
    eps1) / eps_out; below n* the ratio increases (eps_out >= eps1), above it eps_inf / n
    decreases, so the maximum is at n = 1, floor(n*) or ceil(n*)."""

    def average(n: int) -> float:
        return min(state_epsilon, per_report + (n - 1) * on_output) / n

    crossing = 1.0 + max(0.0, state_epsilon - per_report) / on_output
    return max(average(1), average(max(1, math.floor(crossing))), average(max(1, math.ceil(crossing))))
