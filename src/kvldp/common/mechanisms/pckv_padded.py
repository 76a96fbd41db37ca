"""PCKV's padded share: how many reports sampled a padding (dummy) slot, estimated from the counts
(docs/mechanisms.md, *PCKV padded share*).

Padding-and-Sampling (:mod:`~kvldp.common.mechanisms.padding`) makes a device holding s
pairs sample a dummy key with probability pi_s = max(ell - s, 0) / max(s, ell): 1 - s/ell
when s <= ell, 0 when it holds ell pairs or more. The estimators of
:mod:`~kvldp.common.mechanisms.pckv_estimate` are unbiased only if no device holds more
than ell pairs; a device holding more never pads, and its keys are under-counted by
ell/s. The reports reveal the padded share pi = mean over devices of pi_s statistically:
a report's real coordinates (PCKV-UE) or its key (PCKV-GRR) are about a real key more
often when the device sampled a real pair.

Estimator. Let T = sum over keys of (n1[j] + n2[j]), the real symbols of all reports. A
report whose device sampled a real pair carries on average a + (d-1) b of them, one whose
device sampled a dummy d b (both protocols: the sampled coordinate is nonzero with
probability a, every other one with b). So E[T] = n (d b + (1 - pi)(a - b)) and

    pi^ = 1 - (T/n - d b)/(a - b) = 1 - sum_j f^_j / ell

is exactly unbiased for every population (it may leave [0, 1]). Its variance is
Var[T]/(n (a-b))^2 with Var[T] = sum over devices of
pi_u v_D + (1 - pi_u) v_R + pi_u (1 - pi_u)(a - b)^2, v_R and v_D the variances of one
report's real symbols after a real and a dummy sample (PCKV-UE: a(1-a) + (d-1) b(1-b) and
d b(1-b); PCKV-GRR, one Bernoulli: q(1-q) at q = a + (d-1) b and q = d b). Evaluated with
every pi_u equal to the estimate (clipped into [0, 1]) it is exact for a population whose
devices all pad alike, and an upper bound otherwise (sum pi_u(1 - pi_u) <= n pi (1 - pi)).

What it says about ell. The devices holding ell pairs or more never pad, so their share
is at most 1 - pi: :attr:`PaddedShare.unpadded_upper` is a 95% upper bound on it. A padded
share indistinguishable from 0 (that bound at 1) means every device may hold ell pairs or
more, and the frequencies may be biased low: measure the pairs per device on a sample
(``kvldp advise --dataset``). A padded share well above 0 caps the share of devices that
can be truncated but does not rule truncation out (devices holding none and devices holding
many pad on average like devices holding a few). At ell = 1 only devices holding no pair
pad, so the reports say nothing about devices holding two or more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvldp.common.estimation.estimate import Z95


@dataclass(frozen=True)
class PaddedShare:
    """The padded share's unbiased estimate and standard error from ``n_reports`` reports
    of a PCKV collection with padding length ``ell`` (NaN without reports)."""

    estimate: float
    stderr: float
    ell: int
    n_reports: int

    @property
    def unpadded_upper(self) -> float:
        """95% upper bound on the share of devices holding ell pairs or more (they never
        pad): 1 - estimate + Z95 stderr, within [0, 1]; 1 when padding is not detected."""
        if not math.isfinite(self.estimate):
            return math.nan
        return min(1.0, max(0.0, 1.0 - self.estimate + Z95 * self.stderr))


def real_symbol_variances(a: float, b: float, d: int, unary: bool) -> tuple[float, float]:
    """(v_R, v_D): variance of one report's count of real symbols after a real and after a
    dummy sample. ``unary``: PCKV-UE (d independent coordinates), else PCKV-GRR (one key)."""
    if unary:
        return a * (1 - a) + (d - 1) * b * (1 - b), d * b * (1 - b)
    q_real, q_dummy = a + (d - 1) * b, d * b
    return q_real * (1 - q_real), q_dummy * (1 - q_dummy)


def padded_share(
    n: float, real_symbols: float, d: int, ell: int, a: float, b: float, unary: bool
) -> PaddedShare:
    """The padded share of ``n`` reports carrying ``real_symbols`` = sum_j (n1[j] + n2[j])
    in total, for a PCKV configuration (d, ell, a, b); see the module docstring."""
    if n <= 0:
        return PaddedShare(math.nan, math.nan, ell, 0)
    gap = a - b
    estimate = 1.0 - (real_symbols / n - d * b) / gap
    pi = min(1.0, max(0.0, estimate))
    v_real, v_dummy = real_symbol_variances(a, b, d, unary)
    per_report = pi * v_dummy + (1 - pi) * v_real + pi * (1 - pi) * gap * gap
    return PaddedShare(estimate, math.sqrt(per_report / n) / gap, ell, round(n))
