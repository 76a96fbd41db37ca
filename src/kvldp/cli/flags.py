"""Flag types and output shared by the ``kvldp`` subcommands.

argparse ``type=`` functions that check numbers and comma lists (each refusal is one
argparse error line); path types (:class:`FileToRead`, :class:`FileToWrite`,
:class:`DirectoryToWrite`) whose paths :func:`check_paths` checks once the whole command
line is parsed, before the command does anything (:mod:`kvldp.common.files.path_checks`); and
:func:`emit`, which prints a command's result as text or as JSON. Every module of
:mod:`kvldp.cli` that defines flags takes them from here, so the same flag refuses the
same input with the same words everywhere.
"""

from __future__ import annotations

import argparse
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, TypeAlias

from kvldp.common.files.path_checks import readable_file, writable_directory, writable_file

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
#: a TCP port to listen on (0: any free one)
port_number = number_flag(int, lambda v: 0 <= v <= 65535, "0 to 65535")


def int_list(text: str) -> list[int]:
    return [positive_int(t) for t in text.split(",") if t.strip()]


def two_ints(text: str) -> tuple[int, int]:
    values = int_list(text)
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected two comma-separated counts, got {text!r}")
    return values[0], values[1]


class PathFlag(str, ABC):
    """A path on the command line, as given; :func:`check_paths` checks it. ``label``
    names it in messages (default: its option, ``--state-dir``)."""

    label: str | None

    def __new__(cls, text: str, label: str | None = None) -> Self:
        given = super().__new__(cls, text)
        given.label = label
        return given

    @abstractmethod
    def check(self, label: str) -> Path:
        """The path, if the command can use it; else
        :class:`~kvldp.common.files.path_checks.UnusablePath` naming it ``label``."""


class FileToRead(PathFlag):
    """A file the command reads."""

    def check(self, label: str) -> Path:
        return readable_file(self, label)


class FileToWrite(PathFlag):
    """A file the command writes (its directory must exist)."""

    def check(self, label: str) -> Path:
        return writable_file(self, label)


class DirectoryToWrite(PathFlag):
    """A directory the command writes into, created if missing."""

    def check(self, label: str) -> Path:
        return writable_directory(self, label)


def check_paths(args: argparse.Namespace) -> None:
    """Check every path flag of a parsed command line (one-line
    :class:`~kvldp.common.files.path_checks.UnusablePath` for the first that cannot be used)."""
    for dest, value in vars(args).items():
        for given in value if isinstance(value, list) else [value]:
            if isinstance(given, PathFlag):
                given.check(given.label or f"--{dest.replace('_', '-')}")


def emit(payload: Any, as_json: bool, text: str) -> None:
    print(json.dumps(payload, indent=None if as_json else 2, allow_nan=False) if as_json else text)
