"""The exact, non-private answer of a conditional query on a population (Sun et al. 2019, Def. 2).

Computed from the users' pairs alone, independently of the cell machinery of
:mod:`~kvldp.common.estimation.conditional.cells` and :mod:`~kvldp.common.estimation.conditional.answer`, so
that it can serve as the ground truth the estimated answers are scored against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.estimation.conditional.cells import InvalidQuery
from kvldp.common.estimation.conditional.query import ConditionalQuery


def conditional_truth(users: KVData, query: ConditionalQuery) -> tuple[float, float]:
    """The non-private f(k|C) and m(k|C) of a population (Sun et al. 2019, Def. 2), NaN when undefined.

    Computed directly from the users' pairs, independently of any cell machinery, so it
    can serve as ground truth for the conditional metrics (docs/mechanisms.md, *Conditional metrics*).
    """
    return conditional_truths(users, [query])[0]


def conditional_truths(users: KVData, queries: Sequence[ConditionalQuery]) -> list[tuple[float, float]]:
    """:func:`conditional_truth` of every query, from one dense view of the users' pairs."""
    for query in queries:
        if query.d != users.d:
            raise InvalidQuery(f"query over {query.d} keys cannot be evaluated on data with d={users.d}")
    present, values = users.to_dense()
    out = []
    for query in queries:
        meets = np.ones(users.n_users, dtype=bool)
        for key, required in query.condition.pairs():
            meets &= present[:, key] == bool(required)
        holders = meets & present[:, query.target]
        n_meets = int(meets.sum())
        n_holders = int(holders.sum())
        frequency = n_holders / n_meets if n_meets else math.nan
        mean = float(values[holders, query.target].mean()) if n_holders else math.nan
        out.append((frequency, mean))
    return out
