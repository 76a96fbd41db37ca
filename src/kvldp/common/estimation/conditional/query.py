"""The query model: conditions in the (alpha, beta) encoding and conditional queries.

:class:`Condition` is the (alpha, beta) encoding of Sun et al. 2019, Def. 3 (order-free, key 1 = wire
key 0 leftmost); :class:`ConditionalQuery` adds the target key k and knows the product
sets (:mod:`~kvldp.common.estimation.conditional.cells`) whose counts answer f(k|C) and m(k|C)
(docs/mechanisms.md, *Counting operators*). Reading a query from text is :mod:`~kvldp.common.estimation.conditional.parse`; estimating
its answer is :mod:`~kvldp.common.estimation.conditional.answer`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kvldp.common.estimation.conditional.cells import (
    ABSENT,
    ALL_STATES,
    NEG,
    POS,
    PRESENT_STATES,
    InvalidQuery,
    ProductSet,
)
from kvldp.common.typed_fields import Refusal, integer


def _label(key: int, names: Sequence[str] | None) -> str:
    return repr(names[key]) if names is not None and 0 <= key < len(names) else f"key {key}"


def _unknown_key(d: int) -> Refusal:
    return lambda key: InvalidQuery(f"unknown key {key!r} in a condition (keys are 0..{d - 1})")


def _unknown_target(d: int) -> Refusal:
    return lambda key: InvalidQuery(f"unknown target key {key!r} (keys are 0..{d - 1})")


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
    """The (alpha, beta) encoding of a condition list (Sun et al. 2019, Def. 3; docs/mechanisms.md,
    *Conditional queries*).

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
        for raw, present in items:
            key = integer(raw, _unknown_key(d), 0, d - 1)
            if alpha[key]:
                raise InvalidQuery(f"key {_label(key, names)} appears twice in the conditions")
            if present not in (0, 1):
                raise InvalidQuery(
                    f"condition on key {_label(key, names)} must be 0 (absent) or 1 (present), got {present!r}"
                )
            alpha[key] = 1
            beta[key] = int(present)
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
        target = integer(self.target, lambda t: InvalidQuery(f"the target must be a key index, got {t!r}"))
        object.__setattr__(self, "target", integer(target, _unknown_target(d), 0, d - 1))
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
        key = integer(target, _unknown_target(d), 0, d - 1)
        items = list(conditions.items()) if isinstance(conditions, Mapping) else list(conditions)
        if any(k == key for k, _ in items):
            raise InvalidQuery(f"target {_label(key, names)} appears in its own conditions")
        return cls(key, Condition.from_pairs(d, items, names))

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
        set with T_k = {2}, resp. {0}) and F^alpha_beta (None if C is empty): docs/mechanisms.md,
        *Counting operators*. Computed once per query."""
        return _query_sets(self)

    def format(self, names: Sequence[str] | None = None) -> str:
        """``"pepsi | hamburger=1, fries=0"`` (conditions in key order); indices without names."""
        label = names if names is not None else [str(i) for i in range(self.d)]
        text = label[self.target]
        pairs = self.condition.pairs()
        if pairs:
            text += " | " + ", ".join(f"{label[k]}={c}" for k, c in pairs)
        return text


@functools.lru_cache(maxsize=4096)
def _query_sets(query: ConditionalQuery) -> QuerySets:
    numerator = query.condition.with_present(query.target).product_set()
    return QuerySets(
        numerator=numerator,
        positive=numerator.restrict(query.target, (POS,)),
        negative=numerator.restrict(query.target, (NEG,)),
        denominator=None if query.condition.is_empty else query.condition.product_set(),
    )
