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

A dense model may also say how its columns relate to the report's randomized output
(:class:`PatternLayout`, :class:`SymbolLayout`), so that the model of a channel followed by
an instantaneous randomization (:mod:`kvldp.common.channel.instantaneous`) is computed from it
exactly, without trusting the composed channel's own parameters (:func:`compose_model`).

The models live apart from :mod:`kvldp.common.guarantees.privacy_audit`, which checks them, because every
mechanism builds one: mechanisms depend on this module, the audit depends on mechanisms.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.kvdata import KVData
from kvldp.common.errors import KvldpError

FloatArray = NDArray[np.float64]


class AuditTooLarge(KvldpError):
    """The exact model would enumerate too many inputs or outputs for this configuration."""


@dataclass(frozen=True)
class PatternLayout:
    """Columns of a dense model over a randomized output of ``coords`` coordinates, each over
    ``size`` values: ``blocks`` blocks (one per value of the public fields, or one) of all
    size^coords patterns in row-major order, one axis per coordinate (in any order of its
    values), then ``tail`` columns each holding whole blocks (outputs merged over the
    public values no input tells apart)."""

    blocks: int
    coords: int
    size: int
    tail: int = 0


@dataclass(frozen=True)
class SymbolLayout:
    """Columns of a dense model over one randomized symbol, each a set of (public value,
    symbol) cells, possibly merged: ``weights[c]`` is the sum over the cells of column c of
    the public value's probability (the number of symbols it holds, without public
    fields). Columns that are no symbol at all (never emitted) weigh 0."""

    weights: FloatArray


Layout = PatternLayout | SymbolLayout


@dataclass(frozen=True)
class DenseModel:
    """Exact Pr[z | x]: ``probs`` is (inputs, outputs); rows sum to one. ``layout`` says how
    the outputs relate to the randomized output (None: not described)."""

    probs: FloatArray
    inputs: tuple[str, ...]
    layout: Layout | None = None


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


def compose_model(model: OutputModel, size: int, contrast: float) -> OutputModel:
    """The exact model of ``model``'s channel followed by a randomizer that keeps each
    coordinate of the randomized output (``size`` values) with probability
    p1 = contrast + q1 and moves it to each other value with q1 = (1 - contrast)/size.

    A product model's coordinates are the randomized coordinates: each factor's symbols
    are mapped by the randomizer's matrix. A dense model needs its layout: a
    :class:`PatternLayout` is mapped along every coordinate axis of every block (a tail
    column holds whole blocks, which any re-randomization leaves whole); a
    :class:`SymbolLayout` column c becomes q1 weights[c] + contrast P[c], exact for any
    merging since Pr'[(r, y')] = q1 Pr[r] + contrast Pr[(r, y')] for every public value r.
    """
    other = (1.0 - contrast) / size
    if isinstance(model, ProductModel):
        if model.factors.shape[-1] != size:
            raise ValueError(
                f"a product model over {model.factors.shape[-1]} symbols, randomized over {size}"
            )
        factors = other * model.factors.sum(axis=-1, keepdims=True) + contrast * model.factors
        return ProductModel(np.asarray(factors, dtype=np.float64), model.inputs)
    layout = model.layout
    if isinstance(layout, SymbolLayout):
        probs = other * layout.weights[None, :] + contrast * model.probs
        return DenseModel(np.asarray(probs, dtype=np.float64), model.inputs, layout)
    if not isinstance(layout, PatternLayout) or layout.size != size:
        raise ValueError(f"the model's layout {layout!r} does not describe an output over {size} values")
    head = layout.blocks * size**layout.coords
    cube = model.probs[:, :head].reshape(model.probs.shape[0], layout.blocks, *([size] * layout.coords))
    for axis in range(2, 2 + layout.coords):
        cube = other * cube.sum(axis=axis, keepdims=True) + contrast * cube
    probs = np.concatenate([cube.reshape(model.probs.shape[0], head), model.probs[:, head:]], axis=1)
    return DenseModel(np.asarray(probs, dtype=np.float64), model.inputs, layout)
