"""Population-level poisoning tests: could a snapshot's statistics come from a genuine population?

Fake devices that write their own reports (output poisoning) can send any well-formed
report. The gain-maximising one is a report that no genuine device would send *in that
proportion*: the +1 symbol of a target key and nothing that a genuine holder of +1
also produces. The tests below look for that footprint in the statistics alone, after
every refit (docs/detection.md):

* **State counts no population can have.** For every key k and state s (<k, -1>,
  absent, <k, +1>) the count of devices in state s is >= 0 in every population, and
  the basis of :mod:`kvldp.common.untrusted.poisoning_states` estimates its share without bias,
  with standard error se. The test of one count is one-sided: z = share / se,
  p = Phi(z). Under a genuine population z is N(mu, 1) with mu >= 0 (to first order),
  so P(p <= a) <= a, with equality for a state nobody is in.
* **Reports no key sampling produces.** In a key-sampled mechanism every genuine device
  picks the key(s) it reports on uniformly, independently of its data, so the number of
  reports M_j about key j is Binomial(n, t/d) whatever the population. A fake must
  report on its target, so a targeted attack leaves an excess. The test is one-sided
  and exact up to a bound that only makes it conservative: p = P(X >= M_j) <=
  pmf(M_j) / (1 - r), r = (n - M_j) q / ((M_j + 1)(1 - q)), the ratio of consecutive
  binomial terms, which only falls further into the tail (p = 1 at or below the mean).
* **Population constraints.** PCKV's padded share (the share of reports whose device
  sampled a dummy slot) is >= 0 in every population; a unary fake with many ``pos``
  bits drives it below.
* **A jump in time.** When the collection has a finite window, the newest (shortest)
  window's state shares are compared with those of the rest of the longest window
  (its statistics minus the newest's: disjoint reports). z = (s_new - s_rest) /
  sqrt(se_new^2 + se_rest^2), two-sided p. This one assumes a stationary population:
  a genuine change in who reports (a campaign, a release) trips it too, which an
  operator wants to see as well.

The score. All p-values of one window of one refit (K of them: three states per key,
the report counts, the jump's states, the population counts) are combined by Bonferroni: a key's score
is -log10(min(1, K p_min)) with p_min its smallest p-value, the population score the
same over the population tests. Whatever the genuine population, the probability that
*any* score of the window reaches s in one refit is at most 10^-s (Bonferroni needs no
independence); it is close to that bound only when many counts sit at 0, and
:func:`false_alarm_rate` computes it for a given population. :data:`ALERT_SCORE` is the
threshold the deploy alert uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.primitives import FloatArray
from kvldp.common.untrusted.poisoning_states import STATE_NAMES, StateShares, covers, state_shares

#: the alert threshold on a score: a false alarm in at most 10^-ALERT_SCORE of a window's refits
ALERT_SCORE = 3.0
#: scores are capped here (a p-value below 10^-300 is a certainty for any purpose)
MAX_SCORE = 300.0
_LN10 = math.log(10.0)


def log10_normal_cdf(z: FloatArray) -> FloatArray:
    """log10 Phi(z) elementwise, accurate in the far lower tail (NaN stays NaN)."""
    z = np.asarray(z, dtype=np.float64)
    out = np.full(z.shape, np.nan)
    finite = np.isfinite(z)
    near = finite & (z > -30.0)
    erfc = np.frompyfunc(math.erfc, 1, 1)
    with np.errstate(divide="ignore"):
        out[near] = np.log10(np.asarray(0.5 * erfc(-z[near] / math.sqrt(2.0)), dtype=np.float64))
    far = finite & ~near
    zf = z[far]
    # Mills ratio: Phi(z) = phi(z)/|z| (1 - 1/z^2 + 3/z^4 ...), the series' error < 1e-5 here
    out[far] = (-0.5 * zf * zf - np.log(-zf) - 0.5 * math.log(2 * math.pi) + np.log1p(-1 / zf**2)) / _LN10
    out[np.isposinf(z)] = 0.0
    out[np.isneginf(z)] = -np.inf
    return out


@dataclass(frozen=True)
class PoisoningReport:
    """The tests of one window of one refit.

    ``key_score`` (d,): each key's score (0: nothing unusual; s: a genuine population
    gives any key a score >= s in at most 10^-s of refits); ``key_test``: the name of the
    key's most significant test (``state_pos``, ``jump_neg``, ...; '' where the key has
    no test); ``population_score``/``population_test`` the same over the population
    tests (0 and '' without any); ``tests``: K, the number of p-values combined, of
    which ``jump_tests`` are the jump test's.
    """

    key_score: FloatArray
    key_test: tuple[str, ...]
    population_score: float
    population_test: str
    tests: int
    jump_tests: int = 0

    @property
    def score(self) -> float:
        """The window's score: the largest of every key's and the population's."""
        finite = self.key_score[np.isfinite(self.key_score)]
        return max(self.population_score, float(finite.max()) if finite.size else 0.0)

    def to_json(self, keys: tuple[str, ...]) -> dict[str, object]:
        return {
            "score": self.score,
            "alert_score": ALERT_SCORE,
            "tests": self.tests,
            "jump_tests": self.jump_tests,
            "population_score": self.population_score,
            "population_test": self.population_test or None,
            "keys": {
                k: {"score": float(s), "test": t or None}
                for k, s, t in zip(keys, self.key_score, self.key_test, strict=True)
                if np.isfinite(s)
            },
        }


