"""Conditional key-value queries over users' joint key states (spec §11.2, §11.5, §11.7).

A conditional query asks, among the users that do (1) or do not (0) hold some keys,
how many also hold a target key k (conditional frequency f(k|C)) and what their mean
value of k is (conditional mean m(k|C)). Every answer is a ratio of *cell-set counts*:
the number of users whose joint state (s_1, ..., s_d), s_i the state code of §0.2
(0 = <1,-1>, 1 = absent, 2 = <1,+1>), lies in a product set T_1 x ... x T_d.

This module holds everything about such queries that does not depend on how a
mechanism estimates those counts, so that IOH (3^d-bit one-hot reports) and the later
O(log)-communication proposals of §12 answer the same queries through the same code:

* :class:`Condition` is the (alpha, beta) encoding of D0 Def.3 (order-free, key 1 =
  wire key 0 leftmost), :class:`ConditionalQuery` adds the target key, and
  :func:`parse_query` reads ``"pepsi | hamburger=1, fries=0"`` given the key names;
* :class:`ProductSet` is the product-set form of the counting operators (§11.5) and
  enumerates its cells over the base-3 index with key 1 the most significant digit;
* :class:`CellSumOracle` is the one thing a mechanism implements: estimated counts of
  groups of product sets with their covariance matrix *within* each group. A full
  covariance (not "disjoint sets are independent") keeps the ratio algebra valid for
  mechanisms whose cell estimates are correlated, such as Hadamard coefficients;
* :func:`answer_queries` turns those counts into f(k|C) = F^{a'}_{b'} / F^a_b and
  m(k|C) = (S+ - S-) / (S+ + S-) with delta-method standard errors and the spec's
  corrections (NaN for a denominator <= 0, clipping, the known n for an empty condition).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from kvldp.common.errors import KvldpError
from kvldp.common.kvdata import KVData
from kvldp.common.primitives import FloatArray, IntArray, disc
from kvldp.common.stats import Stats

#: state codes of spec §0.2 (s = k v* + 1); they are the base-3 digits of a joint state
NEG, ABSENT, POS = 0, 1, 2
ALL_STATES = (NEG, ABSENT, POS)
PRESENT_STATES = (NEG, POS)
#: characters that delimit a query string and therefore cannot appear in a key name
RESERVED = "|,="
#: joint-state probabilities evaluated per block of users (bounds memory at n x 3^d floats)
_PROB_CHUNK_CELLS = 1 << 21


class InvalidQuery(KvldpError):
    """A conditional query is malformed: unknown or repeated key, the target among its own
    conditions, a value other than 0/1, or an (alpha, beta) encoding with beta not inside alpha."""


# --------------------------------------------------------------------------- joint states
def joint_states(users: KVData, rng: np.random.Generator) -> IntArray:
    """(n, d) state codes of every user: 1 where a key is absent, and for each held key
    Disc applied independently to its value (0 for -1, 2 for +1), as the client of §11.3."""
    states = np.full((users.n_users, users.d), ABSENT, dtype=np.int64)
    rows = np.repeat(np.arange(users.n_users, dtype=np.int64), users.sizes)
    states[rows, users.keys] = np.where(disc(users.values, rng) > 0, POS, NEG)
    return states


def joint_index(states: IntArray) -> IntArray:
    """Base-3 index I = sum_i 3^(d-i) s_i of joint states (..., d): wire key 0 (the paper's
    key 1) is the most significant digit, so D0's concatenated digits read as the index."""
    d = states.shape[-1]
    weights = 3 ** np.arange(d - 1, -1, -1, dtype=np.int64)
    return np.asarray(states.astype(np.int64) @ weights, dtype=np.int64)


def state_probabilities(users: KVData) -> FloatArray:
    """(n, d, 3) probability of each state code per user and key: an absent key is state 1
    for sure, a held value v is 2 with probability (1+v)/2 and 0 otherwise (Disc)."""
    present, values = users.to_dense()
    probs = np.zeros((users.n_users, users.d, 3))
    probs[:, :, NEG] = np.where(present, (1.0 - values) / 2.0, 0.0)
    probs[:, :, ABSENT] = np.where(present, 0.0, 1.0)
    probs[:, :, POS] = np.where(present, (1.0 + values) / 2.0, 0.0)
    return probs


