"""The error an invalid collection file raises, and the readers of its typed fields.

Every table of a collection file is validated field by field — the top level in
:mod:`kvldp.common.config.collection_file`, ``[aggregate]`` in :mod:`kvldp.common.config.aggregate_config`
— with these readers, so that every error names the field it is about in the same words
(``<field>: expected <what>, got <value>``). They are :mod:`kvldp.common.typed_fields`'
readers raising :class:`InvalidCollection`, and sit below both modules (and below
:mod:`kvldp.common.config.collection`, whose checks raise the same error).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvldp.common import typed_fields
from kvldp.common.errors import KvldpError
from kvldp.common.typed_fields import expected


class InvalidCollection(KvldpError):
    """A collection file is missing a field or has a wrong one (the message names it)."""


def require(table: Mapping[str, Any], key: str, where: str = "") -> Any:
    if key not in table:
        raise InvalidCollection(f"{where}{key}: required field is missing")
    return table[key]


def number(value: Any, field: str) -> float:
    return typed_fields.number(value, expected(InvalidCollection, field, "a finite number"))


def integer(value: Any, field: str, low: int, high: int) -> int:
    return typed_fields.integer(
        value, expected(InvalidCollection, field, f"an integer in [{low}, {high}]"), low, high
    )


def positive_integer(value: Any, field: str) -> int:
    return typed_fields.integer(value, expected(InvalidCollection, field, "a positive integer"), low=1)


def boolean(value: Any, field: str) -> bool:
    return typed_fields.boolean(value, expected(InvalidCollection, field, "true or false"))


def string_list(value: Any, field: str) -> tuple[str, ...]:
    return typed_fields.text_list(value, expected(InvalidCollection, field, "a list of strings"))
