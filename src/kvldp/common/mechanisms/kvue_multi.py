"""KVUE over t sampled keys: GRR over the joint state of t distinct keys per device.

What it is. Each device draws t distinct key indices J = (j_0 < ... < j_{t-1}) uniformly
from the C(d, t) subsets, independently of its data, reads the state x_i in {0, 1, 2} of
each (0 = <1,-1>, 1 = absent, 2 = <1,+1> after Disc of the value, the state code of
docs/mechanisms.md, *Primitives*), packs them into one symbol x = sum_i x_i 3^i of the 3^t joint states, and
reports that symbol by generalized randomized response over the 3^t symbols with the
whole budget: y = x with probability p = e^eps / (e^eps + 3^t - 1), each other symbol
with q = 1 / (e^eps + 3^t - 1). With t = 1 this is KVUE. Reference: docs/mechanisms.md,
*KVUE over t sampled keys*.

Why. A one-key mechanism gives each key about n/d reports, so even without noise its
frequency error has the sampling floor d f(1-f)/n. Reporting t keys gives each key n t/d
reports, at the price of a GRR over 3^t rather than 3 symbols. Per key the signal is
p - q = (e^eps - 1)/(e^eps + 3^t - 1), so MSE(f) ~ (d/(n t)) r(1-r)/(p - q)^2: the t
reports win once e^eps is large against 3^t. On Sun et al.'s Fig. 1 (d = 100, n = 10^5,
f ~ U(0, 1)) the predicted MSE(f) ratio against KVUE is 0.90 (eps = 3, t = 2), 0.66
(eps = 4, t = 2) and 0.50 (eps = 5, t = 3); for eps <= 2 every t > 1 loses (1.46 at
eps = 2, t = 2).

Choosing t. ``t = 0`` (the default) picks the t in [1, min(d, 10)] that minimises the
variance factor of one key's frequency, V(t) = E[r(1-r)] / (t (p - q)^2) with f ~ U(0, 1)
(r = 2 q' + (p - q) f is the chance that a report about the key says "present",
q' = 3^(t-1) q). d and n scale every t alike (MSE(f) = (d/n) V(t) - f(1-f)/n), so the
choice depends on eps alone: t = 1 below eps ~ 2.9, t = 2 up to ~ 4.6, t = 3 up to ~ 6.1.

Estimator. The marginal of position i depends on x_i only:
P(y_i = s | x) = (p - q)[x_i = s] + 3^(t-1) q, a symmetric 3 x 3 transition P'. The
aggregator keeps counts[j, s], the number of reports whose digit for key j is s, summed
over the t positions. A device reports on key j at most once, and the devices that
report on j are a uniform random subset of the n devices, so counts[j] is exactly
KVUE's statistic with P' in place of GRR over 3 states: ``unbiased`` (theta = P'^-1 counts/M_j,
mean from the states clipped into [0, 1]), ``normsub`` and ``em`` (count EM on P')
and their standard errors (multinomial minus the finite-population term) carry
over from :mod:`kvldp.common.mechanisms.keysampled` unchanged.

Correlation. The t digits of one report are not independent (a kept symbol is right at
every position at once), so the estimates of two keys sampled together are correlated.
:meth:`KVUEMulti.frequency_covariance` gives Cov(f_j, f_k): with M_jk devices reporting
on both keys,

    Cov = M_jk / (M_j M_k) c_jk + (f_jk - f_j f_k) (n M_jk - M_j M_k) / ((n - 1) M_j M_k),
    c_jk = [4 q'/3 - 4 q'^2 - 2 q' (p - q)(f_j + f_k) + (p - q)(1 - p + q) f_jk] / (p - q)^2,

where f_jk is the share of devices holding both keys. Per-key variances do not involve
it; sums over keys (e.g. keys per device) do.

Privacy. The key subset is drawn independently of the data, and given it the report is
GRR over 3^t symbols, so Pr[(J, y) | S] / C(d, t) is p or q for every device S and
output: the largest ratio over any two devices is p / q = e^eps, attained by two devices
that differ at one key. eps-LDP, tight; the exact audit enumerates the joint model.
"""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np

from kvldp.common.channel.instantaneous import SymbolOutput
from kvldp.common.channel.output_model import (
    DenseModel,
    OutputModel,
    PatternLayout,
    SymbolLayout,
    discrete_users,
)
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.keysampled import ABSENT, NEG, POS, KeySampledMechanism, states_of
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, grr_probs
from kvldp.common.spec.params import InvalidParameter, Param, ParamValue

#: the largest t (3^10 = 59,049 joint symbols)
T_MAX = 10

T_PARAM = Param(
    "t",
    int,
    0,
    "keys sampled per device; 0 picks the t that minimises the predicted frequency variance at this eps",
    check=lambda v: isinstance(v, int) and 0 <= v <= T_MAX,
    check_doc=f"0 (auto) or 1..{T_MAX}",
)


