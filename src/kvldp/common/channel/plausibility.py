"""The exact one-report plausibility rule (docs/plausibility.md).

A report y is refused when no input makes it plausible: when max over inputs x of
Pr[y | x] is below a threshold tau, the largest threshold such that, for every genuine
input, the probability that its own report is refused is at most
:data:`FALSE_REFUSAL_BOUND`.

For the mechanisms that use it, max_x Pr[y | x] depends on y only through a small
*statistic* (the number of set bits of a unary report, ...), and so does the law of
the statistic under every input, up to a few *classes* of inputs (a device that sampled
a real key or a dummy). Each mechanism supplies, per value v of its statistic, the log
of the largest likelihood of a report with that value, log M(v), and the exact pmf of the
statistic under each class; :func:`refusal_rule` does the rest:

1. sort the values by M (ties stay together: a threshold cannot split them);
2. refuse the longest prefix of least likely values whose mass under the worst class
   stays <= the bound.

The refused set is {v : M(v) < tau} with tau the likelihood of the first accepted value,
and adding the next value would push some class over the bound, so tau is the largest
threshold. The false refusal rate of each class is an exact sum of binomial-type pmfs,
computed in log space (:func:`log_binomial_pmf`), never simulated.

Refusal is post-processing on the server: it changes nothing in what a device discloses,
so every privacy guarantee and the exact audit stand as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from kvldp.common.primitives import FloatArray, IntArray, popcount

#: Largest probability that a genuine report is refused, for every input (not a
#: collection setting). At 1e-6 a collection of 10^6 genuine reports expects at most one
#: false refusal, while crude forged reports (every bit of a unary report set) lie many
#: orders of magnitude further out and are refused with certainty.
FALSE_REFUSAL_BOUND = 1e-6

#: log-likelihoods closer than this are the same value (a threshold cannot split them)
_TIE = 1e-9

#: bytes counted per block by :func:`set_bits` (bounds its temporary memory)
_SET_BITS_BLOCK = 1 << 20


def set_bits(packed: NDArray[np.uint8]) -> IntArray:
    """Number of set bits in each row of a packed bitset matrix (padding bits included:
    rows with padding bits set are refused by the schema before this matters).

    Rows are zero-padded to whole 64-bit words and counted a word at a time (SWAR
    popcount, :func:`~kvldp.common.primitives.popcount`): 2-8x faster than a per-byte
    lookup table on the wide reports of unary encodings and IOH."""
    n, nbytes = packed.shape
    out = np.empty(n, dtype=np.int64)
    width = -(-nbytes // 8) * 8
    step = max(1, _SET_BITS_BLOCK // max(width, 1))
    for start in range(0, n, step):
        block = packed[start : start + step]
        padded = np.zeros((block.shape[0], width), dtype=np.uint8)
        padded[:, :nbytes] = block
        out[start : start + step] = popcount(padded.view(np.uint64)).sum(axis=1, dtype=np.int64)
    return out


@lru_cache(maxsize=8)
def _log_factorials(n: int) -> FloatArray:
    return np.array([math.lgamma(k + 1.0) for k in range(n + 1)], dtype=np.float64)


def log_binomial_pmf(n: int, prob: float) -> FloatArray:
    """log Pr[Binomial(n, prob) = k] for k = 0..n, exact to rounding (``math.lgamma``)."""
    lf = _log_factorials(n)
    k = np.arange(n + 1)
    with np.errstate(divide="ignore"):
        return np.asarray(
            lf[n] - lf[k] - lf[n - k] + k * math.log(prob) + (n - k) * math.log1p(-prob), dtype=np.float64
        )


def binomial_pmf(n: int, prob: float) -> FloatArray:
    """Pr[Binomial(n, prob) = k] for k = 0..n (0 where it underflows)."""
    return np.exp(log_binomial_pmf(n, prob))


def plus_bernoulli(pmf: FloatArray, prob: float) -> FloatArray:
    """The pmf of X + Bernoulli(prob) for X with pmf ``pmf`` over 0..n (length n + 2)."""
    out = np.zeros(pmf.shape[0] + 1)
    out[:-1] += (1.0 - prob) * pmf
    out[1:] += prob * pmf
    return out


@dataclass(frozen=True)
class RefusalRule:
    """The refusal region of one configuration over the values of its statistic."""

    #: which values of the statistic are refused
    refused: NDArray[np.bool_]
    #: log of the largest probability, over all inputs, of a report with each value
    log_max_likelihood: FloatArray
    #: exact Pr[a report is refused | class], per class of inputs
    false_refusal: FloatArray
    #: the input classes, in the order of ``false_refusal``
    classes: tuple[str, ...]
    #: the false refusal bound the rule was built for
    bound: float
    #: what a value of the statistic means ("41 of 50 bits set")
    label: Callable[[int], str]
    #: what a genuine report looks like ("a genuine report sets at most 31")
    accepted_note: str = ""

    @property
    def active(self) -> bool:
        """Whether any value is refused (tiny domains: no value is unlikely enough)."""
        return bool(self.refused.any())

    @property
    def log_threshold(self) -> float:
        """log tau: reports whose largest likelihood is below it are refused (-inf: none)."""
        accepted = self.log_max_likelihood[~self.refused]
        return float(accepted.min()) if self.active and accepted.size else -math.inf

    def refuses(self, values: IntArray) -> NDArray[np.bool_]:
        """The refused mask of reports with statistic ``values``."""
        return np.asarray(self.refused[values], dtype=bool)

    def detail(self, value: int) -> str:
        """The DLQ detail of a refused report."""
        note = f"; {self.accepted_note}" if self.accepted_note else ""
        return (
            f"{self.label(value)}{note} (no input makes it likelier than "
            f"e^{self.log_threshold:.4g}; false refusal <= {self.bound:g})"
        )


def refusal_rule(
    log_max_likelihood: FloatArray,
    pmf: FloatArray,
    classes: tuple[str, ...],
    label: Callable[[int], str],
    bound: float = FALSE_REFUSAL_BOUND,
    accepted_note: Callable[[NDArray[np.bool_]], str] | None = None,
) -> RefusalRule:
    """Refuse the least likely values while every class's refused mass stays <= ``bound``.

    ``log_max_likelihood`` is (V,), ``pmf`` is (classes, V): the exact law of the
    statistic under each class of inputs (every input's law is a mixture of them, so the
    worst input is a class).
    """
    lml = np.asarray(log_max_likelihood, dtype=np.float64)
    order = np.argsort(lml, kind="stable")
    ranked = lml[order]
    # a group ends where the next value is strictly likelier
    ends = np.flatnonzero(np.append(np.diff(ranked) > _TIE, True))
    mass = np.cumsum(pmf[:, order], axis=1)[:, ends]  # (classes, groups)
    within = np.flatnonzero(mass.max(axis=0) <= bound)
    # cumulative mass only grows, so the admissible groups are a prefix
    groups = int(within[-1]) + 1 if within.size else 0
    refused = np.zeros(lml.shape[0], dtype=bool)
    if groups:
        refused[order[: ends[groups - 1] + 1]] = True
    false_refusal = np.asarray(pmf[:, refused].sum(axis=1), dtype=np.float64)
    note = accepted_note(refused) if accepted_note is not None else ""
    return RefusalRule(refused, lml, false_refusal, classes, bound, label, note)


def next_refusal_mass(rule: RefusalRule, pmf: FloatArray) -> float:
    """The worst class's refused mass if the next group of values were refused too
    (inf when every value is already refused): the proof that tau is the largest."""
    accepted = ~rule.refused
    if not accepted.any():
        return math.inf
    lml = rule.log_max_likelihood
    lowest = lml[accepted].min()
    nxt = accepted & (lml <= lowest + _TIE)
    return float((pmf[:, rule.refused | nxt]).sum(axis=1).max())
