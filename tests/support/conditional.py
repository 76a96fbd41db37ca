"""Shared data of the conditional-query and IOH tests: the worked example of docs/mechanisms.md,
*Conditional worked example* (Sun et al. 2019, Table III: keys Hamburger, Fries, Pepsi), its rows of queries, cells and true values, and a
correlated synthetic population with the exact probability of each joint-state set.

Imported by :mod:`tests.test_conditional` (the query machinery) and :mod:`tests.test_ioh`
(the IOH mechanism).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.estimation.conditional import ProductSet

NAMES = ("hamburger", "fries", "pepsi")
H, F, P = 0, 1, 2
#: Sun et al. 2019's Table III after discretisation (wire keys 0, 1, 2 = Hamburger, Fries, Pepsi)
TABLE_III = [{H: 1.0, P: -1.0}, {H: -1.0, F: 1.0, P: 1.0}, {F: -1.0, P: -1.0}]
ONE_HOT_SUM = np.bincount([21, 8, 9], minlength=27).astype(np.float64)


def table_users() -> KVData:
    return KVData.from_pairs(3, TABLE_III)


def population(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Correlated keys (shared latent z): presence 0.5-0.8, values clip(N(mu, 0.2^2)) also tied to z."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    logits = np.array([0.2, 0.7, 1.2])[None, :] + 1.0 * z[:, None]
    present = rng.random((n, 3)) < 1.0 / (1.0 + np.exp(-logits))
    noise = 0.6 * z[:, None] + 0.8 * rng.standard_normal((n, 3))
    values = np.clip(np.array([0.4, -0.3, 0.1])[None, :] + 0.2 * noise, -1.0, 1.0)
    return present, np.where(present, values, 0.0)


def membership(present: np.ndarray, values: np.ndarray, sets: Sequence[ProductSet]) -> np.ndarray:
    """(users, sets): probability that a user's Disc'd joint state lies in each set, from
    the per-key state probabilities (independent of the library's Kronecker code)."""
    probs = np.stack(
        [
            np.where(present, (1 - values) / 2, 0.0),
            np.where(present, 0.0, 1.0),
            np.where(present, (1 + values) / 2, 0.0),
        ],
        axis=2,
    )  # (n, d, 3)
    out = np.ones((present.shape[0], len(sets)))
    for j, s in enumerate(sets):
        for key, states in enumerate(s.allowed):
            out[:, j] *= probs[:, key, list(states)].sum(axis=1)
    return out


ROWS = [
    # query, (alpha, beta) -> (alpha', beta'), numerator cells, denominator cells or None, f, m
    (
        "hamburger | pepsi=1",
        ("001", "001"),
        ("101", "101"),
        [0, 2, 3, 5, 6, 8, 18, 20, 21, 23, 24, 26],
        [0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23, 24, 26],
        2 / 3,
        0.0,
    ),
    (
        "fries | hamburger=1",
        ("100", "100"),
        ("110", "110"),
        [0, 1, 2, 6, 7, 8, 18, 19, 20, 24, 25, 26],
        None,
        0.5,
        1.0,
    ),
    (
        "pepsi | fries=1",
        ("010", "010"),
        ("011", "011"),
        [0, 2, 6, 8, 9, 11, 15, 17, 18, 20, 24, 26],
        None,
        1.0,
        0.0,
    ),
    ("pepsi | hamburger=1, fries=0", ("110", "100"), ("111", "101"), [3, 5, 21, 23], None, 1.0, -1.0),
]