def joint_grr(epsilon: float, t: int) -> tuple[float, float]:
    """(p, q) of GRR over the 3^t joint states."""
    return grr_probs(epsilon, 3**t)


def frequency_variance_factor(epsilon: float, t: int) -> float:
    """V(t) = E[r(1-r)] / (t (p - q)^2) for f ~ U(0, 1): MSE(f) = (d/n) V(t) - f(1-f)/n."""
    p, q = joint_grr(epsilon, t)
    delta = p - q
    a = 2.0 * 3 ** (t - 1) * q  # r = a + delta f
    mean_r = a + delta / 2.0
    mean_r2 = a * a + a * delta + delta * delta / 3.0
    return float((mean_r - mean_r2) / (t * delta * delta))


def auto_t(epsilon: float, d: int) -> int:
    """The t in [1, min(d, T_MAX)] with the smallest :func:`frequency_variance_factor`."""
    return min(range(1, min(d, T_MAX) + 1), key=lambda t: frequency_variance_factor(epsilon, t))


def sample_key_sets(n: int, d: int, t: int, rng: np.random.Generator) -> IntArray:
    """n uniform t-subsets of [0, d), sorted ascending per row (Floyd's algorithm, vectorised)."""
    chosen = np.empty((n, t), dtype=np.int64)
    for step, top in enumerate(range(d - t, d)):
        r = rng.integers(0, top + 1, size=n, dtype=np.int64)
        taken = np.any(chosen[:, :step] == r[:, None], axis=1)
        chosen[:, step] = np.where(taken, top, r)
    return np.sort(chosen, axis=1)


