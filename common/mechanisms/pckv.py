"""PCKV: Padding-and-Sampling with PCKV-UE and PCKV-GRR (Gu et al., USENIX Security 2020; spec §9).

Client. Each device pads its set S with ell *distinct* dummy keys d..d+ell-1 and samples
one pair (§9.1, in the equivalent form of the author's code: with probability
|S| / max(|S|, ell) a uniform pair of S, otherwise a uniform dummy whose value is 0), then
discretises the value, v* = Disc(v). The sampled pair is perturbed over the padded domain
of d' = d + ell keys, which is why every allocation formula depends on d':

* PCKV-UE (§9.2): a ternary vector; the sampled coordinate keeps v* with probability
  a p, flips it with a(1-p), drops to 0 otherwise; every other coordinate is +-1 with
  probability b/2 each. The report keeps the *real* coordinates only (fields ``pos`` and
  ``neg``, LSB-first bitsets of d bits); dropping the dummy coordinates is
  post-processing, so the mechanism stays eps-LDP and the estimators never need them.
* PCKV-GRR (§9.3): one pair <k', v'>; with probability a the sampled key with v* kept
  with probability p, otherwise a uniform other key of the d' with a fair sign. Fields
  ``k`` in [0, d] and ``v`` in {-1, 0, +1}: any dummy output is reported as k = d, v = 0
  (post-processing again); a real key always carries v = +-1.

Statistics (both): n1[j] = #reports with +1 at key j, n2[j] = #reports with -1, and n.
Per key j and user u the report's symbol at j is +1/-1/0 with the same probabilities in
both protocols — a/2 (1 +- (2p-1) v) when u sampled j, b/2 each otherwise — so the
estimators and their variances are shared.

Estimators (``estimator_names``):

* ``unbiased``: f = ell((n1+n2)/n - b)/(a-b), raw and exactly unbiased (may leave [0, 1]);
  mean by Algorithm 4 (f corrected into [1/n, 1] internally, n1^, n2^ = A^-1(...) clipped
  into [count_floor, N_j], lower bound first). Where the correction had to raise f to 1/n
  the mean carries no information (Algorithm 4 would print a clipping artefact, 0): NaN.
* ``paper``: Algorithm 4 as published; the reported frequency is the corrected one too.
* ``em``: per-key composite EM on (n1, n2, n - n1 - n2) with the 3x3 P of §9.4;
  f = ell(theta+ + theta-), m = (theta+ - theta-)/(theta+ + theta-); warm-startable.
* ``normsub``: the per-item sampled shares (n1^/n, n2^/n of every real key plus the
  remaining mass as one "rest" item) projected onto the simplex.

Standard errors are analytic: the exact covariance of (n1[j], n2[j]) given a two-type
population (n f holders sampling j with weight 1/ell and sharing the value m, as in
PCKV's Theorem 4; n(1-f) non-holders), evaluated at the estimate, pushed through the
estimator (linear for f, delta method for the mean ratio). It yields

    Var[f^] = ell^2 b(1-b)/(n(a-b)^2) + ell f (1 - 2b - (a-b)/ell)/(n(a-b))
            = Theorem 4 as transcribed (spec §9.4) + (ell - 1) f / n.

The transcription drops the (ell - 1) f / n term, which is zero at ell = 1 only; the
Monte-Carlo test at ell = 3 (``tests/test_pckv.py``) rejects the transcribed value and
accepts this one. For the mean the same term cancels: the delta method on this
covariance equals Theorem 4's Var[m^] expression for every ell. It is a first-order
value; Algorithm 4's clipping makes the true variance smaller when |m| is near 1.

Assumption (stated in every estimate's diagnostics): each user holds at most ell keys.
A user holding more is sampled with weight 1/|S| < 1/ell per key, so its keys are
under-counted by the factor ell/|S| (the expected statistics model this exactly; the
estimators cannot undo it). No error is raised: the data model allows such users.

Privacy: Theorem 2 (UE) max{eps2, eps1 + ln[2/(1+e^-eps2)]}; Theorem 3 (GRR)
ln[(e^(eps1+eps2) + lambda)/(min{e^eps1, (e^eps2+1)/2} + lambda)], lambda =
(ell-1)(e^eps2+1)/2. The exact audit enumerates discrete users and every output.
"""

from __future__ import annotations

