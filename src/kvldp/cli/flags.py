"""Flag types and output shared by the ``kvldp`` subcommands.

argparse ``type=`` functions that check numbers and comma lists (each refusal is one
argparse error line), and :func:`emit`, which prints a command's result as text or as
JSON. Every module of :mod:`kvldp.cli` that defines flags takes them from here, so the
same flag refuses the same input with the same words everywhere.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TypeAlias

#: what a subcommand module registers its parser on (``kvldp``'s or ``kvldp bench``'s subparsers)
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def number_flag(
    cast: type[int] | type[float], ok: Callable[[Any], bool], wanted: str
) -> Callable[[str], Any]:
    """An argparse type: ``cast`` the text, then require ``ok`` of the value."""

    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if cast is int else 'a number'}, got {text!r}"
            ) from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text}")
        return value

    return parse


positive_int = number_flag(int, lambda v: v >= 1, "a positive integer")
non_negative_int = number_flag(int, lambda v: v >= 0, "a non-negative integer")
positive_float = number_flag(float, lambda v: 0 < v < float("inf"), "a positive finite number")
fraction = number_flag(float, lambda v: 0.0 <= v <= 1.0, "a fraction in [0, 1]")
open_fraction = number_flag(float, lambda v: 0.0 < v < 1.0, "a fraction in (0, 1)")
unit_value = number_flag(float, lambda v: -1.0 <= v <= 1.0, "a value in [-1, 1]")


def int_list(text: str) -> list[int]:
    return [positive_int(t) for t in text.split(",") if t.strip()]


def two_ints(text: str) -> tuple[int, int]:
    values = int_list(text)
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected two comma-separated counts, got {text!r}")
    return values[0], values[1]


def emit(payload: Any, as_json: bool, text: str) -> None:
    print(json.dumps(payload, indent=None if as_json else 2, allow_nan=False) if as_json else text)