@register
class KVUEMulti(KeySampledMechanism):
    """KVUE over t sampled keys: GRR over the 3^t joint states (see the module docstring)."""

    name = "kvue_multi"
    summary = "KVUE over t sampled keys: GRR over their 3^t joint states (t = 0: chosen from eps)"
    symbol_field = "s"
    params_spec: ClassVar[tuple[Param, ...]] = (T_PARAM,)

    def _setup(self) -> None:
        asked = int(self.params["t"])
        if asked > self.d:
            raise InvalidParameter(f"{self.name}: t={asked} exceeds the {self.d} keys")
        self.t = asked if asked > 0 else auto_t(self.epsilon, self.d)
        self.n_joint = 3**self.t
        self.p, self.q = joint_grr(self.epsilon, self.t)
        self.q_marginal = 3 ** (self.t - 1) * self.q
        self._p: FloatArray = np.where(np.eye(3, dtype=bool), self.p - self.q, 0.0) + self.q_marginal

    # --------------------------------------------------------------- model
    def transition(self) -> FloatArray:
        """The marginal P'[y_i | x_i] of one position (the joint GRR summed over the others)."""
        return self._p

    def _perturb_states(self, states: IntArray, rng: np.random.Generator) -> IntArray:
        """GRR over the 3^t joint symbols: keep with p, else one of the other 3^t - 1 uniformly."""
        keep = rng.random(states.shape[0]) < self.p
        other = (states + rng.integers(1, self.n_joint, size=states.shape[0])) % self.n_joint
        return np.where(keep, states, other).astype(np.int64)

    def linear_inverse(self) -> FloatArray:
        delta = self.p - self.q
        a: FloatArray = (np.eye(3) - self.q_marginal) / delta
        return a

    # --------------------------------------------------------------- client
    def key_fields(self) -> tuple[str, ...]:
        return tuple(f"j{i}" for i in range(self.t))

    def fields(self) -> tuple[Field, ...]:
        keys = tuple(Field(name, "uint", 0, self.d) for name in self.key_fields())
        return (*keys, Field(self.symbol_field, "uint", 0, self.n_joint))

    def public_fields(self) -> tuple[str, ...]:
        """The t sampled keys are drawn independently of the data."""
        return self.key_fields()

    def randomized_output(self) -> SymbolOutput:
        return SymbolOutput((self.symbol_field,), self.n_joint)

    def _contrast(self, epsilon: float) -> float:
        p, q = joint_grr(epsilon, self.t)
        return p - q

    def _family_params(self) -> dict[str, ParamValue]:
        """t stays this configuration's (its default follows epsilon)."""
        return {**self.params, "t": self.t}

    def _validate_extra(self, batch: ReportBatch) -> list[tuple[np.ndarray, str]]:
        if self.t < 2:
            return []
        keys = np.stack([batch[name].astype(np.int64) for name in self.key_fields()], axis=1)
        bad = np.any(np.diff(keys, axis=1) <= 0, axis=1)
        return [(bad, f"keys {', '.join(self.key_fields())} must be strictly increasing")]

    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        keys = sample_key_sets(users.n_users, self.d, self.t, public)
        joint = np.zeros(users.n_users, dtype=np.int64)
        for i in range(self.t):
            joint += states_of(users, keys[:, i], rng) * 3**i
        out: ReportBatch = {name: keys[:, i] for i, name in enumerate(self.key_fields())}
        out[self.symbol_field] = self._perturb_states(joint, rng)
        return out

    # --------------------------------------------------------------- statistics
    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        symbols = batch[self.symbol_field].astype(np.int64)
        keys = np.stack([batch[name].astype(np.int64) for name in self.key_fields()], axis=1)
        digits = (symbols[:, None] // 3 ** np.arange(self.t, dtype=np.int64)[None, :]) % 3
        codes = (keys * 3 + digits).ravel()
        arrays["counts"] += np.bincount(codes, minlength=self.d * 3).reshape(self.d, 3)

    def expected_stats(self, users: KVData) -> Stats:
        """E[counts[j]] = (t/d) P' sum_u theta_u(j): each key is in a device's subset with chance t/d."""
        one = super().expected_stats(users)
        counts = one.arrays["counts"].astype(np.float64) * self.t
        return Stats.expected(self, {"counts": counts, "n": one.arrays["n"].astype(np.float64)})

    @property
    def keys_per_report(self) -> int:
        return self.t

    # --------------------------------------------------------------- estimation
    def frequency_covariance(self, stats: Stats, joint: FloatArray | None = None) -> FloatArray:
        """(d, d) covariance of the ``unbiased`` frequencies (module docstring), at the plug-in
        frequencies clipped into [0, 1]. ``joint[j, k]`` is the share of devices holding both
        keys (default f_j f_k, independent keys); its diagonal is ignored. The overlap M_jk is
        taken at its expectation given M_j and M_k, M_j M_k (t - 1) d / (t n (d - 1))."""
        counts = stats.arrays["counts"].astype(np.float64)
        reports = counts.sum(axis=1)
        n = stats.n_reports
        linear = self.estimate(stats, "unbiased")
        f = np.where(np.isfinite(linear.frequency), np.clip(linear.frequency, 0.0, 1.0), 0.5)
        fjk = np.outer(f, f) if joint is None else np.asarray(joint, dtype=np.float64)
        delta, qm = self.p - self.q, self.q_marginal
        noise = (
            4 * qm / 3 - 4 * qm**2 - 2 * qm * delta * (f[:, None] + f[None, :]) + delta * (1 - delta) * fjk
        ) / delta**2
        mm = np.outer(reports, reports)
        if self.d > 1 and self.t > 1:
            overlap = mm * (self.t - 1) * self.d / (self.t * max(n, 1) * (self.d - 1))
        else:
            overlap = np.zeros_like(mm)
        with np.errstate(divide="ignore", invalid="ignore"):
            cov = overlap / mm * noise + (fjk - np.outer(f, f)) * (n * overlap - mm) / (max(n - 1, 1) * mm)
        np.fill_diagonal(cov, linear.frequency_stderr**2)
        return np.asarray(np.where(mm > 0, cov, np.nan), dtype=np.float64)

    # --------------------------------------------------------------- privacy
    def audit_model(self, exhaustive: bool) -> OutputModel:
        """Exhaustive: Pr[(J, y) | S] = (p if y is S's joint state on J else q) / C(d, t) over
        every subset J and symbol y. Reduced: the three states of key 0 with every other key
        absent; outputs whose probability is the same for all three are merged."""
        if exhaustive:
            users, labels = discrete_users(self.d)
            n = users.n_users
            subsets = list(itertools.combinations(range(self.d), self.t))
            probs = np.zeros((n, len(subsets), self.n_joint))
            for col, subset in enumerate(subsets):
                joint = np.zeros(n, dtype=np.int64)
                for i, key in enumerate(subset):
                    held, values = users.lookup(np.arange(n, dtype=np.int64), np.full(n, key, dtype=np.int64))
                    state = np.where(held, np.where(values > 0, POS, NEG), ABSENT)
                    joint += state * 3**i
                probs[:, col, :] = self.q
                probs[np.arange(n), col, joint] = self.p
            layout = PatternLayout(len(subsets), 1, self.n_joint)
            return DenseModel(probs.reshape(n, -1) / len(subsets), labels, layout)
        share = self.t / self.d  # chance that key 0 is in J
        column = np.where(np.eye(3, dtype=bool), self.p, self.q)[
            :, [ABSENT, POS, NEG]
        ].T  # (user, digit of key 0)
        probs = np.zeros((3, 4))
        probs[:, :3] = share * column
        probs[:, 3] = 1.0 - probs[:, :3].sum(axis=1)
        # each distinguished column is one symbol for every subset holding key 0; the rest merges
        weights = np.array([share, share, share, self.n_joint - 3 * share])
        return DenseModel(probs, ("{}", "{0:+1}", "{0:-1}"), SymbolLayout(weights))
