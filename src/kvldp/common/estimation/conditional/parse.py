"""The query language: ``"pepsi | hamburger=1, fries=0"`` read into a :class:`ConditionalQuery`.

A query string names the target key, then after ``|`` the conditions as ``key=1``
(present) or ``key=0`` (absent), or in the grouped notation ``k1, k2 = 1, 0``; key names
are those of the collection, in wire order. :meth:`ConditionalQuery.format` of
:mod:`~kvldp.common.estimation.conditional.query` writes the same language back.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvldp.common.estimation.conditional.cells import InvalidQuery
from kvldp.common.estimation.conditional.query import ConditionalQuery

#: characters that delimit a query string and therefore cannot appear in a key name
RESERVED = "|,="


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
    notation of Sun et al. 2019 (Def. 2) and Sun, Ping and Ye 2021, ``"target | k1, k2 = 1, 0"``. Whitespace is ignored
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