import abc
import itertools
import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from kvldp.common.audit import AuditTooLarge, DenseModel, OutputModel, discrete_users
from kvldp.common.em import em_counts, parse_em_options
from kvldp.common.estimate import Estimate
from kvldp.common.kvdata import KVData
from kvldp.common.mechanisms.base import IntArray, Mechanism
from kvldp.common.mechanisms.padding import sample_slots, slot_weights
from kvldp.common.mechanisms.registry import register
from kvldp.common.params import InvalidParameter, Param
from kvldp.common.primitives import FloatArray, bit_column_sums, disc, flip, rr_keep
from kvldp.common.schema import Field, ReportBatch
from kvldp.common.simplex import project_simplex
from kvldp.common.stats import Stats
from kvldp.common.variance import ratio_variance, stderr

ELL = Param(
    "ell",
    int,
    1,
    "padding length: each user samples one of max(|S|, ell) slots, empty slots are distinct dummy keys",
    check=lambda v: 1 <= int(v) <= 1_000_000,
    check_doc="must be an integer between 1 and 1000000",
)
ALLOCATION = Param(
    "allocation",
    str,
    "optimized",
    "split of epsilon into key budget eps1 and value budget eps2: optimized (D4 Lemma 2/3), "
    "naive (eps1 = eps2 = eps/2) or nonoptimized (D4 Eq.21: eps2 = eps/2, eps1 = ln[(e^eps + e^(eps/2))/2])",
    choices=("optimized", "naive", "nonoptimized"),
)
COUNT_FLOOR = Param(
    "count_floor",
    int,
    1,
    "lower clip L of the calibrated counts in Algorithm 4 (1 in the author's code, 0 in others)",
    check=lambda v: v in (0, 1),
    check_doc="must be 0 or 1",
)

ASSUMES = "every user holds at most ell keys"
#: users whose ternary vectors are generated together (bounds simulator memory to ~4M cells)
UE_BLOCK_CELLS = 1 << 22
#: an exact audit may hold at most this many probabilities ...
MAX_AUDIT_ENTRIES = 1 << 22
#: ... and compare at most this many (input, input, output) triples
MAX_AUDIT_WORK = 1 << 28


# ---------------------------------------------------------------------- budgets and probabilities
def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        raise InvalidParameter(f"epsilon budget {x!r} is too large for floating point") from None


def allocate(epsilon: float, allocation: str, mechanism: str, ell: int = 1) -> tuple[float, float]:
    """(eps1, eps2) of an allocation (spec §9.2, §9.3).

    ``optimized`` is D4 Lemma 2 for PCKV-UE and Lemma 3 (which depends on ell) for
    PCKV-GRR; both spend exactly epsilon. ``naive`` and ``nonoptimized`` are D4's
    ablations, defined for PCKV-UE: naive (sequential composition, as in PrivKVM) spends
    less than epsilon under Theorem 2, nonoptimized exactly epsilon. PCKV-GRR uses the same
    (eps1, eps2) pairs so that ablations compare like with like; Theorem 3 gives exactly
    the PCKV-UE level at ell = 1 and less for ell > 1 (sampling amplification).
    """
    if allocation == "naive":
        return epsilon / 2.0, epsilon / 2.0
    if allocation == "nonoptimized":
        return math.log((_exp(epsilon) + _exp(epsilon / 2.0)) / 2.0), epsilon / 2.0
    if allocation != "optimized":
        raise InvalidParameter(f"unknown allocation {allocation!r}")
    if mechanism == "pckv_ue":
        return math.log((_exp(epsilon) + 1.0) / 2.0), epsilon
    big_d = ell * math.expm1(epsilon)
    return math.log1p(big_d / 2.0), math.log1p(big_d)


def ue_probabilities(eps1: float, eps2: float) -> tuple[float, float, float]:
    """(a, b, p) of PCKV-UE: OUE-style a = 1/2, b = 1/(e^eps1 + 1) (D4 Eq.19), p = RR(eps2)."""
    return 0.5, 1.0 / (_exp(eps1) + 1.0), rr_keep(eps2)


def grr_probabilities(eps1: float, eps2: float, d_prime: int) -> tuple[float, float, float]:
    """(a, b, p) of PCKV-GRR: GRR over the d' padded keys at eps1, p = RR(eps2)."""
    e1 = _exp(eps1)
    return e1 / (e1 + d_prime - 1), 1.0 / (e1 + d_prime - 1), rr_keep(eps2)


