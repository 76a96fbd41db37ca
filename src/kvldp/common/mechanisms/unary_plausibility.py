"""Plausibility models of the unary-encoded mechanisms (docs/plausibility.md).

Each function returns the statistic's log max-likelihood and per-class pmf that
:func:`kvldp.common.channel.plausibility.refusal_rule` turns into a refusal region, and the
probabilities the estimators use on the reports that region accepts.

* **One-hot unary encoding** (OUE, SUE, IOH, IOH-OUE): a device one-hot encodes one item
  over D bits, bit i set with probability p for its item, q < 1/2 otherwise, so
  Pr[y | item i] = Q(K) (p/q if y_i = 1 else (1-p)/(1-q)) with K the set bits and
  Q(K) = q^K (1-q)^(D-K). The oracles with a ``none`` item (``ell >= 1``) split K into
  k set key bits and the none bit z, because an input can put weight at most
  min(k, ell)/ell on set key bits (Padding-and-Sampling): the statistic is (k, z) and
  max_x Pr[y | x] = Q(K) g(k, z), g = p/q when z = 1 or k >= ell, else
  (min(k, ell) p/q + (ell - k)(1-p)/(1-q)) / ell. Without ``none`` (IOH, ``ell = 0``)
  every item is some input's certain item and g = p/q when K >= 1, (1-p)/(1-q) at K = 0.
  Classes: a device whose item is a key (one set of at least ell keys samples only keys)
  and a device whose item is ``none`` (an empty set).
* **PCKV-UE**: d ternary coordinates; a coordinate is non-zero with probability a for the
  sampled key (its sign v* with probability p) and b otherwise. Pr[y | key k, v*] =
  Q(K) R with K the non-zero coordinates, Q(K) = (b/2)^K (1-b)^(d-K) and R = 2ap/b when
  y_k = v*; the best input samples min(K, ell) of them with matching values and dummies
  otherwise, so max_x Pr[y | x] = Q(K)(min(K, ell)(R - 1) + ell)/ell. Classes: a device
  that sampled a real key, one that sampled a dummy.

A single-symbol report (GRR, OLH, HR, PCKV-GRR, ...) is output with positive
probability by every input, so none of those mechanisms has a refusal region.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from kvldp.common.channel.plausibility import (
    RefusalRule,
    binomial_pmf,
    plus_bernoulli,
    refusal_rule,
)


@dataclass(frozen=True)
class OneHotAccepted:
    """A key-item device's report conditioned on acceptance: Pr[accepted] (``alpha``), its
    item bit's probability of being set (``p``) and any other bit's (``q``); ``none_alpha``
    is Pr[accepted] for a ``none``-item device (``alpha`` where there is no none item)."""

    alpha: float
    p: float
    q: float
    none_alpha: float


def _max_count_note(refused: NDArray[np.bool_], counts: NDArray[np.int64], what: str) -> str:
    """ "a genuine report sets at most 31 bits" (refused counts lie above every accepted one)."""
    accepted = counts[~refused]
    return f"a genuine report {what.format(int(accepted.max()))}" if refused.any() and accepted.size else ""


@lru_cache(maxsize=32)
def one_hot_rule(m: int, p: float, q: float, ell: int, bound: float) -> tuple[RefusalRule, OneHotAccepted]:
    """Rule and accepted probabilities of a one-hot encoding over ``m`` key bits (plus the
    ``none`` bit when ``ell >= 1``); the statistic is k (no none bit) or 2k + z."""
    has_none = ell >= 1
    total = m + int(has_none)
    if not 0.0 < q < p < 1.0:  # q rounds to 0 at a huge epsilon: no likelihood to compare, no rule
        values = 2 * (m + 1) if has_none else m + 1
        inactive = RefusalRule(
            np.zeros(values, bool), np.zeros(values), np.zeros(1), ("any item",), bound, str
        )
        return inactive, OneHotAccepted(1.0, p, q, 1.0)
    log_r, log_s = math.log(p / q), math.log((1 - p) / (1 - q))
    k = np.arange(m + 1)
    key_item = plus_bernoulli(binomial_pmf(m - 1, q), p)
    if not has_none:
        big_k = k
        log_g = np.where(k >= 1, log_r, log_s)
        pmf = key_item[None, :]
        classes: tuple[str, ...] = ("any item",)
        counts = k
    else:
        kk, zz = np.repeat(k, 2), np.tile([0, 1], m + 1)  # value v = 2k + z
        big_k = kk + zz
        partial = (np.minimum(kk, ell) * p / q + (ell - np.minimum(kk, ell)) * (1 - p) / (1 - q)) / ell
        log_g = np.where((zz == 1) | (kk >= ell), log_r, np.log(partial))
        none_item = binomial_pmf(m, q)
        pmf = np.stack(
            [
                np.outer(key_item, [1 - q, q]).reshape(-1),
                np.outer(none_item, [1 - p, p]).reshape(-1),
            ]
        )
        classes = ("key item", "none item")
        counts = big_k
    log_q_k = big_k * math.log(q) + (total - big_k) * math.log1p(-q)
    what = "sets at most {} bits"

    def label(v: int) -> str:
        if has_none:
            return f"{v // 2 + v % 2} of {total} bits set"
        return f"{v} of {total} bits set"

    rule = refusal_rule(
        log_q_k + log_g,
        pmf,
        classes,
        label,
        bound,
        lambda refused: _max_count_note(refused, counts, what),
    )
    acc = (~rule.refused).astype(np.float64)
    if not has_none:  # acc is indexed by k; the item bit, then another bit, set
        alpha = float(key_item @ acc)
        p1 = p * float(binomial_pmf(m - 1, q) @ acc[1:])
        if m < 2:  # one bit: there is no other bit
            return rule, OneHotAccepted(alpha, p1 / alpha, q, alpha)
        rest = binomial_pmf(m - 2, q)
        p2 = q * (p * float(rest @ acc[2:]) + (1 - p) * float(rest @ acc[1:-1]))
        return rule, OneHotAccepted(alpha, p1 / alpha, p2 / alpha, alpha)
    acc2 = acc.reshape(m + 1, 2)  # acc2[k, z]
    z_law = np.array([1 - q, q])
    alpha = float(key_item @ acc2 @ z_law)
    none_alpha = float(binomial_pmf(m, q) @ acc2 @ np.array([1 - p, p]))
    # the item bit set: k = 1 + Binomial(m - 1, q)
    p1 = p * float(binomial_pmf(m - 1, q) @ acc2[1:] @ z_law)
    # another bit set: the none bit (z = 1) when m = 1, else another key bit
    if m >= 2:
        others = plus_bernoulli(binomial_pmf(m - 2, q), p)  # the remaining m - 1 key bits
        p2 = q * float(others @ acc2[1:] @ z_law)
    else:
        p2 = q * float(key_item @ acc2[:, 1])
    return rule, OneHotAccepted(alpha, p1 / alpha, p2 / alpha, none_alpha)


@dataclass(frozen=True)
class PCKVAccepted:
    """PCKV-UE reports conditioned on acceptance, per class: Pr[accepted] for a device that
    sampled a real key (``alpha``) or a dummy (``dummy_alpha``), the sampled coordinate's
    chance of being non-zero (``a``) and any other coordinate's (``b``; ``dummy_b`` for a
    dummy-sampling device). The sign of a non-zero coordinate does not enter the
    statistic, so p is unchanged."""

    alpha: float
    a: float
    b: float
    dummy_alpha: float
    dummy_b: float


@lru_cache(maxsize=32)
def pckv_ue_rule(
    d: int, a: float, b: float, p: float, ell: int, bound: float
) -> tuple[RefusalRule, PCKVAccepted]:
    """Rule and accepted probabilities of PCKV-UE; the statistic is the number of non-zero
    coordinates (set bits of ``pos`` and ``neg``)."""
    k = np.arange(d + 1)
    gain = 2 * a * p / b
    log_g = np.log((np.minimum(k, ell) * (gain - 1) + ell) / ell)
    log_q_k = k * math.log(b / 2) + (d - k) * math.log1p(-b)
    real = plus_bernoulli(binomial_pmf(d - 1, b), a)
    dummy = binomial_pmf(d, b)
    rule = refusal_rule(
        log_q_k + log_g,
        np.stack([real, dummy]),
        ("real key sampled", "dummy sampled"),
        lambda v: f"{v} of {d} keys non-zero (pos and neg bits set)",
        bound,
        lambda refused: _max_count_note(refused, k, "has at most {} non-zero keys"),
    )
    acc = (~rule.refused).astype(np.float64)
    alpha = float(real @ acc)
    a_joint = a * float(binomial_pmf(d - 1, b) @ acc[1:])
    dummy_alpha = float(dummy @ acc)
    dummy_b = b * float(binomial_pmf(d - 1, b) @ acc[1:]) / dummy_alpha
    if d < 2:  # one key: only a dummy-sampling device has a non-sampled coordinate
        return rule, PCKVAccepted(alpha, a_joint / alpha, dummy_b, dummy_alpha, dummy_b)
    rest = binomial_pmf(d - 2, b)
    b_joint = b * (a * float(rest @ acc[2:]) + (1 - a) * float(rest @ acc[1:-1]))
    return rule, PCKVAccepted(alpha, a_joint / alpha, b_joint / alpha, dummy_alpha, dummy_b)