def joint_state_probabilities(users: KVData) -> FloatArray:
    """(n, 3^d) distribution of each user's joint state over the base-3 index.

    Disc acts independently per key, so a user's joint distribution is the Kronecker
    product of its per-key state distributions, with key 1 the slowest-varying factor.
    """
    probs = state_probabilities(users)
    joint = probs[:, 0, :]
    for key in range(1, users.d):
        joint = (joint[:, :, None] * probs[:, key, None, :]).reshape(users.n_users, -1)
    return np.asarray(joint, dtype=np.float64)


def expected_joint_counts(users: KVData) -> FloatArray:
    """E[A]: the expected number of users in each joint state (3^d,), in blocks of users."""
    total = np.zeros(3**users.d)
    for block in users.chunks(max(1, _PROB_CHUNK_CELLS // 3**users.d)):
        total += joint_state_probabilities(block).sum(axis=0)
    return total


# --------------------------------------------------------------------------- product sets
@dataclass(frozen=True)
class ProductSet:
    """T_1 x ... x T_d: per key (wire order) the allowed state codes, a non-empty subset of
    {0, 1, 2}. The counting operators of D0 Eq.10-14 are all of this form (§11.5)."""

    allowed: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.allowed:
            raise InvalidQuery("a product set needs at least one key")
        normalised = []
        for key, states in enumerate(self.allowed):
            codes = tuple(sorted({int(s) for s in states}))
            if not codes or any(s not in ALL_STATES for s in codes):
                raise InvalidQuery(
                    f"key {key} of a product set allows {states!r}; use a non-empty subset of {{0,1,2}}"
                )
            normalised.append(codes)
        object.__setattr__(self, "allowed", tuple(normalised))

    @classmethod
    def everything(cls, d: int) -> ProductSet:
        """All 3^d joint states."""
        return cls(tuple(ALL_STATES for _ in range(d)))

    @property
    def d(self) -> int:
        return len(self.allowed)

    @property
    def size(self) -> int:
        """|T| = prod_i |T_i|, the number of cells the set sums."""
        return math.prod(len(states) for states in self.allowed)

    def cells(self) -> IntArray:
        """The base-3 indices of the set's cells, ascending (key 1 is the leading digit)."""
        index = np.zeros(1, dtype=np.int64)
        for states in self.allowed:
            index = (index[:, None] * 3 + np.asarray(states, dtype=np.int64)[None, :]).ravel()
        return index

    def restrict(self, key: int, states: Iterable[int]) -> ProductSet:
        """The same set with key ``key`` limited to ``states``."""
        allowed = list(self.allowed)
        allowed[key] = tuple(states)
        return ProductSet(tuple(allowed))

    def intersection(self, other: ProductSet) -> ProductSet | None:
        """The product of per-key intersections, or None when the sets are disjoint."""
        if other.d != self.d:
            raise InvalidQuery(f"product sets over {self.d} and {other.d} keys cannot be intersected")
        common = tuple(
            tuple(sorted(set(a) & set(b))) for a, b in zip(self.allowed, other.allowed, strict=True)
        )
        if any(not states for states in common):
            return None
        return ProductSet(common)


# --------------------------------------------------------------------------- conditions and queries
def _label(key: int, names: Sequence[str] | None) -> str:
    return repr(names[key]) if names is not None and 0 <= key < len(names) else f"key {key}"


def _bits(value: str | Sequence[int], what: str) -> tuple[int, ...]:
    if isinstance(value, str):
        text = value.strip()
        if not text or any(ch not in "01" for ch in text):
            raise InvalidQuery(f"{what}={value!r} must be a string of 0s and 1s (key 1 leftmost)")
        return tuple(int(ch) for ch in text)
    bits = tuple(int(b) for b in value)
    if not bits or any(b not in (0, 1) for b in bits):
        raise InvalidQuery(f"{what}={value!r} must be a non-empty sequence of 0s and 1s")
    return bits


@dataclass(frozen=True)
class Condition:
    """The (alpha, beta) encoding of a condition list (D0 Def.3, spec §11.2).

    alpha_i = 1 iff key i is conditioned on; beta_i is its required existence (1 present,
    0 absent) and 0 wherever alpha_i = 0, i.e. beta must lie inside alpha bitwise. The
    encoding is order-free: conditions given in any order produce the same value.
    """

    alpha: tuple[int, ...]
    beta: tuple[int, ...]

    def __post_init__(self) -> None:
        alpha = _bits(self.alpha, "alpha")
        beta = _bits(self.beta, "beta")
        if len(alpha) != len(beta):
            raise InvalidQuery(
                f"alpha and beta must have one bit per key, got {len(alpha)} and {len(beta)} bits"
            )
        outside = [i for i, (a, b) in enumerate(zip(alpha, beta, strict=True)) if b and not a]
        if outside:
            raise InvalidQuery(
                f"beta={''.join(map(str, beta))} is not a subset of alpha={''.join(map(str, alpha))}: "
                f"key {outside[0] + 1} (1-based) is required present but not conditioned on"
            )
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "beta", beta)

    @classmethod
    def from_bits(cls, alpha: str | Sequence[int], beta: str | Sequence[int]) -> Condition:
        """From the paper's strings, e.g. ``Condition.from_bits("110", "100")``."""
        return cls(_bits(alpha, "alpha"), _bits(beta, "beta"))

    @classmethod
    def none(cls, d: int) -> Condition:
        """The empty condition (every user qualifies)."""
        return cls((0,) * d, (0,) * d)

    @classmethod
    def from_pairs(
        cls,
        d: int,
        pairs: Mapping[int, int] | Iterable[tuple[int, int]],
        names: Sequence[str] | None = None,
    ) -> Condition:
        """From (key, present) pairs with wire key indices; ``names`` only improve messages."""
        items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
        alpha = [0] * d
        beta = [0] * d
        for key, present in items:
            if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or not 0 <= int(key) < d:
                raise InvalidQuery(f"unknown key {key!r} in a condition (keys are 0..{d - 1})")
            if alpha[int(key)]:
                raise InvalidQuery(f"key {_label(int(key), names)} appears twice in the conditions")
            if present not in (0, 1):
                raise InvalidQuery(
                    f"condition on key {_label(int(key), names)} must be 0 (absent) or 1 (present), got {present!r}"
                )
            alpha[int(key)] = 1
            beta[int(key)] = int(present)
        return cls(tuple(alpha), tuple(beta))

    @property
    def d(self) -> int:
        return len(self.alpha)

    @property
    def is_empty(self) -> bool:
        return not any(self.alpha)

    def pairs(self) -> tuple[tuple[int, int], ...]:
        """(key, present) for every conditioned key, in key order."""
        return tuple((i, b) for i, (a, b) in enumerate(zip(self.alpha, self.beta, strict=True)) if a)

    def encoding(self) -> tuple[str, str]:
        """(alpha, beta) as the paper's bit strings, key 1 leftmost."""
        return "".join(map(str, self.alpha)), "".join(map(str, self.beta))

    def with_present(self, key: int) -> Condition:
        """(alpha v e_k, beta v e_k): the same condition plus "key k present"."""
        alpha = list(self.alpha)
        beta = list(self.beta)
        alpha[key] = beta[key] = 1
        return Condition(tuple(alpha), tuple(beta))

    def product_set(self) -> ProductSet:
        """The cells of F^alpha_beta: T_i = {0,1,2} unconditioned, {0,2} present, {1} absent."""
        return ProductSet(
            tuple(
                ALL_STATES if not a else (PRESENT_STATES if b else (ABSENT,))
                for a, b in zip(self.alpha, self.beta, strict=True)
            )
        )

    def __str__(self) -> str:
        alpha, beta = self.encoding()
        return f"({alpha}, {beta})"


class QuerySets(NamedTuple):
    """The product sets one query needs. ``denominator`` is None for an empty condition,
    whose denominator is the known number of reports rather than an estimate."""

    numerator: ProductSet
    positive: ProductSet
    negative: ProductSet
    denominator: ProductSet | None

    def group(self) -> list[ProductSet]:
        sets = [self.numerator, self.positive, self.negative]
        return sets if self.denominator is None else [*sets, self.denominator]


@dataclass(frozen=True)
class ConditionalQuery:
    """Target key k (wire index) under a :class:`Condition` C that does not mention k."""

    target: int
    condition: Condition

    def __post_init__(self) -> None:
        d = self.condition.d
        if isinstance(self.target, bool) or not isinstance(self.target, (int, np.integer)):
            raise InvalidQuery(f"the target must be a key index, got {self.target!r}")
        if not 0 <= int(self.target) < d:
            raise InvalidQuery(f"unknown target key {self.target!r} (keys are 0..{d - 1})")
        object.__setattr__(self, "target", int(self.target))
        if self.condition.alpha[self.target]:
            raise InvalidQuery(f"target key {self.target} appears in its own conditions {self.condition}")

    @classmethod
    def build(
        cls,
        d: int,
        target: int,
        conditions: Mapping[int, int] | Iterable[tuple[int, int]] = (),
        names: Sequence[str] | None = None,
    ) -> ConditionalQuery:
        """From wire key indices: ``build(3, 2, {0: 1, 1: 0})`` is Pepsi | Hamburger=1, Fries=0."""
        if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or not 0 <= int(target) < d:
            raise InvalidQuery(f"unknown target key {target!r} (keys are 0..{d - 1})")
        items = list(conditions.items()) if isinstance(conditions, Mapping) else list(conditions)
        if any(key == target for key, _ in items):
            raise InvalidQuery(f"target {_label(int(target), names)} appears in its own conditions")
        return cls(int(target), Condition.from_pairs(d, items, names))

    @classmethod
    def from_encoding(
        cls, target: int, alpha: str | Sequence[int], beta: str | Sequence[int]
    ) -> ConditionalQuery:
        """From the (alpha, beta) encoding: ``from_encoding(0, "001", "001")`` is f(key 1 | key 3 = 1)."""
        return cls(target, Condition.from_bits(alpha, beta))

    @property
    def d(self) -> int:
        return self.condition.d

    def sets(self) -> QuerySets:
        """Product sets of F^{a'}_{b'} (a' = alpha v e_k, b' = beta v e_k), S+ and S- (that
        set with T_k = {2}, resp. {0}) and F^alpha_beta (None if C is empty), §11.5."""
        numerator = self.condition.with_present(self.target).product_set()
        return QuerySets(
            numerator=numerator,
            positive=numerator.restrict(self.target, (POS,)),
            negative=numerator.restrict(self.target, (NEG,)),
            denominator=None if self.condition.is_empty else self.condition.product_set(),
        )

    def format(self, names: Sequence[str] | None = None) -> str:
        """``"pepsi | hamburger=1, fries=0"`` (conditions in key order); indices without names."""
        label = names if names is not None else [str(i) for i in range(self.d)]
        text = label[self.target]
        pairs = self.condition.pairs()
        if pairs:
            text += " | " + ", ".join(f"{label[k]}={c}" for k, c in pairs)
        return text


def _name_index(names: Sequence[str]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, raw in enumerate(names):
        name = raw.strip()
        if not name or any(ch in name for ch in RESERVED):
            raise InvalidQuery(
                f"key name {raw!r} cannot be used in queries (empty or containing one of {RESERVED!r})"
            )
        if name in index:
            raise InvalidQuery(f"key name {name!r} is listed twice")
        index[name] = i
    return index


def parse_query(text: str, names: Sequence[str]) -> ConditionalQuery:
    """Parse ``"target | key=1, key=0"`` over the key ``names`` (wire order).

    ``"target"`` alone is the unconditional query. Conditions may also use the grouped
    notation of D0 Def.2 and D3, ``"target | k1, k2 = 1, 0"``. Whitespace is ignored
    around names and values; values are 0 (absent) or 1 (present). Every error names
    the offending token.
    """
    index = _name_index(names)

    def lookup(token: str) -> int:
        name = token.strip()
        if name not in index:
            known = ", ".join(repr(n.strip()) for n in names)
            raise InvalidQuery(f"unknown key {name!r} in query {text!r} (keys: {known})")
        return index[name]

    head, bar, tail = text.partition("|")
    if "|" in tail:
        raise InvalidQuery(f"query {text!r} has more than one '|'")
    if not head.strip():
        raise InvalidQuery(f"query {text!r} lacks a target key before '|'")
    target = lookup(head)
    items: list[tuple[str, str]] = []
    if bar:
        body = tail.strip()
        if not body:
            raise InvalidQuery(f"query {text!r} has no condition after '|'")
        left, eq, right = body.partition("=")
        if eq and "=" not in right and "," in left:
            keys = left.split(",")
            values = right.split(",")
            if len(keys) != len(values):
                raise InvalidQuery(f"condition {body!r} lists {len(keys)} keys but {len(values)} values")
            items = list(zip(keys, values, strict=True))
        else:
            for token in body.split(","):
                name, has_eq, value = token.partition("=")
                if not token.strip():
                    raise InvalidQuery(f"query {text!r} has an empty condition (stray ',')")
                if not has_eq:
                    raise InvalidQuery(f"condition {token.strip()!r} in query {text!r} lacks '=1' or '=0'")
                items.append((name, value))
    pairs: list[tuple[int, int]] = []
    for name, value in items:
        if value.strip() not in ("0", "1"):
            raise InvalidQuery(
                f"condition value {value.strip()!r} for key {name.strip()!r} must be 0 (absent) or 1 (present)"
            )
        pairs.append((lookup(name), int(value.strip())))
    return ConditionalQuery.build(len(names), target, pairs, [n.strip() for n in names])


# --------------------------------------------------------------------------- estimation
@dataclass(frozen=True)
class CellSums:
    """Estimated numbers of users in a group of product sets, ``estimates`` (K,), and the
    covariance matrix of those estimates (K, K) given the users' joint states."""

    estimates: FloatArray
    covariance: FloatArray


class CellSumOracle(Protocol):
    """What a joint-state mechanism implements to answer conditional queries."""

    def cell_sums(
        self, stats: Stats, groups: Sequence[Sequence[ProductSet]], estimator: str
    ) -> list[CellSums]:
        """For each group of product sets, the estimated number of users whose joint state
        lies in each set and the covariance of these estimates within the group.

        Counts are of joint *state codes* after the device's Disc; the covariance is given
        those states (Disc's own randomness is accounted for by :func:`answer_queries`).
        Asking for a whole group at once lets a mechanism calibrate its statistics once
        and supply covariances between overlapping or correlated sets.
        """
        ...


@dataclass(frozen=True)
class ConditionalEstimate:
    """f(k|C) and m(k|C) with standard errors; the four counts are kept for diagnostics:
    ``numerator`` F^{a'}_{b'}, ``denominator`` F^a_b (n for an empty C), ``positive`` S+
    and ``negative`` S-. A NaN answer is explained in ``diagnostics``."""

    query: ConditionalQuery
    estimator: str
    frequency: float
    frequency_stderr: float
    mean: float
    mean_stderr: float
    numerator: float
    denominator: float
    positive: float
    negative: float
    n_reports: int
    diagnostics: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """JSON-ready form; NaN becomes None."""

        def num(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        alpha, beta = self.query.condition.encoding()
        return {
            "query": self.query.format(names),
            "target": self.query.target,
            "alpha": alpha,
            "beta": beta,
            "estimator": self.estimator,
            "n_reports": self.n_reports,
            "frequency": num(self.frequency),
            "frequency_stderr": num(self.frequency_stderr),
            "mean": num(self.mean),
            "mean_stderr": num(self.mean_stderr),
            "numerator": num(self.numerator),
            "denominator": num(self.denominator),
            "positive": num(self.positive),
            "negative": num(self.negative),
            "diagnostics": dict(self.diagnostics),
        }


def _answer(
    query: ConditionalQuery, sums: CellSums, n: float, estimator: str, n_reports: int, clip_frequency: bool
) -> ConditionalEstimate:
    est = np.asarray(sums.estimates, dtype=np.float64)
    cov = np.asarray(sums.covariance, dtype=np.float64)
    num, pos, neg = float(est[0]), float(est[1]), float(est[2])
    if query.condition.is_empty:
        den, var_den, cov_nd = n, 0.0, 0.0
    else:
        den, var_den, cov_nd = float(est[3]), float(cov[3, 3]), float(cov[0, 3])
    diag: dict[str, Any] = {}

    # f = Num / Den by the delta method with the Num-Den covariance; for IOH the sets are
    # nested, so this is [V_num (1-r)^2 + r^2 V_rest] / Den^2 of spec §11.7.
    if den > 0:
        raw_f = num / den
        var_f = (float(cov[0, 0]) - 2.0 * raw_f * cov_nd + raw_f * raw_f * var_den) / (den * den)
        frequency = min(max(raw_f, 0.0), 1.0) if clip_frequency else raw_f
        f_se = math.sqrt(max(var_f, 0.0))
        diag["frequency_clipped"] = frequency != raw_f
    else:
        frequency = f_se = math.nan
        diag["frequency_undefined"] = "estimated number of users meeting the condition is <= 0"

    # m = (S+ - S-) / (S+ + S-): gradient (2 S-, -2 S+) / H^2 against the (S+, S-) covariance,
    # plus Disc's variance of the holders' values, at most (1 - m^2) / H (attained when the
    # holders share one value, the assumption PCKV's Theorem 4 and keysampled also make).
    holders = pos + neg
    if holders > 0:
        raw_m = (pos - neg) / holders
        mean = min(max(raw_m, -1.0), 1.0)
        grad = np.array([2.0 * neg, -2.0 * pos]) / (holders * holders)
        var_m = float(grad @ cov[1:3, 1:3] @ grad) + (1.0 - mean * mean) / holders
        m_se = math.sqrt(max(var_m, 0.0))
        diag["mean_clipped"] = mean != raw_m
    else:
        mean = m_se = math.nan
        diag["mean_undefined"] = "estimated number of holders of the target key is <= 0"
    return ConditionalEstimate(
        query=query,
        estimator=estimator,
        frequency=frequency,
        frequency_stderr=f_se,
        mean=mean,
        mean_stderr=m_se,
        numerator=num,
        denominator=den,
        positive=pos,
        negative=neg,
        n_reports=n_reports,
        diagnostics=diag,
    )


def answer_queries(
    oracle: CellSumOracle,
    stats: Stats,
    queries: Sequence[ConditionalQuery],
    estimator: str = "unbiased",
    clip_frequency: bool = True,
) -> list[ConditionalEstimate]:
    """Answer conditional queries from one statistics snapshot (spec §11.5 and §11.7).

    One oracle call serves all queries. ``clip_frequency=False`` keeps the raw (unbiased)
    frequency, which is what per-key estimates report; means are always clipped.
    """
    n = float(stats.arrays["n"][0])
    sums = oracle.cell_sums(stats, [q.sets().group() for q in queries], estimator)
    return [
        _answer(q, s, n, estimator, stats.n_reports, clip_frequency)
        for q, s in zip(queries, sums, strict=True)
    ]


def conditional_truth(users: KVData, query: ConditionalQuery) -> tuple[float, float]:
    """The non-private f(k|C) and m(k|C) of a population (D0 Def.2), NaN when undefined.

    Computed directly from the users' pairs, independently of any cell machinery, so it
    can serve as ground truth for the conditional metrics of spec §14.
    """
    if query.d != users.d:
        raise InvalidQuery(f"query over {query.d} keys cannot be evaluated on data with d={users.d}")
    present, values = users.to_dense()
    meets = np.ones(users.n_users, dtype=bool)
    for key, required in query.condition.pairs():
        meets &= present[:, key] == bool(required)
    holders = meets & present[:, query.target]
    n_meets = int(meets.sum())
    n_holders = int(holders.sum())
    frequency = n_holders / n_meets if n_meets else math.nan
    mean = float(values[holders, query.target].mean()) if n_holders else math.nan
    return frequency, mean
