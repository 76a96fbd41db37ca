"""One single-report message checked in one compiled pass: msgspec's typed msgpack
decoding against a description of the collection's single report.

A single report is a msgpack map: the collection's envelope (``ver``, ``col``, ``mech``,
``cfg``), the mechanism's payload fields, and the optional ``ts``, ``rid`` and ``eps``.
:func:`single_report_decoder` describes it as a msgspec struct: the envelope's values
as literals, each integer field as an ``int`` within its domain, each bitset as ``bin``
of exactly its bytes, the optional keys as present-or-absent (a present ``nil`` is
refused), and no other key. msgspec's decoder reads and checks such a message without
building a dictionary or running Python per field. What a struct cannot say is left to
:meth:`kvldp.common.messages.wire.WireFormat.count`: a bitset's padding bits, ``ts`` and
``rid`` not negative, ``eps`` against the collection's, the device time against the
record's, and a mechanism's rules across fields.

It decides acceptance only. A message it refuses goes through the general decoder,
which names the reason; so the struct may refuse more than the general decoder does
(a ``ver`` of ``1.0``, say), never less (``tests/test_wire_count.py`` compares their
verdicts on every way a message can be wrong).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from kvldp.common.data.schema import Field

#: integer bounds msgspec can check (it takes int64 bounds only)
_INT64 = (-(2**63), 2**63 - 1)
#: a present optional key must hold a value (msgspec's UNSET: the key was absent)
Absent = msgspec.UnsetType


def _field_type(f: Field) -> Any:
    """A payload field's type and domain, as far as msgspec can check them."""
    if f.kind == "bits":
        return Annotated[bytes, msgspec.Meta(min_length=f.nbytes, max_length=f.nbytes)]
    low, high = max(f.low, _INT64[0]), min(f.high - 1, _INT64[1])
    return Annotated[int, msgspec.Meta(ge=low, le=high)]


def unchecked_bounds(fields: Sequence[Field]) -> list[tuple[int, int, int]]:
    """(index, low, high) of each integer field whose domain reaches beyond int64, which
    the caller checks itself."""
    return [
        (i, f.low, f.high)
        for i, f in enumerate(fields)
        if f.kind != "bits" and (f.low < _INT64[0] or f.high - 1 > _INT64[1])
    ]


def single_report_decoder(envelope: dict[str, Any], fields: Sequence[Field]) -> msgspec.msgpack.Decoder[Any]:
    """The decoder of a single report of this envelope and these fields (see the module
    docstring)."""
    spec: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        (key, Literal[value]) for key, value in envelope.items()
    ]
    spec += [(f.name, _field_type(f)) for f in fields]
    spec += [
        ("ts", int | Absent, msgspec.UNSET),
        ("rid", int | Absent, msgspec.UNSET),
        ("eps", float | int | Absent, msgspec.UNSET),
    ]
    struct = msgspec.defstruct("SingleReport", spec, forbid_unknown_fields=True)
    return msgspec.msgpack.Decoder(struct)
