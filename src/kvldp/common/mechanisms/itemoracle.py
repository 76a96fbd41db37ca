"""Frequency oracles over the key domain: GRR, OUE, SUE, OLH, HR and FHR (docs/mechanisms.md,
*Frequency oracles*).

A frequency oracle reports one *item*. Key-value devices may hold zero or several keys,
so the item comes from PCKV's Padding-and-Sampling (docs/mechanisms.md, *Padding and
sampling*) with a single dummy item
``none`` (index d): a user with S keys draws each of its keys with probability
1 / max(|S|, ell) and ``none`` with the rest. The estimate of a key's sampled share
is multiplied by ell, which is unbiased for users holding at most ell keys (users with
more keys are under-counted by ell / |S|, as in PCKV). ``ell = 0`` is the classic
oracle: every user must hold exactly one key, and the domain has no ``none``.

One dummy symbol, rather than PCKV's ell distinct dummies, keeps GRR's alphabet at
d + 1 for every ell; privacy is unchanged because a mixture of outputs of an eps-LDP
oracle is eps-LDP with respect to the user's whole set.

The oracles estimate frequencies only (``collects_values = False``): every mean is NaN.
"""

from __future__ import annotations

import abc
import itertools
from typing import Any, ClassVar

import numpy as np

from kvldp.common.channel.output_model import (
    AuditTooLarge,
    DenseModel,
    OutputModel,
    PatternLayout,
    discrete_users,
)
from kvldp.common.data.kvdata import InvalidUserData, KVData
from kvldp.common.data.schema import ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.em import em_counts, parse_em_options
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.estimation.intervals import clipped_interval, interval_stderr
from kvldp.common.estimation.simplex import project_simplex
from kvldp.common.estimation.variance import stderr
from kvldp.common.mechanisms.base import IntArray, Mechanism
from kvldp.common.mechanisms.padding import sample_slots, slot_weights
from kvldp.common.primitives import FloatArray
from kvldp.common.spec.params import Param

ELL = Param(
    "ell",
    int,
    1,
    "padding length: each user samples one of max(|S|, ell) slots, empty slots report 'none'; "
    "0 = classic oracle, every user holds exactly one key",
    check=lambda v: 0 <= int(v) <= 1_000_000,
    check_doc="must be a non-negative integer",
)

#: largest number of enumerated outputs a reduced bit-vector audit may build
MAX_AUDIT_OUTPUTS = 1 << 16


def bernoulli_count_variance(n: float, holders: FloatArray, p: float, q: float, weight: float) -> FloatArray:
    """Var of (C_i - n q) / (p - q) when each user's indicator is Bernoulli(q + (p - q) w_u).

    Holders of item i have w_u = ``weight`` (1/ell), everyone else 0. Exact given the
    population; for ell = 1 it is n q(1-q)/(p-q)^2 + c_i (1-p-q)/(p-q).
    """
    pi_h = q + (p - q) * weight
    return ((n - holders) * q * (1 - q) + holders * pi_h * (1 - pi_h)) / (p - q) ** 2


