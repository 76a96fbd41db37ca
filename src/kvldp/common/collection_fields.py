"""The error an invalid collection file raises, and the checks of one typed field.

Every table of a collection file is validated field by field — the top level in
:mod:`kvldp.common.collection_file`, ``[aggregate]`` in :mod:`kvldp.common.aggregate_config`
— with these readers, so that every error names the field it is about. They sit below
both (and below :mod:`kvldp.common.collection`, whose checks raise the same error).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kvldp.common.errors import KvldpError


class InvalidCollection(KvldpError):
    """A collection file is missing a field or has a wrong one (the message names it)."""


def require(table: Mapping[str, Any], key: str, where: str = "") -> Any:
    if key not in table:
        raise InvalidCollection(f"{where}{key}: required field is missing")
    return table[key]


def number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidCollection(f"{field}: expected a finite number, got {value!r}")
    return float(value)


def string_list(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidCollection(f"{field}: expected a list of strings, got {value!r}")
    return tuple(value)
