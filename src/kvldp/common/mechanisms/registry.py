"""Mechanisms by name. The names are a contract: CLI, wire ``mech`` tag, metric labels."""

from __future__ import annotations

from typing import TypeVar

from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.spec.params import InvalidParameter

_REGISTRY: dict[str, type[Mechanism]] = {}
M = TypeVar("M", bound=type[Mechanism])


class UnknownMechanism(InvalidParameter):
    """No mechanism is registered under the requested name."""


def register(cls: M) -> M:
    """Class decorator: make a mechanism available under ``cls.name``."""
    if cls.name in _REGISTRY:
        raise ValueError(f"mechanism {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> type[Mechanism]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMechanism(f"unknown mechanism {name!r} (known: {', '.join(names())})") from None


def create(name: str, d: int, epsilon: float, **params: object) -> Mechanism:
    """Instantiate a registered mechanism."""
    return get(name)(d, epsilon, **params)