def state_log10p(shares: StateShares) -> FloatArray:
    """log10 of the one-sided p-value of every state count (d, 3): Phi(share / se)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(shares.stderr > 0, shares.share / shares.stderr, np.nan)
    return log10_normal_cdf(z)


def jump_log10p(newest: StateShares, rest: StateShares) -> FloatArray:
    """log10 of the two-sided p-value of every state's change (d, 3) between the
    newest window and the rest of the longest one."""
    with np.errstate(invalid="ignore"):
        se = np.sqrt(newest.stderr**2 + rest.stderr**2)
        z = np.where(se > 0, np.abs(newest.share - rest.share) / se, np.nan)
    return np.asarray(math.log10(2.0) + log10_normal_cdf(-z), dtype=np.float64)


_LGAMMA = np.frompyfunc(math.lgamma, 1, 1)


def report_log10p(reports: FloatArray, share: float) -> FloatArray:
    """log10 of an upper bound on P(X >= M_j), X ~ Binomial(n, q) with q = ``share`` the
    chance that a genuine report is about a given key and n = sum(M_j) / (q d) the
    reports: pmf(M_j) / (1 - r) beyond the mean (see the module docstring), 0 (p = 1) at
    or below it; NaN without reports. Exact to within the factor 1/(1 - r) in the tail,
    never below p."""
    k = np.asarray(reports, dtype=np.float64)
    n = float(np.rint(k.sum() / (share * k.size))) if k.size and share > 0 else 0.0
    if n <= 0 or share >= 1:  # no reports, or every report is about every key
        return np.full(k.shape, np.nan)
    out = np.zeros(k.shape)
    q = share
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (n - k) * q / ((k + 1) * (1 - q))
    tail = (k > n * q) & (ratio < 1) & (k <= n)
    kt = k[tail]
    log_pmf = (
        math.lgamma(n + 1)
        - np.asarray(_LGAMMA(kt + 1), dtype=np.float64)
        - np.asarray(_LGAMMA(n - kt + 1), dtype=np.float64)
        + kt * math.log(q)
        + (n - kt) * math.log1p(-q)
    )
    out[tail] = np.minimum(0.0, (log_pmf - np.log1p(-ratio[tail])) / _LN10)
    return out


def population_log10p(shares: StateShares) -> dict[str, float]:
    """log10 of the one-sided p-value of every population count (NaN: not testable)."""
    out: dict[str, float] = {}
    for name, (estimate, se) in shares.population.items():
        z = estimate / se if se > 0 and math.isfinite(estimate) else math.nan
        out[name] = float(log10_normal_cdf(np.array([z]))[0])
    return out


def _score(log10p: float, tests: int) -> float:
    """-log10(min(1, K p)) within [0, MAX_SCORE]."""
    if not math.isfinite(log10p):
        return MAX_SCORE if log10p == -math.inf else 0.0
    return min(MAX_SCORE, max(0.0, -(log10p + math.log10(tests))))


def score(
    shares: StateShares, rest: StateShares | None = None, newest: StateShares | None = None
) -> PoisoningReport:
    """Combine the tests of one window's ``shares`` (and, given the rest of the longest
    window and the newest window, the jump test) into a :class:`PoisoningReport`."""
    columns = {f"state_{s}": state_log10p(shares)[:, i] for i, s in enumerate(STATE_NAMES)}
    if shares.reports is not None:
        columns["reports"] = report_log10p(shares.reports, shares.report_share)
    jump_tests = 0
    if rest is not None and newest is not None:
        jumps = jump_log10p(newest, rest)
        jump_tests = int(np.sum(~np.isnan(jumps)))
        columns.update({f"jump_{s}": jumps[:, i] for i, s in enumerate(STATE_NAMES)})
    names = list(columns)
    table = np.stack([columns[c] for c in names], axis=1)  # (d, T)
    population = {k: v for k, v in population_log10p(shares).items() if math.isfinite(v) or v == -math.inf}
    tests = int(np.sum(~np.isnan(table))) + len(population)
    if tests == 0:
        return PoisoningReport(np.full(shares.d, np.nan), ("",) * shares.d, 0.0, "", 0)
    filled = np.where(np.isnan(table), np.inf, table)
    best = np.argmin(filled, axis=1)
    lowest = filled[np.arange(shares.d), best]
    has = np.isfinite(lowest) | (lowest == -np.inf)
    key_score = np.array([_score(p, tests) if h else np.nan for p, h in zip(lowest, has, strict=True)])
    key_test = tuple(names[b] if h else "" for b, h in zip(best, has, strict=True))
    if population:
        worst = min(population, key=lambda k: population[k])
        pop_score, pop_test = _score(population[worst], tests), worst
    else:
        pop_score, pop_test = 0.0, ""
    return PoisoningReport(key_score, key_test, pop_score, pop_test, tests, jump_tests)


def poisoning_reports(
    mechanism: Mechanism, windows: dict[str, Stats], newest: str | None, longest: str | None
) -> dict[str, PoisoningReport]:
    """The report of every window of a refit ({} for a mechanism without a basis).

    ``newest`` and ``longest`` name the shortest finite window and the longest window:
    the newest window's report includes the jump test against the longest window's
    other reports (when both are given, differ and each side has reports)."""
    if not covers(mechanism):
        return {}
    shares = {name: state_shares(mechanism, stats) for name, stats in windows.items()}
    out: dict[str, PoisoningReport] = {}
    for name, window_shares in shares.items():
        rest: StateShares | None = None
        if name == newest and longest is not None and longest != newest and longest in windows:
            recent, whole = windows[name], windows[longest]
            if recent.exact and whole.exact and 0 < recent.n_reports < whole.n_reports:
                rest = state_shares(mechanism, whole.copy().subtract(recent))
        out[name] = score(window_shares, rest, window_shares if rest is not None else None)
    return out


def false_alarm_rate(expected: StateShares, threshold: float = ALERT_SCORE, jumps: int = 0) -> float:
    """The probability that a genuine population whose state shares are ``expected``
    (with the standard errors of its snapshot) gives some key or population count a
    score >= ``threshold`` in one refit.

    A count with mean mu and standard error se alarms when z <= -c, c the z that the
    threshold and the K tests imply: probability Phi(-c - mu/se). Tests whose statistic
    has the same law in every genuine population alarm with probability 10^-s / K at
    most each: the report counts of key sampling (their bound on p makes it less) and
    the ``jumps`` two-sided jump tests of a stationary population. The rate treats the
    tests as independent: they are across keys; within a key the states are
    correlated, which makes the true rate a little smaller."""
    mu = np.concatenate(
        [expected.share.ravel(), np.array([v for v, _ in expected.population.values()], dtype=np.float64)]
    )
    se = np.concatenate(
        [expected.stderr.ravel(), np.array([s for _, s in expected.population.values()], dtype=np.float64)]
    )
    usable = np.isfinite(mu) & np.isfinite(se) & (se > 0)
    at_null = jumps + (expected.d if expected.reports is not None else 0)
    k = int(usable.sum()) + at_null
    if k == 0:
        return 0.0
    # p <= 10^-threshold / K  <=>  z <= -c (one-sided); two-sided: |z| >= c2
    c = _inverse_lower_tail(10.0 ** (-threshold) / k)
    tails = 10.0 ** log10_normal_cdf(-c - mu[usable] / se[usable])
    null_tail = min(1.0, 10.0 ** (-threshold) / k) if at_null else 0.0
    log_quiet = np.sum(np.log1p(-tails)) + at_null * math.log1p(-null_tail)
    return float(-math.expm1(log_quiet))


def _inverse_lower_tail(p: float) -> float:
    """c with Phi(-c) = p (bisection on :func:`log10_normal_cdf`; p in (0, 1/2])."""
    lo, hi, target = 0.0, 40.0, math.log10(p)
    for _ in range(200):
        mid = (lo + hi) / 2
        if float(log10_normal_cdf(np.array([-mid]))[0]) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
