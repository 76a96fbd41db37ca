"""Shared pieces of the PCKV tests: the two mechanisms and a population built from groups.

Imported by :mod:`tests.test_pckv` (client, statistics, audit) and
:mod:`tests.test_pckv_estimate` (estimators and variances); the budget formulas of
:mod:`tests.test_pckv_budget` need neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvldp.common.data.kvdata import KVData
from kvldp.common.mechanisms.pckv import PCKV, PCKVGRR, PCKVUE

MECHS: tuple[type[PCKV], ...] = (PCKVUE, PCKVGRR)


def population(d: int, groups: Sequence[tuple[int, Mapping[int, float]]]) -> KVData:
    """``count`` users holding ``pairs`` for every (count, pairs) group."""
    users: list[Mapping[int, float]] = []
    for count, pairs in groups:
        users.extend([pairs] * count)
    return KVData.from_pairs(d, users)
