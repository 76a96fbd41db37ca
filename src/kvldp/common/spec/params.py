"""Declared mechanism parameters: one place that parses, checks and documents them.

Parameters reach a mechanism from Python, from the CLI (``--param NAME=VALUE`` strings)
and from collection files; all three go through :func:`parse_params`, so an unknown
name or an out-of-range value is the same clear error everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvldp.common.errors import KvldpError
from kvldp.common.typed_fields import Refusal, boolean, integer, number, text

ParamValue = int | float | str | bool
_TRUE = frozenset(("true", "1", "yes"))
_FALSE = frozenset(("false", "0", "no"))


class InvalidParameter(KvldpError):
    """A mechanism parameter is unknown, mistyped or out of range."""


@dataclass(frozen=True)
class Param:
    """One mechanism parameter: name, type, default, a range check and its meaning."""

    name: str
    kind: type
    default: ParamValue
    doc: str
    choices: tuple[str, ...] | None = None
    check: Callable[[ParamValue], bool] | None = None
    check_doc: str = ""

    @property
    def allowed(self) -> str:
        """The values the parameter takes, in words: its choices, its range check's
        description, else any value of its type."""
        if self.choices is not None:
            return f"one of {', '.join(self.choices)}"
        if self.check_doc:
            return self.check_doc.removeprefix("must ").removeprefix("lie ").removeprefix("be ")
        return f"any {_KIND_NAMES[self.kind]}"

    def coerce(self, raw: object) -> ParamValue:
        value = _coerce(self.kind, raw, self.name)
        if self.choices is not None and value not in self.choices:
            raise InvalidParameter(
                f"parameter {self.name}={value!r} must be one of {', '.join(self.choices)}"
            )
        if self.check is not None and not self.check(value):
            raise InvalidParameter(f"parameter {self.name}={value!r} is out of range: {self.check_doc}")
        return value


#: how :attr:`Param.allowed` names a parameter's type
_KIND_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _coerce(kind: type, raw: object, name: str) -> ParamValue:
    def refuse(what: str) -> Refusal:
        return lambda value: InvalidParameter(f"parameter {name} must be {what}, got {value!r}")

    if kind is bool:
        if isinstance(raw, str) and raw.lower() in _TRUE | _FALSE:
            return raw.lower() in _TRUE
        return boolean(raw, refuse("a boolean"))
    if kind is int:
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        return integer(_parsed(raw, int), refuse("an integer"))
    if kind is float:
        return number(_parsed(raw, float), refuse("a number"))
    if kind is str:
        return text(raw, refuse("a string"))
    raise TypeError(f"unsupported parameter type {kind!r}")


def _parsed(raw: object, parse: Callable[[str], object]) -> object:
    """A string as ``parse`` reads it (``--param NAME=VALUE`` gives strings); anything
    else, or a string ``parse`` refuses, as it is."""
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            return parse(raw)
    return raw


def parse_params(spec: tuple[Param, ...], raw: Mapping[str, object], mechanism: str) -> dict[str, ParamValue]:
    """Defaults overlaid with ``raw``; unknown names are an error that lists the known ones."""
    known = {p.name: p for p in spec}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        listing = ", ".join(sorted(known)) or "none"
        raise InvalidParameter(
            f"mechanism {mechanism} has no parameter {unknown[0]!r} (its parameters: {listing})"
        )
    out: dict[str, ParamValue] = {}
    for p in spec:
        out[p.name] = p.coerce(raw[p.name]) if p.name in raw else p.default
    return out


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """Parse CLI ``NAME=VALUE`` strings into a dict (values stay strings until coerced)."""
    out: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidParameter(f"--param expects NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out
