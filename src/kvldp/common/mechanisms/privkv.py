"""PrivKV's local perturbation protocol (LPP) and its estimators (docs/mechanisms.md, *PrivKV*).

Client (Sun et al. 2019, Alg. 1): draw j uniformly; a holder of j reports <1, VPP(v, eps2)> with
probability p1, else <0,0>; a non-holder reports <0,0> with probability p1, else
<1, VPP(m, eps2)> with a fake m ~ U[-1, 1]. The report is (j, s) with the state code s.

Estimators:

* ``unbiased`` — PrivKV-A (Sun et al. 2019, Sec. III): the exact inverse of the three-state model, so
  both the state counts and the frequency are unbiased; the mean is their ratio with
  counts clipped into [0, M].
* ``paper`` — PrivKV's calibration (Sun et al. 2019, Alg. 2, erratum n1* - n2* applied): ignores the
  fake reports, so its mean is shrunk toward 0 by w = f p1 / (f p1 + (1-f)(1-p1)).
* ``em`` — EM3 (docs/mechanisms.md, *PrivKV EM3 and EM4*): the identifiable model whose fake value is a fair coin;
  its MLE equals PrivKV-A when that lies inside the simplex. Warm-startable.
* ``em4`` — the four-state model as published by Horigome et al. 2023. Its mean is not
  identified (it depends on the start point), so it always starts from uniform and is
  for reproducing that paper only.
* ``normsub`` — PrivKV-A projected onto the simplex per key.
* ``robust`` — ``em`` with keys that received significantly more reports than uniform key
  sampling allows corrected for the excess (docs/robust.md).

Privacy: (eps1 + eps2)-LDP by composition; the exact level is
max{eps2, eps1 + ln(2 / (1 + e^-eps2))}, which the audit reproduces.

Instantaneous randomization: 3-ary randomized response of the reported state leaves the
LPP's family (the key bit's randomized response is no longer symmetric), so the composed
channel is estimated on the composed transition (:class:`~kvldp.common.mechanisms.keysampled.TransitionComposed`);
``paper`` calibrates the de-randomized counts and ``em4`` fits the composed four-state model.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from kvldp.common.channel.instantaneous import SymbolOutput
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.em import em_counts, parse_em_options
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.keysampled import ABSENT, NEG, POS, TransitionComposed
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, disc, flip, rr_keep
from kvldp.common.spec.params import Param

KEY_FRACTION = Param(
    "key_fraction",
    float,
    0.5,
    "share of epsilon spent on the key bit (eps1 = key_fraction * epsilon, eps2 = the rest)",
    check=lambda v: 0.0 < float(v) < 1.0,
    check_doc="must lie strictly between 0 and 1",
)


def lpp_transition(p1: float, p2: float, fake_mean: FloatArray | float = 0.0) -> FloatArray:
    """EM3's P[z | x] for the LPP (rows z, columns x, both in state-code order).

    A non-holder perturbs a fake value whose Disc is +1 with probability (1 + fake_mean)/2:
    0 for PrivKV's m ~ U[-1, 1], the published mean in PrivKVM's later rounds. An array of
    fake means gives one matrix per key, (d, 3, 3).
    """
    q1, q2 = 1.0 - p1, 1.0 - p2
    fm = np.asarray(fake_mean, dtype=np.float64)
    up = (1.0 + fm) / 2.0 * p2 + (1.0 - fm) / 2.0 * q2  # Pr[the fake value is reported as +1]
    p = np.empty((*fm.shape, 3, 3))
    p[..., :, NEG] = (p1 * p2, q1, p1 * q2)
    p[..., NEG, ABSENT] = q1 * (1.0 - up)
    p[..., ABSENT, ABSENT] = p1
    p[..., POS, ABSENT] = q1 * up
    p[..., :, POS] = (p1 * q2, q1, p1 * p2)
    return p


def lpp_perturb(
    states: IntArray, p1: float, p2: float, rng: np.random.Generator, fake_mean: FloatArray | None = None
) -> IntArray:
    """Sun et al. 2019, Alg. 1, step by step, vectorised over users (``states`` are state codes).

    A non-holder's fake value is m ~ U[-1, 1] (PrivKV) or, when ``fake_mean`` is given,
    that per-user value (PrivKVM's published mean of the sampled key); either way it goes
    through Disc and VPP exactly like a real value.
    """
    n = states.shape[0]
    held = states != ABSENT
    true_sign = np.where(states == POS, 1, -1).astype(np.int8)
    fake = rng.uniform(-1.0, 1.0, size=n) if fake_mean is None else fake_mean
    fake_sign = disc(np.asarray(fake, dtype=np.float64), rng)
    reported = flip(np.where(held, true_sign, fake_sign).astype(np.int8), p2, rng)  # VPP
    key_kept = rng.random(n) < p1
    key_bit = np.where(held, key_kept, ~key_kept)
    return np.where(key_bit, reported.astype(np.int64) + 1, ABSENT).astype(np.int64)


def em4_transition(p1: float, p2: float) -> FloatArray:
    """Horigome et al. 2023, Table 1 (corrected): rows z in state-code order, columns <1,+1>, <1,-1>, <0,+1>, <0,-1>."""
    q1, q2 = 1.0 - p1, 1.0 - p2
    p = np.empty((3, 4))
    p[POS] = (p1 * p2, p1 * q2, q1 * p2, q1 * q2)
    p[NEG] = (p1 * q2, p1 * p2, q1 * q2, q1 * p2)
    p[ABSENT] = (q1, q1, p1, p1)
    return p


@register
class PrivKV(TransitionComposed):
    """PrivKV's local perturbation protocol: the sampled key's bit by RR at eps1, its value by VPP at eps2."""

    name = "privkv"
    summary = "PrivKV LPP: sampled key bit RR(eps1) + value VPP(eps2) (Ye et al. 2019; Sun et al. 2019)"
    symbol_field = "s"
    params_spec = (KEY_FRACTION,)
    estimator_names = ("unbiased", "paper", "em", "em4", "normsub", "robust")

    def _setup(self) -> None:
        frac = float(self.params["key_fraction"])
        self.eps1 = frac * self.epsilon
        self.eps2 = self.epsilon - self.eps1
        self.p1 = rr_keep(self.eps1)
        self.p2 = rr_keep(self.eps2)
        self._p = lpp_transition(self.p1, self.p2)

    def client_transition(self) -> FloatArray:
        return self._p

    def randomized_output(self) -> SymbolOutput:
        return SymbolOutput((self.symbol_field,), 3)

    def _perturb_states(self, states: IntArray, rng: np.random.Generator) -> IntArray:
        return lpp_perturb(states, self.p1, self.p2, rng)

    def _analysed_epsilon(self) -> float:
        return max(self.eps2, self.eps1 + math.log(2.0 / (1.0 + math.exp(-self.eps2))))

    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        if estimator == "paper":
            self._no_options(estimator, options)
            return self._paper(stats, *self._linear(stats))
        if estimator == "em4":
            counts, _, projected = self._linear(stats)
            return self._em4(stats, counts, projected, options)
        return super()._estimate(stats, estimator, options)

    def _paper(
        self, stats: Stats, counts: FloatArray, theta_hat: FloatArray, projected: FloatArray
    ) -> Estimate:
        """Sun et al. 2019, Alg. 2: n1*, n2* calibrated among the key-bit-1 reports, clipped into [0, N]
        (the composed channel's counts de-randomized first)."""
        client = self.derandomized(counts)
        m1, m_1 = client[:, POS], client[:, NEG]
        big_n = m1 + m_1
        p2 = self.p2
        n1 = np.clip(((p2 - 1) * big_n + m1) / (2 * p2 - 1), 0, big_n)
        n2 = np.clip(((p2 - 1) * big_n + m_1) / (2 * p2 - 1), 0, big_n)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(big_n > 0, (n1 - n2) / big_n, np.nan)
        est = self._result("paper", stats, theta_hat, theta_hat, projected, clipped=False, mean=mean)
        # biased by design toward 0, by a factor that depends on the unknown f: no interval
        # of this point estimate would cover (the unbiased estimator's does)
        nan = np.full(self.d, np.nan)
        return replace(
            est,
            mean_stderr=nan,
            mean_bounds=(nan, nan),
            diagnostics={**est.diagnostics, "mean_bias": "shrunk toward 0 by f p1/(f p1 + (1-f)(1-p1))"},
        )

    def _em4(
        self, stats: Stats, counts: FloatArray, projected: FloatArray, options: dict[str, Any]
    ) -> Estimate:
        if options.pop("warm_start", None) is not None:
            raise ValueError(
                "em4 is not identifiable in the mean and is never warm-started "
                "(docs/mechanisms.md, *PrivKV EM3 and EM4*)"
            )
        opts = parse_em_options(options, (self.d, 4))
        model = em4_transition(self.p1, self.p2)
        if self.mixing is not None:
            model = self.mixing @ model
        res = em_counts(model, counts, tol=opts.tol, max_iter=opts.max_iter)
        theta4 = np.where(res.empty[:, None], np.nan, res.theta)
        # map <1,+1>, <1,-1>, <0,*> onto the state-code layout for f and m
        states = np.stack([theta4[:, 1], theta4[:, 2] + theta4[:, 3], theta4[:, 0]], axis=1)
        est = self._result(
            "em4",
            stats,
            states,
            states,
            projected,
            diagnostics={
                "em_iterations": int(res.iterations.max(initial=0)),
                "em_unconverged_keys": int(np.sum(~res.converged & ~res.empty)),
                "mean_identified": False,
            },
        )
        # the published four-state model does not identify the mean: no honest standard error
        nan = np.full(self.d, np.nan)
        return replace(est, mean_stderr=nan, mean_bounds=(nan, nan))
