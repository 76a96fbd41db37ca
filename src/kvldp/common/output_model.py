"""The exact output model a mechanism declares for the privacy audit (docs/mechanisms.md,
*Privacy audit*).

A mechanism describes its exact output distribution for a finite set of inputs, in one
of two shapes:

* :class:`DenseModel` — a matrix Pr[z | x] over enumerated outputs;
* :class:`ProductModel` — independent coordinates (bit vectors, protocol rounds):
  Pr[z | x] = prod_c f[x, c, z_c]. The worst output is then found coordinate by
  coordinate, which is exact and avoids enumerating 2^C outputs. A coordinate may have
  several public *scenarios* (e.g. PrivKVM's published means); the adversary picks the
  worst one for each coordinate.

Why finitely many inputs suffice: a value v in [-1, 1] enters every mechanism only
through Disc(v), so a user's output distribution is a mixture of the distributions of
users whose values are +-1; a ratio of mixtures never exceeds the largest ratio of
their components. The exhaustive input set is therefore every user over the d keys
with values in {-1, +1} (3^d users, :func:`discrete_users`). Mechanisms may also supply a
reduced set justified by symmetry; the test suite checks reduced == exhaustive wherever
both can run.

The models live apart from :mod:`kvldp.common.privacy_audit`, which checks them, because every
mechanism builds one: mechanisms depend on this module, the audit depends on mechanisms.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvldp.common.errors import KvldpError
from kvldp.common.kvdata import KVData

FloatArray = NDArray[np.float64]


class AuditTooLarge(KvldpError):
    """The exact model would enumerate too many inputs or outputs for this configuration."""


@dataclass(frozen=True)
class DenseModel:
    """Exact Pr[z | x]: ``probs`` is (inputs, outputs); rows sum to one."""

    probs: FloatArray
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class ProductModel:
    """Pr[z | x] = prod_c factors[x, c, r_c, z_c] with adversarial public scenario r_c.

    ``factors`` is (inputs, coordinates, scenarios, symbols); for every (x, c, r) the
    symbols sum to one.
    """

    factors: FloatArray
    inputs: tuple[str, ...]


OutputModel = DenseModel | ProductModel


def discrete_users(
    d: int, max_size: int | None = None, signs: tuple[int, ...] = (-1, 1), exact_size: int | None = None
) -> tuple[KVData, tuple[str, ...]]:
    """Every user over ``d`` keys whose values lie in ``signs`` (default {-1, +1}), optionally
    with at most ``max_size`` (or exactly ``exact_size``) pairs, and a readable label for
    each (``{}`` is the user holding nothing)."""
    users: list[dict[int, float]] = []
    labels: list[str] = []
    for states in itertools.product((0, *signs), repeat=d):
        held = {k: float(s) for k, s in enumerate(states) if s != 0}
        if max_size is not None and len(held) > max_size:
            continue
        if exact_size is not None and len(held) != exact_size:
            continue
        users.append(held)
        labels.append("{" + ", ".join(f"{k}:{int(v):+d}" for k, v in held.items()) + "}")
    return KVData.from_pairs(d, users), tuple(labels)
