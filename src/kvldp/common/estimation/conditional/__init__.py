"""Conditional key-value queries over users' joint key states (docs/mechanisms.md, *Conditional analysis*).

A conditional query asks, among the users that do (1) or do not (0) hold some keys,
how many also hold a target key k (conditional frequency f(k|C)) and what their mean
value of k is (conditional mean m(k|C)). Every answer is a ratio of *cell-set counts*:
the number of users whose joint state (s_1, ..., s_d), s_i the state code (docs/mechanisms.md, *Primitives*)
(0 = <1,-1>, 1 = absent, 2 = <1,+1>), lies in a product set T_1 x ... x T_d.

This package holds everything about such queries that does not depend on how a
mechanism estimates those counts, so that IOH (3^d-bit one-hot reports) and the
O(log)-communication Hadamard mechanism answer the same queries through the same code.
Its modules, each one layer of that code, and this file their public API:

* :mod:`~kvldp.common.estimation.conditional.cells` — the state codes, users' joint states over
  the base-3 index (key 1 the most significant digit), and :class:`ProductSet`, the
  product-set form of the counting operators (docs/mechanisms.md, *Counting operators*);
* :mod:`~kvldp.common.estimation.conditional.query` — :class:`Condition`, the (alpha, beta)
  encoding of Sun et al. 2019, Def. 3, and :class:`ConditionalQuery`, which adds the target key;
* :mod:`~kvldp.common.estimation.conditional.parse` — :func:`parse_query` reads
  ``"pepsi | hamburger=1, fries=0"`` given the key names;
* :mod:`~kvldp.common.estimation.conditional.answer` — :class:`CellSumOracle`, the one thing a
  mechanism implements, and :func:`answer_queries`, which turns its counts into f(k|C)
  and m(k|C) with delta-method standard errors;
* :mod:`~kvldp.common.estimation.conditional.truth` — :func:`conditional_truth`, the exact
  non-private answer on a population (:func:`conditional_truths` for many queries).
"""

from kvldp.common.estimation.conditional.answer import (
    CellSumOracle,
    CellSums,
    ConditionalEstimate,
    answer_queries,
)
from kvldp.common.estimation.conditional.cells import (
    ABSENT,
    ALL_STATES,
    NEG,
    POS,
    PRESENT_STATES,
    InvalidQuery,
    ProductSet,
    expected_joint_counts,
    joint_index,
    joint_state_probabilities,
    joint_states,
    state_probabilities,
)
from kvldp.common.estimation.conditional.parse import RESERVED, parse_query
from kvldp.common.estimation.conditional.query import Condition, ConditionalQuery, QuerySets
from kvldp.common.estimation.conditional.truth import conditional_truth, conditional_truths

__all__ = [
    "ABSENT",
    "ALL_STATES",
    "NEG",
    "POS",
    "PRESENT_STATES",
    "RESERVED",
    "CellSumOracle",
    "CellSums",
    "Condition",
    "ConditionalEstimate",
    "ConditionalQuery",
    "InvalidQuery",
    "ProductSet",
    "QuerySets",
    "answer_queries",
    "conditional_truth",
    "conditional_truths",
    "expected_joint_counts",
    "joint_index",
    "joint_state_probabilities",
    "joint_states",
    "parse_query",
    "state_probabilities",
]
