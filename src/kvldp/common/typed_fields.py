"""Readers of one typed value from input kvldp does not control, each refusing in the caller's words.

Collection files, ``[privacy]`` tables, wire messages, queries, user data and Kafka
settings all hold values that must be of one type. The checks are the same everywhere
and easy to get subtly wrong: ``bool`` is an ``int`` in Python (``true`` must never pass
as 1), a number must be finite, a numpy integer is an integer. Each reader returns the
value as its type or raises the exception that ``refuse(value)`` builds, so that every
caller keeps its own error class and message (``refuse`` runs only on a refusal);
:func:`expected` builds the usual ``<where>: expected <what>, got <value>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeGuard

import numpy as np

#: builds the caller's exception for a refused value
Refusal = Callable[[Any], Exception]


def expected(error: Callable[[str], Exception], where: str, what: str) -> Refusal:
    """The usual refusal: ``error("<where>: expected <what>, got <value!r>")``."""
    return lambda value: error(f"{where}: expected {what}, got {value!r}")


def is_integer(value: object) -> TypeGuard[int | np.integer[Any]]:
    """An ``int`` or a numpy integer, never a ``bool``."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """A finite ``int`` or ``float`` (numpy's float64 included), never a ``bool``."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def integer(value: object, refuse: Refusal, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int``: an integer (:func:`is_integer`) within ``[low, high]``."""
    if not is_integer(value):
        raise refuse(value)
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        raise refuse(value)
    return number


def number(value: object, refuse: Refusal, positive: bool = False) -> float:
    """``value`` as a ``float``: a finite number (:func:`is_number`), above 0 if ``positive``."""
    if not is_number(value) or (positive and value <= 0):
        raise refuse(value)
    return float(value)


def boolean(value: object, refuse: Refusal) -> bool:
    """``value`` as a ``bool``: ``True`` or ``False`` only (no 0, 1 or strings)."""
    if not isinstance(value, bool):
        raise refuse(value)
    return value


def text(value: object, refuse: Refusal, numbers: bool = False) -> str:
    """``value`` as a ``str``; with ``numbers`` an ``int`` or ``float`` is written as text too
    (never a ``bool``)."""
    if isinstance(value, str):
        return value
    if numbers and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise refuse(value)


def text_list(value: object, refuse: Refusal) -> tuple[str, ...]:
    """``value`` as a tuple of strings: a list whose every item is a ``str``."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise refuse(value)
    return tuple(value)