def theorem2_epsilon(eps1: float, eps2: float) -> float:
    """PCKV-UE's tight composition (Theorem 2): max{eps2, eps1 + ln[2/(1 + e^-eps2)]}."""
    return max(eps2, eps1 + math.log(2.0 / (1.0 + math.exp(-eps2))))


def theorem3_epsilon(eps1: float, eps2: float, ell: int) -> float:
    """PCKV-GRR's composition with sampling amplification (Theorem 3)."""
    half = (_exp(eps2) + 1.0) / 2.0
    lam = (ell - 1) * half
    return math.log((_exp(eps1 + eps2) + lam) / (min(_exp(eps1), half) + lam))


def utility_gh(a: float, b: float, p: float) -> tuple[float, float]:
    """D4 Eq.16: g = b/(a^2(2p-1)^2) and h = (1-b)b/(a-b)^2, so that MSE_f ~ ell^2 h/n and
    MSE_m ~ mu(g + h m^2) with mu = ell^2/(n f^2)."""
    return b / (a * a * (2 * p - 1) ** 2), (1 - b) * b / (a - b) ** 2


def pckv_ue_gh(epsilon: float) -> tuple[float, float]:
    """(g, h) of PCKV-UE under the optimized allocation, closed form (spec §9.4)."""
    e = _exp(epsilon)
    return 8 * (e + 1) ** 2 / ((e + 3) * (e - 1) ** 2), 8 * (e + 1) / (e - 1) ** 2


def pckv_grr_gh(epsilon: float, ell: int, d: int) -> tuple[float, float]:
    """(g, h) of PCKV-GRR under the optimized allocation, D = ell(e^eps - 1) (spec §9.4)."""
    big_d = ell * math.expm1(epsilon)
    d_prime = d + ell
    return 2 * (big_d + 2 * d_prime) / big_d**2, 2 * (big_d + 2 * d_prime - 2) / big_d**2


# ---------------------------------------------------------------------- padding and sampling
def pad_and_sample(users: KVData, ell: int, rng: np.random.Generator) -> tuple[IntArray, NDArray[np.int8]]:
    """Padding-and-Sampling (§9.1, [X1] form): the sampled key in [0, d + ell) (indices >= d
    are the ell distinct dummies, uniform among them) and v* = Disc(v), a fair coin for a
    dummy (v = 0)."""
    real, key, value = sample_slots(users, ell, rng)
    dummy = users.d + rng.integers(0, ell, size=users.n_users)
    return np.where(real, key, dummy).astype(np.int64), disc(value, rng)


def bernoulli_positions(trials: int, prob: float, rng: np.random.Generator) -> IntArray:
    """Sorted indices of the successes among ``trials`` iid Bernoulli(prob) draws.

    Gaps between successes are iid Geometric(prob), so the cost is proportional to the
    number of successes, not of trials: PCKV-UE's non-sampled coordinates are nonzero with
    probability b, which is small at large epsilon.
    """
    if trials <= 0 or prob <= 0.0:
        return np.zeros(0, dtype=np.int64)
    if prob >= 1.0:
        return np.arange(trials, dtype=np.int64)
    mean = trials * prob
    batch = int(mean + 6.0 * math.sqrt(mean) + 16)
    parts: list[IntArray] = []
    last = -1
    while True:
        pos = last + np.cumsum(rng.geometric(prob, size=batch))
        parts.append(pos[pos < trials])
        if pos[-1] >= trials:
            return np.concatenate(parts).astype(np.int64)
        last = int(pos[-1])


def _count_sets(m: int, max_size: int) -> int:
    """Number of users over m keys with at most ``max_size`` pairs of values +-1."""
    return sum(math.comb(m, s) * 2**s for s in range(min(m, max_size) + 1))


