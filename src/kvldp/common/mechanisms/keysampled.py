"""Mechanisms that sample one key uniformly and report one symbol about its state.

PrivKV, F2M, KVUE and KVOH (docs/mechanisms.md, *Key-sampled mechanisms*) share a
structure: the device draws
j uniformly from [0, d) independently of its data, looks at the *state* of key j —
x = 0 for <1,-1>, 1 for absent, 2 for <1,+1> (after Disc of the value, the state
code) — and reports one symbol z from a finite alphabet with probability
P[z | x]. The aggregator keeps ``counts[j, z]``.

Everything else follows from P and one left inverse A (A P = I):

* ``unbiased``: theta = A (counts[j] / M_j), f = theta_0 + theta_2 (raw, exactly
  unbiased), m from the states clipped into [0, 1] (the correction PCKV applies to KVUE);
* ``normsub``: theta projected onto the simplex, f and m from it (consistent);
* ``em``: the MLE by count EM on P, warm-startable (P has full column rank);
* ``eb``: empirical Bayes (:mod:`~kvldp.common.estimation.shrinkage`): the EM frequencies and means
  shrunk toward normal priors fitted across the keys, every key answered. It pays where
  the keys' spread is small against each key's noise (small epsilon, a narrow population
  of frequencies or means) and moves nothing where keys are precise;
* ``robust``: ``em`` where the key's number of reports is consistent with uniform key
  sampling; where it is significantly above the other keys' (fake devices that target
  the key), the excess is removed from the maximal-gain symbols and the frequency and
  mean are estimated in closed form from what remains (:mod:`~kvldp.common.estimation.robust`,
  docs/robust.md);
* batches: ``em`` and ``eb`` also run on many snapshots at once
  (:meth:`KeySampledMechanism.estimate_many`, the draws behind a predicted error): one
  EM call for every key of every snapshot, shared by both when asked for together, each
  snapshot's priors its own;
* standard errors: the exact covariance of the counts given the population —
  multinomial over the M_j reporters, minus the finite-population correction for
  sampling M_j of the n users without replacement — pushed through A (or through the
  asymptotically equivalent linear map of the MLE for ``em``).

Subclasses supply P, the literal client algorithm (so the client and P are two
independent descriptions that the tests check against each other), and A when the
paper's estimator is not P^-1.

Instantaneous randomization (docs/mechanisms.md, *Instantaneous randomization*) acts on
the symbol alone; the sampled key is public. KVUE, KVOH and ``kvue_multi`` stay in their
family at eps1. For the others (:class:`TransitionComposed`: PrivKV, F2M) the composed
channel is estimated on the composed transition M P, M the randomizer's matrix over the
symbols, with the left inverse A M^-1: every estimator above, its standard errors and
the audit follow from these two matrices unchanged.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from kvldp.common.channel.instantaneous import InstantaneousRandomizer, max_log_ratio_of, solve_contrast
from kvldp.common.channel.output_model import DenseModel, OutputModel, PatternLayout, discrete_users
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.clipped_normal import clipped_rmse
from kvldp.common.estimation.em import EMOptions, em_counts, parse_em_options
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.estimation.intervals import clipped_interval, fieller_interval, interval_stderr
from kvldp.common.estimation.robust import (
    FALSE_ALARM,
    Z_GATE,
    corrected_state_covariance,
    gain_order,
    remove_excess,
    report_excess,
)
from kvldp.common.estimation.shrinkage import Shrunk, prior_diagnostics, rms_mean, shrink, shrink_means
from kvldp.common.estimation.simplex import project_simplex
from kvldp.common.estimation.variance import quad, quad2, stderr
from kvldp.common.mechanisms.base import IntArray, Mechanism, UnknownEstimator
from kvldp.common.primitives import FloatArray, disc

#: state codes (docs/mechanisms.md, *Primitives*): s = k*v + 1
NEG, ABSENT, POS = 0, 1, 2
F_ROW = np.array([1.0, 0.0, 1.0])
#: normal draws of the raw states behind a projected estimate's standard error, and their seed
PROJECTION_DRAWS = 400
PROJECTION_SEED = 0x5E
#: theta_2 - theta_0, the numerator of a key's mean
D_ROW = np.array([-1.0, 0.0, 1.0])

#: the inference basis of :meth:`KeySampledMechanism._intervals`
_Basis = tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, NDArray[np.bool_], FloatArray]


def states_of(users: KVData, keys: IntArray, rng: np.random.Generator) -> IntArray:
    """State code of key ``keys[u]`` for each user u, with Disc applied to held values."""
    n = users.n_users
    held, values = users.lookup(np.arange(n, dtype=np.int64), keys)
    vstar = disc(values, rng)
    return np.where(held, np.where(vstar > 0, POS, NEG), ABSENT).astype(np.int64)


def population_states(users: KVData) -> FloatArray:
    """sum_u theta_u(j) per key j, (d, 3): how many users are in each state of key j in
    expectation, a holder's theta being ((1-v)/2, 0, (1+v)/2) (Disc's chances)."""
    holders, sums = users.key_totals()
    return np.stack([(holders - sums) / 2.0, users.n_users - holders, (holders + sums) / 2.0], axis=1)


def mean_from_states(theta: FloatArray) -> FloatArray:
    """m = (theta_2 - theta_0) / (theta_0 + theta_2) after clipping both into [0, 1]; NaN if 0."""
    lo = np.clip(theta[:, NEG], 0.0, 1.0)
    hi = np.clip(theta[:, POS], 0.0, 1.0)
    den = lo + hi
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, (hi - lo) / den, np.nan)


def mean_gradient(theta: FloatArray) -> FloatArray:
    """d m / d theta for m = (t2 - t0)/(t0 + t2), at theta clipped into [0, 1]."""
    lo = np.clip(theta[:, NEG], 0.0, 1.0)
    hi = np.clip(theta[:, POS], 0.0, 1.0)
    den2 = (lo + hi) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.stack([-2.0 * hi / den2, np.zeros_like(lo), 2.0 * lo / den2], axis=1)
    return np.where(den2[:, None] > 0, g, np.nan)


def sampled_count_covariance(p: FloatArray, theta: FloatArray, reports: FloatArray, n: int) -> FloatArray:
    """Covariance of one key's output counts given the population, at plug-in states ``theta``.

    ``p`` is P[z | x], shared (J, 3) or per key (G, J, 3). The M_j reporters of key j are
    drawn from the n users without replacement and each emits z ~ P theta_u. With holders
    sharing the value m (PCKV Theorem 4's assumption) the population covariance of theta_u
    is f(1-f)(h - e_1)(h - e_1)^T, h = ((1-m)/2, 0, (1+m)/2), so
    Cov = M[diag(pi) - pi pi^T] - M(M-1)/(n-1) f(1-f) w w^T with pi = P theta, w = P(h - e_1).
    """
    pg = np.broadcast_to(p, (theta.shape[0], *p.shape[-2:]))
    pi = np.einsum("gjk,gk->gj", pg, theta)
    f = np.clip(theta[:, NEG] + theta[:, POS], 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(f > 0, (theta[:, POS] - theta[:, NEG]) / f, 0.0)
    h = np.stack([(1 - m) / 2, -np.ones_like(m), (1 + m) / 2], axis=1)
    w = np.einsum("gjk,gk->gj", pg, h)
    eye = np.eye(pi.shape[1])
    multi = reports[:, None, None] * (pi[:, :, None] * eye[None] - pi[:, :, None] * pi[:, None, :])
    fpc = (reports * np.maximum(reports - 1, 0) / max(n - 1, 1) * f * (1 - f))[:, None, None]
    return np.asarray(multi - fpc * w[:, :, None] * w[:, None, :], dtype=np.float64)


class KeySampledMechanism(Mechanism):
    """Base of the j-uniform, one-symbol mechanisms (see module docstring)."""

    symbol_field: ClassVar[str]
    estimator_names: ClassVar[tuple[str, ...]] = ("unbiased", "em", "normsub", "eb", "robust")
    #: the estimators whose mean is NaN where it is not estimable (every one but ``eb``)
    not_estimable_nan: ClassVar[frozenset[str]] = frozenset(
        {"unbiased", "paper", "em", "em4", "normsub", "robust"}
    )

    # --------------------------------------------------------------- model
    @abc.abstractmethod
    def transition(self) -> FloatArray:
        """P[z | x]: (J outputs, 3 states); columns sum to one."""

    @abc.abstractmethod
    def _perturb_states(self, states: IntArray, rng: np.random.Generator) -> IntArray:
        """The paper's client on state codes (vectorised), returning output symbols."""

    def linear_inverse(self) -> FloatArray:
        """The closed-form estimator as a (3, J) matrix A with A P = I."""
        return np.asarray(np.linalg.inv(self.transition()), dtype=np.float64)

    @property
    def n_symbols(self) -> int:
        return int(self.transition().shape[0])

    @property
    def keys_per_report(self) -> int:
        """How many keys one report is about (uniformly sampled, independently of the data)."""
        return 1

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        return (Field("j", "uint", 0, self.d), Field(self.symbol_field, "uint", 0, self.n_symbols))

    def public_fields(self) -> tuple[str, ...]:
        """The sampled key is drawn independently of the data."""
        return ("j",)

    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        j = public.integers(0, self.d, size=users.n_users, dtype=np.int64)
        z = self._perturb_states(states_of(users, j, rng), rng)
        return {"j": j, self.symbol_field: z}

    # --------------------------------------------------------------- statistics
    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"counts": (self.d, self.n_symbols)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        n_sym = self.n_symbols
        codes = batch["j"].astype(np.int64) * n_sym + batch[self.symbol_field].astype(np.int64)
        arrays["counts"] += np.bincount(codes, minlength=self.d * n_sym).reshape(self.d, n_sym)

    def expected_stats(self, users: KVData) -> Stats:
        """E[counts[j]] = (1/d) P sum_u theta_u(j) (:func:`population_states`)."""
        counts = population_states(users) @ self.transition().T / self.d
        return Stats.expected(self, {"counts": counts, "n": np.array([float(users.n_users)])})

    # --------------------------------------------------------------- estimation
    def _linear_states(self, counts: FloatArray) -> FloatArray:
        """theta_hat = A (counts / M) per key; NaN rows for keys without reports."""
        m = counts.sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            pi = np.where(m > 0, counts / m, np.nan)
        return np.asarray(pi @ self.linear_inverse().T, dtype=np.float64)

    def _mean_of(self, theta: FloatArray, reports: FloatArray) -> FloatArray:
        """Mean from estimated states; subclasses apply their paper's correction."""
        return mean_from_states(theta)

    def count_covariance(self, theta: FloatArray, reports: FloatArray, n: int) -> FloatArray:
        """Exact covariance of counts[j] given the population (see :func:`sampled_count_covariance`)."""
        return sampled_count_covariance(self.transition(), theta, reports, n)

    def _efficient_map(self, theta: FloatArray) -> FloatArray:
        """Per-key linear map of the MLE's first-order expansion (d, 3, J).

        theta_MLE ~ theta + A*(pi_hat - pi) with A* = L (B^T D^-1 B)^-1 B^T D^-1, where
        B = dpi/d(theta_0, theta_2) and D = diag(pi). For a square P this is P^-1.
        """
        p = self.transition()
        b = p[:, [NEG, POS]] - p[:, [ABSENT]]
        pi = np.maximum(theta @ p.T, 1e-300)
        bw = b[None, :, :] / pi[:, :, None]  # D^-1 B
        fisher = np.einsum("jk,gjl->gkl", b, bw)
        free = np.linalg.solve(fisher, np.transpose(bw, (0, 2, 1)))  # (d, 2, J)
        a = np.empty((theta.shape[0], 3, p.shape[0]))
        a[:, NEG] = free[:, 0]
        a[:, POS] = free[:, 1]
        a[:, ABSENT] = -(free[:, 0] + free[:, 1])
        return a

    def _state_covariance(
        self, theta_plugin: FloatArray, reports: FloatArray, n: int, efficient: bool
    ) -> FloatArray:
        """Covariance (G, 3, 3) of the estimated states of G keys: the exact count covariance
        at the plug-in states pushed through A (or the MLE's linear map when ``efficient``)."""
        safe = np.where(np.isfinite(theta_plugin), theta_plugin, 1.0 / 3.0)
        cov_c = self.count_covariance(safe, reports, n)
        if efficient:
            a = self._efficient_map(safe)
        else:
            a = np.broadcast_to(self.linear_inverse(), (safe.shape[0], 3, self.n_symbols))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(
                np.einsum("gij,gjk,glk->gil", a, cov_c, a) / (reports**2)[:, None, None], dtype=np.float64
            )

    def _standard_errors(
        self, theta_plugin: FloatArray, theta_mean: FloatArray, reports: FloatArray, n: int, efficient: bool
    ) -> tuple[FloatArray, FloatArray]:
        cov_t = self._state_covariance(theta_plugin, reports, n, efficient)
        var_f = quad(F_ROW, cov_t)
        grad = mean_gradient(theta_mean)
        var_m = np.einsum("gi,gij,gj->g", grad, cov_t, grad)
        none = reports <= 0
        return (np.where(none, np.nan, stderr(var_f)), np.where(none, np.nan, stderr(var_m)))

    def _intervals(self, counts: FloatArray, plugin: FloatArray, n: int) -> _Basis:
        """The inference basis of every estimator (docs/mechanisms.md, *Calibration of
        standard errors*): the closed-form states and their covariance at the plug-in states.
        Returns (the raw frequency's stderr, its clipped 95% bounds, the mean's Fieller
        bounds, whether the mean is estimable, and the states' covariance)."""
        reports = counts.sum(axis=1)
        raw = self._linear_states(counts)
        cov = self._state_covariance(plugin, reports, n, efficient=False)
        freq = raw[:, NEG] + raw[:, POS]
        se = np.where(reports > 0, stderr(quad(F_ROW, cov)), np.nan)
        f_lo, f_hi = clipped_interval(freq, se)
        m_lo, m_hi, estimable = fieller_interval(
            raw[:, POS] - raw[:, NEG], freq, quad(D_ROW, cov), quad(F_ROW, cov), quad2(D_ROW, F_ROW, cov)
        )
        return se, f_lo, f_hi, m_lo, m_hi, estimable, cov

    def first_order_mean(self, stats: Stats) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(mean, D / sd(D), sd(mean)) per key of the closed-form estimate at ``stats``.

        The mean is ``unbiased``'s, whether or not it is estimable; D is the raw frequency
        (the mean's denominator), whose significance decides estimability; sd(mean) is the
        delta method's at the plug-in states, unclipped (the interval-implied standard error
        is smaller where [-1, 1] binds, which a clipped-normal prediction counts already).
        """
        counts, theta_hat, projected = self._linear(stats)
        reports = counts.sum(axis=1)
        cov = self._state_covariance(projected, reports, stats.n_reports, efficient=False)
        freq = theta_hat[:, NEG] + theta_hat[:, POS]
        grad = mean_gradient(theta_hat)
        var_m = np.einsum("gi,gij,gj->g", grad, cov, grad)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.clip((theta_hat[:, POS] - theta_hat[:, NEG]) / freq, -1.0, 1.0)
            z = freq / stderr(quad(F_ROW, cov))
        point = self._mean_of(theta_hat, reports)
        mean = np.where(np.isfinite(point), point, ratio)
        none = reports <= 0
        return (
            np.where(none, np.nan, mean),
            np.where(none, np.nan, z),
            np.where(none, np.nan, stderr(var_m)),
        )

    def _projected_errors(
        self, theta: FloatArray, cov: FloatArray, reports: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """RMSE of the simplex-projected frequency and mean at states ``theta``: the raw
        states drawn PROJECTION_DRAWS times from their normal approximation N(theta, cov),
        each draw projected as ``normsub`` projects (docs/mechanisms.md, *Calibration of
        standard errors*). Deterministic: the draws' seed is fixed."""
        safe = np.where(np.isfinite(theta), theta, 1.0 / 3.0)
        vals, vecs = np.linalg.eigh(np.nan_to_num(cov))
        root = vecs * np.sqrt(np.maximum(vals, 0.0))[:, None, :]  # (d, 3, 3)
        z = np.random.default_rng(PROJECTION_SEED).standard_normal((PROJECTION_DRAWS, 3))
        draws = safe[None] + np.einsum("gij,bj->bgi", root, z)  # (B, d, 3)
        projected = project_simplex(draws.reshape(-1, 3)).reshape(draws.shape)
        f_star = projected[..., NEG] + projected[..., POS]
        m_star = mean_from_states(projected.reshape(-1, 3)).reshape(f_star.shape)
        f0 = safe[:, NEG] + safe[:, POS]
        m0 = mean_from_states(safe)
        with np.errstate(invalid="ignore", divide="ignore"):
            se_f = np.sqrt(np.mean((f_star - f0[None]) ** 2, axis=0))
            sq = (m_star - m0[None]) ** 2
            ok = np.isfinite(sq)
            se_m = np.sqrt(np.where(ok, sq, 0.0).sum(axis=0) / ok.sum(axis=0))
        none = reports <= 0
        return np.where(none, np.nan, se_f), np.where(none, np.nan, se_m)

    def _result(
        self,
        estimator: str,
        stats: Stats,
        theta_f: FloatArray,
        theta_m: FloatArray,
        plugin: FloatArray,
        clipped: bool = True,
        efficient: bool = False,
        projection: bool = False,
        mean: FloatArray | None = None,
        diagnostics: dict[str, Any] | None = None,
        latent: FloatArray | None = None,
    ) -> Estimate:
        """An estimate whose frequency is theta_f's and mean theta_m's (or ``mean``), with
        intervals on the closed-form basis. ``clipped`` says the point frequency is a
        clipped or projected one: its standard error is then the one its clipped interval
        implies, else the analytic one of the raw frequency; ``efficient`` (the MLE) takes
        the clipped interval around the point with the MLE's first-order standard error."""
        counts = stats.arrays["counts"].astype(np.float64)
        reports = counts.sum(axis=1)
        freq, m, basis = self._points(counts, theta_f, theta_m, plugin, stats.n_reports, mean)
        raw_se, f_lo, f_hi, m_lo, m_hi, estimable, cov_raw = basis
        diag = {
            "keys_without_reports": int(np.sum(reports == 0)),
            "undefined_means": int(np.sum(np.isnan(m))),
            "not_estimable_means": int(np.sum((reports > 0) & ~estimable)),
        }
        diag.update(diagnostics or {})
        f_se = interval_stderr(f_lo, f_hi) if clipped else raw_se
        m_se = interval_stderr(m_lo, m_hi)
        if efficient:
            cov = self._state_covariance(plugin, reports, stats.n_reports, efficient=True)
            f_se = interval_stderr(*clipped_interval(freq, stderr(quad(F_ROW, cov))))
            grad = mean_gradient(theta_m)
            m_eff = stderr(np.einsum("gi,gij,gj->g", grad, cov, grad))
            m_se = np.fmin(m_se, interval_stderr(*clipped_interval(m, m_eff, -1.0, 1.0)))
        if projection:
            f_se, m_se = self._projected_errors(plugin, cov_raw, reports)
        return Estimate(
            mechanism=self.name,
            estimator=estimator,
            frequency=freq,
            frequency_stderr=f_se,
            mean=m,
            mean_stderr=np.where(np.isnan(m), np.nan, m_se),
            n_reports=stats.n_reports,
            latent=latent,
            diagnostics=diag,
            frequency_bounds=(f_lo, f_hi),
            mean_bounds=(m_lo, m_hi),
        )

    def _points(
        self,
        counts: FloatArray,
        theta_f: FloatArray,
        theta_m: FloatArray,
        plugin: FloatArray,
        n: int,
        mean: FloatArray | None = None,
    ) -> tuple[FloatArray, FloatArray, _Basis]:
        """The frequency of states ``theta_f`` and the mean of ``theta_m`` (or ``mean``) of G
        keys, the mean answered where it is estimable (else NaN), and the inference basis of
        :meth:`_intervals` it was decided on."""
        reports = counts.sum(axis=1)
        basis = self._intervals(counts, plugin, n)
        estimable = basis[5]
        freq = np.where(reports > 0, theta_f[:, NEG] + theta_f[:, POS], np.nan)
        point_m = self._mean_of(theta_m, reports) if mean is None else mean
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.clip((theta_m[:, POS] - theta_m[:, NEG]) / (theta_m[:, NEG] + theta_m[:, POS]), -1, 1)
        return freq, np.where(estimable, np.where(np.isfinite(point_m), point_m, ratio), np.nan), basis

    def _linear(self, stats: Stats) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The counts as floats, the closed-form states A (counts[j] / M_j) and those states
        projected onto the simplex: what the estimators start from."""
        counts = stats.arrays["counts"].astype(np.float64)
        theta_hat = self._linear_states(counts)
        return counts, theta_hat, project_simplex(theta_hat)

    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        counts, theta_hat, projected = self._linear(stats)
        if estimator == "unbiased":
            self._no_options(estimator, options)
            return self._result(estimator, stats, theta_hat, theta_hat, projected, clipped=False)
        if estimator == "normsub":
            self._no_options(estimator, options)
            return self._result(estimator, stats, projected, projected, projected, projection=True)
        if estimator == "em":
            return self._em_estimate(stats, counts, options)
        if estimator == "eb":
            return self._eb_estimate(stats, counts, theta_hat, options)
        if estimator == "robust":
            return self._robust_estimate(stats, counts, options)
        raise AssertionError(f"{self.name}: estimator {estimator} declared but not implemented")

    def _no_options(self, estimator: str, options: dict[str, Any]) -> None:
        if options:
            raise TypeError(f"estimator {estimator} takes no options, got {sorted(options)}")

    def _em_estimate(self, stats: Stats, counts: FloatArray, options: dict[str, Any]) -> Estimate:
        theta, diag = self._em_states(counts, parse_em_options(options, (self.d, 3)))
        return self._result(
            "em",
            stats,
            theta,
            theta,
            theta,
            efficient=True,
            mean=mean_from_states(theta),
            diagnostics=diag,
            latent=theta,
        )

    def _em_states(self, counts: FloatArray, opts: EMOptions) -> tuple[FloatArray, dict[str, Any]]:
        """EM's states of G keys from their counts (G, J) in one solver call (NaN rows for
        keys without reports), and its diagnostics."""
        res = em_counts(self.transition(), counts, theta0=opts.theta0, tol=opts.tol, max_iter=opts.max_iter)
        diag = {
            "em_iterations": int(res.iterations.max(initial=0)),
            "em_unconverged_keys": int(np.sum(~res.converged & ~res.empty)),
            "em_warm_start": opts.theta0 is not None,
        }
        return np.where(res.empty[:, None], np.nan, res.theta), diag

    def _robust_estimate(self, stats: Stats, counts: FloatArray, options: dict[str, Any]) -> Estimate:
        """``robust``: ``em`` on every key whose report count passes the excess test of
        :func:`~kvldp.common.estimation.robust.report_excess`; on a flagged key, the excess removed
        from the maximal-gain symbols (:func:`~kvldp.common.estimation.robust.remove_excess`) and the
        closed form of what remains: frequency clipped into [0, 1], mean where Fieller's
        interval on the corrected states is bounded, both with the covariance of
        :func:`~kvldp.common.estimation.robust.corrected_state_covariance` (docs/robust.md)."""
        em = self._em_estimate(stats, counts, options)
        reports = counts.sum(axis=1)
        test = report_excess(reports, self.keys_per_report / self.d)
        diag = dict(em.diagnostics)
        diag.update(
            robust_flagged_keys=int(test.flagged.sum()),
            robust_removed_reports=float(test.excess.sum()),
            robust_false_alarm=FALSE_ALARM,
            robust_gate_z=Z_GATE,
        )
        if not test.flagged.any():
            return replace(em, estimator="robust", diagnostics=diag)
        inverse = self.linear_inverse()
        order = gain_order(inverse, POS, NEG)
        theta = self._linear_states(remove_excess(counts, test.excess, order))
        cov = corrected_state_covariance(
            self.transition(), inverse, project_simplex(theta), int(order[0]), test
        )
        raw = theta[:, NEG] + theta[:, POS]
        se = stderr(quad(F_ROW, cov))
        f_lo, f_hi = clipped_interval(raw, se)
        m_lo, m_hi, bounded = fieller_interval(
            theta[:, POS] - theta[:, NEG], raw, quad(D_ROW, cov), quad(F_ROW, cov), quad2(D_ROW, F_ROW, cov)
        )
        flag = test.flagged
        freq = np.where(flag, np.clip(raw, 0.0, 1.0), em.frequency)
        mean = np.where(flag, np.where(bounded, self._mean_of(theta, reports), np.nan), em.mean)
        em_f_lo, em_f_hi = em.frequency_interval
        em_m_lo, em_m_hi = em.mean_interval
        diag.update(
            undefined_means=int(np.sum(np.isnan(mean))),
            not_estimable_means=int(np.sum(np.isnan(mean) & (reports > 0))),
        )
        return replace(
            em,
            estimator="robust",
            frequency=freq,
            frequency_stderr=np.where(flag, clipped_rmse(freq, se, 0.0, 1.0), em.frequency_stderr),
            mean=mean,
            mean_stderr=np.where(
                flag, np.where(bounded, interval_stderr(m_lo, m_hi), np.nan), em.mean_stderr
            ),
            diagnostics=diag,
            frequency_bounds=(np.where(flag, f_lo, em_f_lo), np.where(flag, f_hi, em_f_hi)),
            mean_bounds=(
                np.where(flag & bounded, m_lo, np.where(flag, np.nan, em_m_lo)),
                np.where(flag & bounded, m_hi, np.where(flag, np.nan, em_m_hi)),
            ),
        )

    def _variances_at(
        self, f: FloatArray, m: FloatArray, reports: FloatArray, n: int
    ) -> tuple[FloatArray, FloatArray]:
        """(Var f^, Var m^) of the MLE per key (of any batch shape) if its states were
        frequency f and mean m."""
        f = np.clip(f, 0.0, 1.0)
        m = np.clip(m, -1.0, 1.0)
        theta = np.stack([f * (1 - m) / 2, 1 - f, f * (1 + m) / 2], axis=-1).reshape(-1, 3)
        se_f, se_m = self._standard_errors(theta, theta, np.ravel(reports), n, efficient=True)
        return (se_f**2).reshape(f.shape), (se_m**2).reshape(f.shape)

    def _eb_estimate(
        self, stats: Stats, counts: FloatArray, theta_hat: FloatArray, options: dict[str, Any]
    ) -> Estimate:
        """``eb``: the EM frequencies and means shrunk toward fitted priors (:meth:`_shrunk`)."""
        em = self._em_estimate(stats, counts, options)
        f, m = self._shrunk(counts, theta_hat, em.frequency, em.mean, stats.n_reports)
        diag = dict(em.diagnostics)
        diag.update(undefined_means=0, not_estimable_means=0, **prior_diagnostics(f, m))
        # no per-key standard error: a shrunk estimate's error depends on how far the key's
        # truth lies from the prior, which its data cannot tell from noise; the intervals
        # are the closed-form basis's (docs/mechanisms.md, *Calibration of standard errors*)
        nan = np.full(self.d, np.nan)
        return Estimate(
            mechanism=self.name,
            estimator="eb",
            frequency=f.value,
            frequency_stderr=nan,
            mean=m.value,
            mean_stderr=nan.copy(),
            n_reports=stats.n_reports,
            latent=em.latent,
            diagnostics=diag,
            frequency_bounds=em.frequency_interval,
            mean_bounds=em.mean_interval,
        )

    def _shrunk(
        self, counts: FloatArray, theta_hat: FloatArray, em_freq: FloatArray, em_mean: FloatArray, n: int
    ) -> tuple[Shrunk, Shrunk]:
        """``eb``'s frequencies and means of one snapshot (counts (d, J)) or of each of a batch
        (..., d, J), from its closed-form states and EM's answers.

        The frequencies are EM's rather than the unbiased ones (which PCKV's ``eb``
        shrinks): Sun-type populations spread f over all of [0, 1], and near 0 and 1 the
        MLE, kept inside the range, is the closer estimate (on Sun's uniform data at
        epsilon = 0.8, MSE(f) 0.00239 against 0.00246 from the unbiased ones).

        The frequencies' weights come from variances at stable values (the raw estimate
        clipped into [0, 1], the keys' RMS mean), not at each key's noisy estimate; the
        means are shrunk by :func:`~kvldp.common.estimation.shrinkage.shrink_means`, as PCKV's are, so
        a rare key is pulled toward keys as rare as it where means move with frequency.
        """
        reports = counts.sum(axis=-1)
        raw = theta_hat[..., NEG] + theta_hat[..., POS]
        m_rms = np.broadcast_to(rms_mean(em_mean), em_mean.shape)
        var_raw, _ = self._variances_at(np.nan_to_num(raw, nan=0.0), m_rms, reports, n)
        f = shrink(np.where(np.isnan(raw), np.nan, em_freq), var_raw, 0.0, 1.0)
        m = shrink_means(
            em_mean,
            em_freq,
            f,
            1.0 / np.maximum(reports, 1.0),
            lambda fr, mu: self._variances_at(fr, mu, reports, n),
        )
        return f, m

    def estimate_many(
        self, n: float, arrays: Mapping[str, FloatArray], estimators: Sequence[str]
    ) -> dict[str, tuple[FloatArray, FloatArray]]:
        """Frequencies and means (R, d) of each of ``estimators`` (``em``, ``eb``) on R
        snapshots of n reports each, their ``counts`` stacked along a leading axis in
        ``arrays`` (R, d, J): what :meth:`estimate` answers on each, without standard
        errors, in one pass over all of them (one EM call for every key of every snapshot,
        which serves both estimators; priors fitted per snapshot)."""
        for estimator in estimators:
            if estimator not in ("em", "eb") or estimator not in self.estimator_names:
                raise UnknownEstimator(f"{self.name}: estimate_many runs em and eb, not {estimator!r}")
        counts = np.asarray(arrays["counts"], dtype=np.float64)
        shape = counts.shape[:-1]
        flat = counts.reshape(-1, counts.shape[-1])
        reports = round(n)
        theta, _ = self._em_states(flat, parse_em_options({}, (flat.shape[0], 3)))
        freq, mean, _ = self._points(flat, theta, theta, theta, reports, mean_from_states(theta))
        out = {"em": (freq.reshape(shape), mean.reshape(shape))}
        if "eb" in estimators:
            theta_hat = self._linear_states(flat).reshape(*shape, 3)
            f, m = self._shrunk(counts, theta_hat, *out["em"], reports)
            out["eb"] = f.value, m.value
        return {e: out[e] for e in estimators}

    # --------------------------------------------------------------- privacy
    def audit_model(self, exhaustive: bool) -> OutputModel:
        p = self.transition()
        n_sym = p.shape[0]
        out = self.randomized_output()
        if exhaustive:
            users, labels = discrete_users(self.d)
            n = users.n_users
            probs = np.zeros((n, self.d * n_sym))
            for j in range(self.d):
                held, values = users.lookup(np.arange(n, dtype=np.int64), np.full(n, j, dtype=np.int64))
                state = np.where(held, np.where(values > 0, POS, NEG), ABSENT)
                probs[:, j * n_sym : (j + 1) * n_sym] = p[:, state].T / self.d
            return DenseModel(probs, labels, PatternLayout(self.d, out.coords, out.size))
        # Pr[(j, z) | S] = P[z | state of key j in S] / d: a pair of users differs, at any
        # output, only through the states of one key, so key 0's three states suffice;
        # outputs about other keys (absent for all three) are merged into one symbol.
        probs = np.zeros((3, n_sym + 1))
        probs[:, :n_sym] = p[:, [ABSENT, POS, NEG]].T / self.d
        probs[:, n_sym] = (self.d - 1) / self.d
        return DenseModel(probs, ("{}", "{0:+1}", "{0:-1}"), PatternLayout(1, out.coords, out.size, tail=1))


class TransitionComposed(KeySampledMechanism):
    """A key-sampled mechanism whose composed channel leaves its family (PrivKV, F2M): it is
    estimated on the composed transition M P and the left inverse A M^-1, M the
    randomizer's matrix over the symbols (the module docstring). Subclasses supply the
    client's P as :meth:`client_transition` and, where the paper's estimator is not P^-1,
    its A as :meth:`client_inverse`."""

    #: the instantaneous randomizer's matrix over the symbols (None: the client's own reports)
    mixing: FloatArray | None = None

    @abc.abstractmethod
    def client_transition(self) -> FloatArray:
        """The client's P[z | x]: (J outputs, 3 states); columns sum to one."""

    def client_inverse(self) -> FloatArray:
        """The client's closed-form estimator A (A P = I); P^-1 by default."""
        return np.asarray(np.linalg.inv(self.client_transition()), dtype=np.float64)

    def transition(self) -> FloatArray:
        p = self.client_transition()
        return p if self.mixing is None else np.asarray(self.mixing @ p, dtype=np.float64)

    def linear_inverse(self) -> FloatArray:
        a = self.client_inverse()
        return a if self.mixing is None else np.asarray(a @ np.linalg.inv(self.mixing), dtype=np.float64)

    def derandomized(self, counts: FloatArray) -> FloatArray:
        """Counts of the client's symbols estimated without bias from counts (..., J) of the
        reports received: M^-1 applied per key (the counts themselves without mixing)."""
        if self.mixing is None:
            return counts
        return np.asarray(counts @ np.linalg.inv(self.mixing).T, dtype=np.float64)

    def _composed_level(self, contrast: float) -> float:
        """The exact level of the composed channel: two devices differ at any output only
        through the state of its key, so it is the largest log ratio within the rows of
        M P (docs/mechanisms.md, *Key-sampled mechanisms*, audit)."""
        return max_log_ratio_of(self.randomized_output().matrix(contrast) @ self.client_transition())

    def _per_report_level(self) -> float:
        return self._composed_level(1.0)

    def _instantaneous_contrast(self, epsilon_per_report: float) -> float:
        return solve_contrast(self._composed_level, epsilon_per_report)

    def _composed_channel(self, randomizer: InstantaneousRandomizer) -> TransitionComposed:
        channel = type(self)(self.d, self.epsilon, **self.params)
        channel.mixing = randomizer.matrix()
        return channel