class ItemOracle(Mechanism):
    """Base of the frequency oracles (see module docstring)."""

    collects_values: ClassVar[bool] = False
    params_spec: ClassVar[tuple[Param, ...]] = (ELL,)

    def _setup(self) -> None:
        self.ell = int(self.params["ell"])
        self.domain = self.d + (1 if self.ell > 0 else 0)
        self.scale = max(self.ell, 1)
        self._setup_oracle()

    @abc.abstractmethod
    def _setup_oracle(self) -> None: ...

    # --------------------------------------------------------------- client
    def sample_items(self, users: KVData, rng: np.random.Generator) -> IntArray:
        """Padding-and-Sampling: one item per user, ``d`` meaning none."""
        if self.ell == 0:
            self._require_single(users.sizes)
            return users.keys.copy()
        real, keys, _ = sample_slots(users, self.ell, rng)
        return np.where(real, keys, self.d).astype(np.int64)

    def _pair_weights(self, users: KVData) -> tuple[FloatArray, FloatArray]:
        """Pr[sampling pair i] per stored pair and Pr[none] per user (``ell = 0``: 1 and 0)."""
        if self.ell == 0:
            self._require_single(users.sizes)
            return np.ones(users.keys.shape[0]), np.zeros(users.n_users)
        return slot_weights(users, self.ell)

    def item_totals(self, users: KVData) -> FloatArray:
        """Expected number of users sampling each item, sum_u w_u: (domain,)."""
        per_pair, padding = self._pair_weights(users)
        totals = np.bincount(users.keys, weights=per_pair, minlength=self.domain).astype(np.float64)
        if self.ell:
            totals[self.d] = float(padding.sum())
        return np.asarray(totals, dtype=np.float64)

    def expected_stats(self, users: KVData) -> Stats:
        # only the accepted reports are folded (docs/plausibility.md); every item is kept alike
        alpha = self.acceptance()
        n = alpha * float(users.n_users)
        arrays = self.expected_arrays(alpha * self.item_totals(users), n)
        return Stats.expected(self, {**arrays, "n": np.array([n])})

    def acceptance(self) -> float:
        """The chance that the plausibility rule keeps a genuine report (1: no rule)."""
        return 1.0

    @abc.abstractmethod
    def expected_arrays(self, totals: FloatArray, n: float) -> dict[str, FloatArray]:
        """E[statistics] when ``totals[i]`` users (in expectation) sample item i."""

    def _require_single(self, sizes: IntArray) -> None:
        bad = np.flatnonzero(sizes != 1)
        if bad.size:
            u = int(bad[0])
            raise InvalidUserData(
                f"{self.name} with ell=0 needs exactly one key per user; user {u} holds {int(sizes[u])} "
                "(set ell >= 1 to pad and sample)"
            )

    def item_weights(self, users: KVData) -> FloatArray:
        """Exact sampling distribution of each user's item: (users, domain), for audits."""
        per_pair, padding = self._pair_weights(users)
        w = np.zeros((users.n_users, self.domain))
        w[np.repeat(np.arange(users.n_users), users.sizes), users.keys] = per_pair
        if self.ell:
            w[:, self.d] = padding
        return w

    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        return self._perturb_items(self.sample_items(users, rng), rng, public)

    @abc.abstractmethod
    def _perturb_items(
        self, items: IntArray, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        """The oracle's client on item indices in [0, domain); ``public`` draws the
        :attr:`public_fields`."""

    # --------------------------------------------------------------- estimation
    @property
    def estimator_names(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("unbiased", "em", "normsub") if self.supports_em() else ("unbiased", "normsub")

    def supports_em(self) -> bool:
        """EM needs the report to be one symbol of a finite alphabet."""
        return False

    @abc.abstractmethod
    def count_estimate(self, arrays: dict[str, IntArray]) -> FloatArray:
        """Unbiased estimate of how many users sampled each item: (domain,)."""

    @abc.abstractmethod
    def count_variance(self, n: float, holders: FloatArray) -> FloatArray:
        """Exact Var of ``count_estimate`` given n users of which ``holders`` hold the item."""

    def transition(self) -> FloatArray:
        """P[z | item] (Z, domain) for oracles with a finite report alphabet."""
        raise NotImplementedError(f"{self.name} reports are not symbols of a finite alphabet")

    def output_counts(self, arrays: dict[str, IntArray]) -> FloatArray:
        """Histogram of report symbols matching :meth:`transition` (EM input)."""
        raise NotImplementedError(f"{self.name} has no output histogram")

    def maximum_likelihood(
        self, counts: FloatArray, options: dict[str, Any]
    ) -> tuple[FloatArray, dict[str, Any]]:
        """The item distribution's MLE; generic count EM unless an oracle has a closed form."""
        opts = parse_em_options(options, (1, self.domain))
        res = em_counts(
            self.transition(), counts[None, :], theta0=opts.theta0, tol=opts.tol, max_iter=opts.max_iter
        )
        diag = {
            "em_iterations": int(res.iterations[0]),
            "em_converged": bool(res.converged[0]),
            "em_warm_start": opts.theta0 is not None,
        }
        return res.theta[0], diag

    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        """The point frequency of ``estimator`` with error bars on the unbiased basis
        (docs/mechanisms.md, *Frequency oracles*): the raw frequency's interval clipped into
        [0, 1]; the standard error the analytic one of the raw frequency, or for a projected
        or MLE point the one its clipped interval implies."""
        n = float(stats.arrays["n"][0])  # real-valued for expected statistics
        latent = None
        diag: dict[str, Any] = {"mean_supported": False}
        with np.errstate(divide="ignore", invalid="ignore"):
            raw_share = self.count_estimate(stats.arrays) / n
        if estimator == "em":
            share, extra = self.maximum_likelihood(self.output_counts(stats.arrays), options)
            diag.update(extra)
            latent = share[None, :]
        else:
            if options:
                raise TypeError(f"estimator {estimator} takes no options, got {sorted(options)}")
            share = project_simplex(raw_share) if estimator == "normsub" else raw_share
        freq = self.scale * share[: self.d]
        holders = np.clip(freq, 0.0, 1.0) * n
        with np.errstate(divide="ignore", invalid="ignore"):
            raw_se = self.scale * stderr(self.count_variance(n, np.nan_to_num(holders))) / n
        f_lo, f_hi = clipped_interval(self.scale * raw_share[: self.d], raw_se)
        if estimator == "unbiased":
            f_se = raw_se
        else:  # the point may leave the basis interval: widen it to hold the point
            f_lo, f_hi = np.fmin(f_lo, freq), np.fmax(f_hi, freq)
            around = clipped_interval(freq, raw_se) if estimator == "em" else (f_lo, f_hi)
            f_se = interval_stderr(*around)
        if n <= 0:
            freq, f_se, f_lo, f_hi = (np.full(self.d, np.nan) for _ in range(4))
        nan = np.full(self.d, np.nan)
        return Estimate(
            mechanism=self.name,
            estimator=estimator,
            frequency=freq,
            frequency_stderr=f_se,
            mean=nan,
            mean_stderr=nan.copy(),
            n_reports=stats.n_reports,
            latent=latent,
            diagnostics=diag,
            frequency_bounds=(f_lo, f_hi),
        )

    # --------------------------------------------------------------- privacy
    def audit_users(self, exhaustive: bool) -> tuple[KVData, tuple[str, ...]]:
        """Inputs of the audit.

        Exhaustive: every set over the d keys (exactly one key when ell = 0). Reduced: every
        set of at most max(ell, 1) keys inside a sub-domain of min(d, max(2, 2 ell)) keys.
        That suffices: a set with more than ell keys samples uniformly among them, so an
        ell-subset holding its most (least) likely items dominates it in the numerator
        (denominator); a worst pair therefore touches at most 2 ell keys, and by symmetry
        of the oracle in its items any such pair maps into the sub-domain.
        """
        m = self.d if exhaustive else min(self.d, max(2, 2 * self.ell))
        sets, labels = discrete_users(
            m,
            max_size=None if exhaustive else self.scale,
            signs=(1,),  # values never matter to a frequency oracle
            exact_size=1 if self.ell == 0 else None,
        )
        return KVData(self.d, sets.indptr, sets.keys, sets.values), labels

    def audit_model(self, exhaustive: bool) -> OutputModel:
        users, labels = self.audit_users(exhaustive)
        weights = self.item_weights(users)
        probs = self._mixture_output_probs(weights)
        return DenseModel(probs, labels, self._output_layout(probs.shape[1]))

    def _mixture_output_probs(self, weights: FloatArray) -> FloatArray:
        """Pr[z | user] for users given by item weights; dense oracles use their transition."""
        return np.asarray(weights @ self.transition().T, dtype=np.float64)

    def _output_layout(self, outputs: int) -> PatternLayout:
        """The audit model's columns: one symbol of the report's ``outputs`` values."""
        return PatternLayout(blocks=1, coords=1, size=outputs)


def enumerate_bit_outputs(weights: FloatArray, p_one: FloatArray) -> FloatArray:
    """Exact Pr[bit vector | user] for a mixture over items of independent-bit reports.

    ``p_one`` is (items, coords): Pr[bit c = 1 | item]. Coordinates where every item with
    positive weight has the same law cancel in every ratio and must be dropped by the
    caller; here all 2^coords outputs are enumerated.
    """
    coords = p_one.shape[1]
    if 2**coords > MAX_AUDIT_OUTPUTS:
        raise AuditTooLarge(f"exact audit would enumerate 2^{coords} outputs; reduce d or ell")
    outs = np.array(list(itertools.product((0, 1), repeat=coords)), dtype=np.float64)  # (Z, C)
    # Pr[z | item] = prod_c p^z (1-p)^(1-z)
    log_p = np.where(outs[:, None, :] == 1, p_one[None, :, :], 1.0 - p_one[None, :, :])
    comp = np.prod(log_p, axis=2)  # (Z, items)
    return np.asarray(weights @ comp.T, dtype=np.float64)
