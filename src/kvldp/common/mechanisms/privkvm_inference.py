"""PrivKVM's inference basis: the unbiased statistics every estimator's 95% intervals come
from (docs/mechanisms.md, *PrivKVM estimators*; the design is
:mod:`kvldp.common.estimation.intervals`').

* the frequency D = f̂ of round 1 (PrivKV-A's inverse of round 1's transition), unbiased;
* the numerator N, an unbiased estimate of f·m: every round r gives
  E[(M_+1 - M_-1)/M] = (2p2 - 1)[p1 f m + (1 - p1)(1 - f) m_pub], so
  N_r = [(M_+1 - M_-1)/M/(2p2 - 1) - (1 - p1)(1 - f̂) m_pub]/p1, and N is their
  combination with weights fixed from each round's own variance estimate.

Given the means published before each round (public, fixed before the round) every
round's counts follow the model, so N and D are unbiased to first order and their
variances and covariance are the delta method through the exact block-diagonal count
covariance. The frequency's interval is D ± Z95·se in [0, 1]; the mean's is Fieller's
set for N/D in [-1, 1], and a key whose set is unbounded (D not significantly above 0)
has a mean that is *not estimable*.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from kvldp.common.estimation.intervals import clipped_interval, fieller_interval
from kvldp.common.estimation.variance import delta_gradient, quad, stderr
from kvldp.common.mechanisms.keysampled import NEG, POS, sampled_count_covariance
from kvldp.common.mechanisms.privkv import lpp_transition
from kvldp.common.mechanisms.privkvm_rounds import PrivKVMRounds
from kvldp.common.primitives import FloatArray


@dataclass(frozen=True)
class Basis:
    """Per key: the raw frequency with its standard error and 95% interval, and the mean's
    Fieller interval with its point N/D (clipped into [-1, 1]; NaN where not estimable)."""

    frequency: FloatArray
    frequency_stderr: FloatArray
    frequency_bounds: tuple[FloatArray, FloatArray]
    mean: FloatArray
    mean_bounds: tuple[FloatArray, FloatArray]
    #: keys with round-1 reports whose Fieller set is unbounded
    not_estimable: NDArray[np.bool_]


class PrivKVMInference(PrivKVMRounds):
    """The unbiased statistics of a PrivKVM configuration and their covariance."""

    @cached_property
    def _round1_inverse(self) -> FloatArray:
        """The transposed inverse of round 1's transition (the fake mean is 0 in round 1)."""
        return np.asarray(np.linalg.inv(lpp_transition(float(self.p1[0]), self.p2)).T, dtype=np.float64)

    def _round1_states(self, counts: FloatArray) -> FloatArray:
        m = counts[0].sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            pi = np.where(m > 0, counts[0] / m, np.nan)
        return np.asarray(pi @ self._round1_inverse, dtype=np.float64)

    def _frequency(self, counts: FloatArray) -> FloatArray:
        theta = self._round1_states(counts)
        return theta[:, NEG] + theta[:, POS]

    def _round_weights(self, counts: FloatArray) -> FloatArray:
        """(c, d) weights of the rounds' N_r, summing to 1 per key (0 for a key without
        reports): inverse variances estimated from each round's own counts."""
        weight = np.zeros(counts.shape[:2])
        for r in range(self.rounds):
            m = counts[r].sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                diff = (counts[r, :, POS] - counts[r, :, NEG]) / m
                keyed = (counts[r, :, POS] + counts[r, :, NEG]) / m
                scale = (2 * self.p2 - 1) * float(self.p1[r])
                var_r = np.maximum(keyed - diff**2, 1e-12) / (m * scale**2)
            weight[r] = np.where((m > 0) & np.isfinite(var_r), 1.0 / var_r, 0.0)
        total = weight.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(total > 0, weight / total, 0.0)

    def _numerator(self, counts: FloatArray, published: FloatArray, weights: FloatArray) -> FloatArray:
        """N = sum_r weights_r N_r (NaN for a key without weight)."""
        f = self._frequency(counts)
        m = counts.sum(axis=2)
        p1 = self.p1[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            diff = (counts[:, :, POS] - counts[:, :, NEG]) / m
            n_r = (diff / (2 * self.p2 - 1) - (1 - p1) * (1 - f) * published[: self.rounds]) / p1
        total = np.where(weights > 0, weights * n_r, 0.0).sum(axis=0)
        return np.where(weights.sum(axis=0) > 0, total, np.nan)

    def _ratio_mean(self, counts: FloatArray) -> FloatArray:
        """N/D clipped into [-1, 1], NaN where D <= 0: the basis's point without its interval."""
        num = self._numerator(counts, self.published_means(counts), self._round_weights(counts))
        den = self._frequency(counts)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, np.clip(num / den, -1.0, 1.0), np.nan)

    def _covariance(self, counts: FloatArray, theta: FloatArray) -> FloatArray:
        """Block-diagonal covariance of all rounds' counts per key: (d, 3c, 3c). Each round
        has its own participants (one report each), so its own user count."""
        published = self.published_means(counts)
        trans = self.round_transitions(published)
        cov = np.zeros((self.d, 3 * self.rounds, 3 * self.rounds))
        for r in range(self.rounds):
            participants = int(counts[r].sum())
            if participants:
                block = sampled_count_covariance(trans[r], theta, counts[r].sum(axis=1), participants)
                cov[:, 3 * r : 3 * r + 3, 3 * r : 3 * r + 3] = block
        return cov

    def _basis(
        self,
        counts: FloatArray,
        flat: FloatArray,
        unflat: Callable[[FloatArray], FloatArray],
        cov: FloatArray,
    ) -> Basis:
        """The basis of ``counts`` (flattened per key as ``flat``, with ``cov``): the
        published means and the weights are held fixed through the delta method."""
        published = self.published_means(counts)
        weights = self._round_weights(counts)
        grad_d = delta_gradient(lambda x: self._frequency(unflat(x)), flat)
        grad_n = delta_gradient(lambda x: self._numerator(unflat(x), published, weights), flat)
        den = self._frequency(counts)
        num = self._numerator(counts, published, weights)
        var_d = quad(grad_d, cov)
        se_d = stderr(var_d)
        lo, hi, estimable = fieller_interval(
            num, den, quad(grad_n, cov), var_d, np.einsum("gj,gjk,gk->g", grad_n, cov, grad_d)
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(estimable, np.clip(num / den, -1.0, 1.0), np.nan)
        return Basis(
            frequency=den,
            frequency_stderr=se_d,
            frequency_bounds=clipped_interval(den, se_d),
            mean=mean,
            mean_bounds=(lo, hi),
            not_estimable=np.isfinite(den) & ~estimable,
        )