# ---------------------------------------------------------------------- the shared family
class PCKV(Mechanism):
    """What PCKV-UE and PCKV-GRR share: sampling, statistics, estimators, audit inputs."""

    params_spec: ClassVar[tuple[Param, ...]] = (ELL, ALLOCATION, COUNT_FLOOR)
    estimator_names: ClassVar[tuple[str, ...]] = ("unbiased", "paper", "em", "normsub")

    def _setup(self) -> None:
        self.ell = int(self.params["ell"])
        self.d_prime = self.d + self.ell
        self.count_floor = float(self.params["count_floor"])
        self.eps1, self.eps2 = allocate(self.epsilon, str(self.params["allocation"]), self.name, self.ell)
        self.a, self.b, self.p = self._probabilities()
        # a or p rounding to exactly 1 would make the client deterministic (infinite loss)
        if not (0.0 < self.b < self.a < 1.0 and 0.5 < self.p < 1.0):
            raise InvalidParameter(
                f"{self.name}: epsilon={self.epsilon} gives degenerate probabilities in floating point "
                f"a={self.a}, b={self.b}, p={self.p} (need 0 < b < a < 1 and 1/2 < p < 1)"
            )

    @abc.abstractmethod
    def _probabilities(self) -> tuple[float, float, float]:
        """(a, b, p) from (eps1, eps2, d')."""

    def utility(self) -> tuple[float, float]:
        """(g, h) of D4 Eq.16 for this configuration (any allocation)."""
        return utility_gh(self.a, self.b, self.p)

    # --------------------------------------------------------------- statistics
    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"n1": (self.d,), "n2": (self.d,)}

    def expected_stats(self, users: KVData) -> Stats:
        """E[n1[j]] = n b/2 + sum over holders u of j of w_u (a/2 (1 + (2p-1) v_u) - b/2),
        w_u = 1/max(|S_u|, ell); E[n2] likewise with -(2p-1). Exact, for any population."""
        w, _ = slot_weights(users, self.ell)
        a, b, p = self.a, self.b, self.p
        base = users.n_users * b / 2.0
        lift = (2 * p - 1) * users.values
        lifts = w[:, None] * (a / 2 * (1 + np.stack([lift, -lift], axis=1)) - b / 2)
        n1 = base + np.bincount(users.keys, weights=lifts[:, 0], minlength=self.d).astype(np.float64)
        n2 = base + np.bincount(users.keys, weights=lifts[:, 1], minlength=self.d).astype(np.float64)
        return Stats.expected(self, {"n1": n1, "n2": n2, "n": np.array([float(users.n_users)])})

    # --------------------------------------------------------------- model
    def transition(self) -> FloatArray:
        """Per-key P[z | x] of §9.4: z in (+1, -1, 0) rows; x in (sampled with v* = +1,
        sampled with v* = -1, did not sample the key) columns. Columns sum to one."""
        a, b, p = self.a, self.b, self.p
        return np.array(
            [[a * p, a * (1 - p), b / 2], [a * (1 - p), a * p, b / 2], [1 - a, 1 - a, 1 - b]],
            dtype=np.float64,
        )

    def count_matrix(self) -> FloatArray:
        """A of Algorithm 4: E[(n1, n2) - n b/2] = A (N+, N-), N+- = users who sampled (j, +-1)."""
        a, b, p = self.a, self.b, self.p
        return np.array([[a * p - b / 2, a * (1 - p) - b / 2], [a * (1 - p) - b / 2, a * p - b / 2]])

    def linear_counts(self, n: float, n1: FloatArray, n2: FloatArray) -> tuple[FloatArray, FloatArray]:
        """A^-1 [n1 - nb/2; n2 - nb/2] in closed form (det A = a(2p-1)(a-b)), unclipped."""
        a, b, p = self.a, self.b, self.p
        x1, x2 = n1 - n * b / 2, n2 - n * b / 2
        diag, off = a * p - b / 2, a * (1 - p) - b / 2
        det = a * (2 * p - 1) * (a - b)
        return (diag * x1 - off * x2) / det, (diag * x2 - off * x1) / det

    def count_covariance(self, n: float, f: FloatArray, m: FloatArray) -> FloatArray:
        """Exact Cov of (n1[j], n2[j]) given the population: (d, 2, 2).

        Users are independent; a user's symbol at key j is +1 with probability
        q+ = w a/2 (1 + (2p-1) m) + (1 - w) b/2 and -1 with q- (m -> -m), w its probability of
        sampling j: 1/ell for the n f holders (who share the value m, as in Theorem 4), 0 for
        the others. Each user adds diag(q) - q q^T.
        """
        w = 1.0 / self.ell
        half_b = self.b / 2.0
        t = (2 * self.p - 1) * m
        qp = w * self.a / 2 * (1 + t) + (1 - w) * half_b
        qm = w * self.a / 2 * (1 - t) + (1 - w) * half_b

        def single(x: FloatArray | float, y: FloatArray | float) -> FloatArray:
            x_, y_ = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
            return np.stack(
                [np.stack([x_ * (1 - x_), -x_ * y_], -1), np.stack([-x_ * y_, y_ * (1 - y_)], -1)], -2
            )

        holders = (n * f)[:, None, None]
        return np.asarray((n - holders) * single(half_b, half_b) + holders * single(qp, qm), dtype=np.float64)

    # --------------------------------------------------------------- estimation
    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate:
        n = float(stats.arrays["n"][0])
        n1 = stats.arrays["n1"].astype(np.float64)
        n2 = stats.arrays["n2"].astype(np.float64)
        diag: dict[str, Any] = {"assumes": ASSUMES}
        latent: FloatArray | None = None
        if estimator == "em":
            freq, mean, latent = self._em(n, n1, n2, options, diag)
        else:
            if options:
                raise TypeError(f"estimator {estimator} takes no options, got {sorted(options)}")
            if n <= 0:
                freq = mean = np.full(self.d, np.nan)
            elif estimator == "normsub":
                freq, mean = self._normsub(n, n1, n2)
            else:
                corrected, mean = self.algorithm4(n, n1, n2, diag)
                freq = self.baseline_frequency(n, n1, n2) if estimator == "unbiased" else corrected
        var_f, var_m = self.variances(n, freq, mean)
        diag["undefined_means"] = int(np.sum(np.isnan(mean)))
        if n <= 0:
            diag["no_reports"] = True
        return Estimate(
            mechanism=self.name,
            estimator=estimator,
            frequency=freq,
            frequency_stderr=stderr(var_f),
            mean=mean,
            mean_stderr=np.where(np.isnan(mean), np.nan, stderr(var_m)),
            n_reports=stats.n_reports,
            latent=latent,
            diagnostics=diag,
        )

    def baseline_frequency(self, n: float, n1: FloatArray, n2: FloatArray) -> FloatArray:
        """f^ = ell((n1 + n2)/n - b)/(a - b): exactly unbiased when every user holds <= ell keys."""
        return np.asarray(self.ell * ((n1 + n2) / n - self.b) / (self.a - self.b), dtype=np.float64)

    def algorithm4(
        self, n: float, n1: FloatArray, n2: FloatArray, diag: dict[str, Any] | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """PCKV Algorithm 4: (frequency corrected into [1/n, 1], mean).

        n1^, n2^ = A^-1(...) are clipped into [count_floor, N_j] with N_j = n f_j / ell,
        lower bound first so that the upper bound wins when N_j < count_floor; then
        m = (n1^ - n2^)/N_j, which lies in [-1, 1].

        Where the correction raises f to 1/n (fewer than 1/ell estimated holders, the
        baseline ratio's denominator is below one user) the published algorithm's mean is an
        artefact of the clipping — exactly 0 with count_floor = 1 — so it is reported as
        undefined (NaN, counted in the diagnostics); mapping NaN to 0 reproduces [X1].
        """
        raw = self.baseline_frequency(n, n1, n2)
        f = np.clip(raw, 1.0 / n, 1.0)
        big_n = n * f / self.ell
        c1, c2 = self.linear_counts(n, n1, n2)
        k1 = np.minimum(np.maximum(c1, self.count_floor), big_n)
        k2 = np.minimum(np.maximum(c2, self.count_floor), big_n)
        if diag is not None:
            diag["frequency_corrected"] = int(np.sum(f != raw))
            diag["counts_clipped"] = int(np.sum((k1 != c1) | (k2 != c2)))
        return f, np.where(raw < 1.0 / n, np.nan, (k1 - k2) / big_n)

    def _normsub(self, n: float, n1: FloatArray, n2: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Shares of (j, +1), (j, -1) for every real key plus the rest, projected onto the simplex."""
        c1, c2 = self.linear_counts(n, n1, n2)
        shares = np.stack([c1, c2], axis=1).ravel() / n
        proj = project_simplex(np.append(shares, 1.0 - shares.sum()))[:-1].reshape(self.d, 2)
        return self._from_shares(proj[:, 0], proj[:, 1])

    def _from_shares(self, up: FloatArray, down: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(f, m) from the shares of users who sampled (j, +1) and (j, -1); m is NaN at share 0."""
        total = up + down
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(total > 0, (up - down) / total, np.nan)
        return self.ell * total, mean

    def _em(
        self, n: float, n1: FloatArray, n2: FloatArray, options: dict[str, Any], diag: dict[str, Any]
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        opts = parse_em_options(options, (self.d, 3))
        counts = np.stack([n1, n2, n - n1 - n2], axis=1)
        res = em_counts(self.transition(), counts, theta0=opts.theta0, tol=opts.tol, max_iter=opts.max_iter)
        theta = np.where(res.empty[:, None], np.nan, res.theta)
        diag["em_iterations"] = int(res.iterations.max(initial=0))
        diag["em_unconverged_keys"] = int(np.sum(~res.converged & ~res.empty))
        diag["em_warm_start"] = opts.theta0 is not None
        freq, mean = self._from_shares(theta[:, 0], theta[:, 1])
        return freq, mean, theta

    def variances(self, n: float, freq: FloatArray, mean: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Analytic (Var f^, Var m^) per key for n users at frequency ``freq`` and mean ``mean``.

        Estimators evaluate it at their own estimate (f clipped into [0, 1], m into [-1, 1],
        NaN as 0). f^ is linear in n1 + n2; the mean is the ratio (n1 - n2)/(a(2p-1)) over
        (n1 + n2 - n b)/(a - b) = N_j, linearised at (m N_j, N_j) with N_j = n f/ell, f taken
        at least 1/n as in Algorithm 4. For ``em`` (square P, so the MLE is the linear
        solution when interior) and ``normsub`` the same first-order map applies.
        """
        if n <= 0:
            nan = np.full(self.d, np.nan)
            return nan, nan.copy()
        a, b, p, ell = self.a, self.b, self.p, self.ell
        f = np.clip(np.nan_to_num(freq, nan=0.0), 0.0, 1.0)
        m = np.clip(np.nan_to_num(mean, nan=0.0), -1.0, 1.0)
        cov = self.count_covariance(n, f, m)
        v11, v22, v12 = cov[:, 0, 0], cov[:, 1, 1], cov[:, 0, 1]
        var_sum, var_diff, cov_sd = v11 + v22 + 2 * v12, v11 + v22 - 2 * v12, v11 - v22
        var_f = (ell / (n * (a - b))) ** 2 * var_sum
        big_n = n * np.maximum(f, 1.0 / n) / ell
        gain = a * (2 * p - 1)
        var_m = ratio_variance(
            m * big_n, big_n, var_diff / gain**2, var_sum / (a - b) ** 2, cov_sd / (gain * (a - b))
        )
        return var_f, var_m

    # --------------------------------------------------------------- privacy
    @abc.abstractmethod
    def _audit_outputs(self, m: int) -> FloatArray:
        """Pr[output | sampled item] (Z, 2m + 1) for outputs about a sub-domain of m keys;
        items are (k, +1), (k, -1) for k < m, then "a dummy"."""

    @abc.abstractmethod
    def _n_audit_outputs(self, m: int) -> int: ...

    def _audit_size_ok(self, n_inputs: int, n_outputs: int) -> bool:
        return n_inputs * n_outputs <= MAX_AUDIT_ENTRIES and n_inputs**2 * n_outputs <= MAX_AUDIT_WORK

    def exhaustive_feasible(self) -> bool:
        return self.d <= 20 and self._audit_size_ok(3**self.d, self._n_audit_outputs(self.d))

    def audit_model(self, exhaustive: bool) -> OutputModel:
        """Exact Pr[output | discrete user] (values +-1; see :mod:`kvldp.common.audit`).

        Exhaustive: all 3^d users and every output. Reduced: users over the sub-domain of
        the first m = min(d, 2 ell) keys holding at most ell pairs. That loses nothing:

        * a set with more than ell keys samples uniformly among them, so for any output z
          its probability is an average of the per-key probabilities, which the ell-subset
          of its most (least) likely keys for z matches or exceeds (undercuts) — the
          ell-subset samples each of its keys with probability 1/ell and no dummy; the max
          over z of max_S Pr[z|S] / min_S' Pr[z|S'] is therefore reached by sets of at most
          ell keys;
        * two such sets touch at most 2 ell keys, and the mechanism is symmetric under
          relabelling the real keys, so some worst pair lies in the sub-domain;
        * for users inside the sub-domain, what the report says about the other keys has
          the same law for every user (they are never sampled) and cancels in every ratio
          (PCKV-UE: the coordinates outside; PCKV-GRR: all outside keys merged into one
          output). Dummy coordinates are not part of a report at all.
        """
        m = self.d if exhaustive else min(self.d, 2 * self.ell)
        # sizes are counted before anything is enumerated (m > 40 is hopeless anyway)
        if m > 40 or not self._audit_size_ok(
            3**m if exhaustive else _count_sets(m, self.ell), self._n_audit_outputs(m)
        ):
            raise AuditTooLarge(
                f"exact {'exhaustive' if exhaustive else 'reduced'} audit of {self.name} with d={self.d}, "
                f"ell={self.ell} enumerates users over {m} keys: too large (Theorems 2/3 still apply)"
            )
        users, labels = discrete_users(m, max_size=None if exhaustive else self.ell)
        w_pair, w_dummy = slot_weights(users, self.ell)
        rows = np.repeat(np.arange(users.n_users), users.sizes)
        weights = np.zeros((users.n_users, 2 * m + 1))
        weights[rows, 2 * users.keys + (users.values < 0)] = w_pair
        weights[:, 2 * m] = w_dummy
        return DenseModel(np.asarray(weights @ self._audit_outputs(m).T, dtype=np.float64), labels)


@register
class PCKVUE(PCKV):
    name = "pckv_ue"
    summary = "PCKV-UE: padding-and-sampling + unary encoding of the sampled key-value pair (Gu et al.)"

    def _probabilities(self) -> tuple[float, float, float]:
        return ue_probabilities(self.eps1, self.eps2)

    def claimed_epsilon(self) -> float:
        return theorem2_epsilon(self.eps1, self.eps2)

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        return (Field("pos", "bits", 0, self.d), Field("neg", "bits", 0, self.d))

    def _validate_extra(self, batch: ReportBatch) -> list[tuple[NDArray[np.bool_], str]]:
        overlap = np.any((batch["pos"] & batch["neg"]) != 0, axis=1)
        return [(overlap, "pos and neg share a bit (a key cannot be both +1 and -1)")]

    def _perturb_many(self, users: KVData, rng: np.random.Generator) -> ReportBatch:
        """Algorithm 2 on the real coordinates. The sampled coordinate is v* w.p. a p, -v*
        w.p. a(1-p), else 0; every other coordinate independently +-1 w.p. b/2 each, drawn
        sparsely (Bernoulli(b) positions, fair signs) in blocks of users."""
        n, d = users.n_users, self.d
        keys, vstar = pad_and_sample(users, self.ell, rng)
        u = rng.random(n)
        y = np.where(u < self.a * self.p, vstar, np.where(u < self.a, -vstar, 0)).astype(np.int8)
        nbytes = (d + 7) // 8
        pos = np.zeros((n, nbytes), dtype=np.uint8)
        neg = np.zeros((n, nbytes), dtype=np.uint8)
        block = max(1, UE_BLOCK_CELLS // d)
        for start in range(0, n, block):
            rows = min(block, n - start)
            hits = bernoulli_positions(rows * d, self.b, rng)
            up = rng.random(hits.size) < 0.5
            pos_bits = np.zeros((rows, d), dtype=bool)
            neg_bits = np.zeros((rows, d), dtype=bool)
            pos_bits.flat[hits[up]] = True
            neg_bits.flat[hits[~up]] = True
            # the sampled real coordinate replaces its non-sampled draw (independent cells)
            r = np.flatnonzero(keys[start : start + rows] < d)
            k = keys[start + r]
            pos_bits[r, k] = y[start + r] > 0
            neg_bits[r, k] = y[start + r] < 0
            pos[start : start + rows] = np.packbits(pos_bits, axis=1, bitorder="little")
            neg[start : start + rows] = np.packbits(neg_bits, axis=1, bitorder="little")
        return {"pos": pos, "neg": neg}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        arrays["n1"] += bit_column_sums(batch["pos"], self.d)
        arrays["n2"] += bit_column_sums(batch["neg"], self.d)

    # --------------------------------------------------------------- privacy
    def _n_audit_outputs(self, m: int) -> int:
        return int(3**m)

    def _audit_outputs(self, m: int) -> FloatArray:
        """Every ternary pattern of the m coordinates: a product over coordinates of
        b/2 (+-1) or 1-b (0), with the sampled coordinate's factor replaced."""
        a, b, p = self.a, self.b, self.p
        y = np.array(list(itertools.product((1, -1, 0), repeat=m)), dtype=np.int64).reshape(-1, m)
        q = np.where(y == 0, 1 - b, b / 2)
        base = np.prod(q, axis=1)
        comp = np.empty((y.shape[0], 2 * m + 1))
        for sign, offset in ((1, 0), (-1, 1)):
            r = np.where(y == sign, a * p, np.where(y == -sign, a * (1 - p), 1 - a))
            comp[:, offset : 2 * m : 2] = base[:, None] / q * r
        comp[:, 2 * m] = base
        return comp


@register
class PCKVGRR(PCKV):
    name = "pckv_grr"
    summary = "PCKV-GRR: padding-and-sampling + GRR over the padded key-value pairs (Gu et al.)"

    def _probabilities(self) -> tuple[float, float, float]:
        return grr_probabilities(self.eps1, self.eps2, self.d_prime)

    def claimed_epsilon(self) -> float:
        return theorem3_epsilon(self.eps1, self.eps2, self.ell)

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        """``k`` in [0, d] (d: a dummy key was output) and ``v`` in {-1, 0, +1} (0 only with k = d)."""
        return (Field("k", "uint", 0, self.d + 1), Field("v", "int", -1, 2))

    def _validate_extra(self, batch: ReportBatch) -> list[tuple[NDArray[np.bool_], str]]:
        dummy = batch["k"] == self.d
        zero = batch["v"] == 0
        return [
            (dummy & ~zero, f"k = {self.d} (dummy) must carry v = 0"),
            (~dummy & zero, "v = 0 is reserved for the dummy key"),
        ]

    def _perturb_many(self, users: KVData, rng: np.random.Generator) -> ReportBatch:
        """Algorithm 3: w.p. a the sampled key with v* kept w.p. p; otherwise another key,
        t uniform in [0, d'-1) shifted past the sampled one, with a fair sign. Dummy
        outputs become (d, 0)."""
        n = users.n_users
        keys, vstar = pad_and_sample(users, self.ell, rng)
        keep = rng.random(n) < self.a
        t = rng.integers(0, self.d_prime - 1, size=n)
        other = t + (t >= keys)
        fair = np.where(rng.random(n) < 0.5, 1, -1)
        out_k = np.where(keep, keys, other)
        out_v = np.where(keep, flip(vstar, self.p, rng), fair)
        dummy = out_k >= self.d
        return {
            "k": np.where(dummy, self.d, out_k).astype(np.int64),
            "v": np.where(dummy, 0, out_v).astype(np.int64),
        }

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        codes = batch["k"].astype(np.int64) * 3 + (batch["v"].astype(np.int64) + 1)
        counts = np.bincount(codes, minlength=3 * (self.d + 1)).reshape(self.d + 1, 3)
        arrays["n1"] += counts[: self.d, 2]
        arrays["n2"] += counts[: self.d, 0]

    # --------------------------------------------------------------- privacy
    def _n_audit_outputs(self, m: int) -> int:
        return 2 * m + 1 + (1 if self.d > m else 0)

    def _audit_outputs(self, m: int) -> FloatArray:
        """Outputs (k, +1), (k, -1) for k < m, "a real key outside the sub-domain" (when d > m,
        probability (d - m) b for every item) and "a dummy" (a + (ell-1) b after sampling a
        dummy, ell b otherwise)."""
        a, b, p, ell = self.a, self.b, self.p, self.ell
        comp = np.full((2 * m, 2 * m + 1), b / 2)
        idx = np.arange(2 * m)
        comp[idx, idx] = a * p
        comp[idx, idx ^ 1] = a * (1 - p)
        extra = [np.append(np.full(2 * m, (self.d - m) * b), (self.d - m) * b)] if self.d > m else []
        dummy = np.append(np.full(2 * m, ell * b), a + (ell - 1) * b)
        return np.vstack([comp, *extra, dummy])
