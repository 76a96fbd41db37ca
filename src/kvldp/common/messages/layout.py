"""The canonical byte layout of a single-report message, for vectorised encoding and decoding.

msgpack lets an integer be written wider than necessary, so the SDK writes every
single-report message of a collection in one fixed layout: a map whose keys come in a
fixed order (``ver``, ``col``, ``mech``, ``cfg``, ``ts``, ``rid``, then the payload
fields) and whose values have fixed widths (``cfg`` uint32, ``ts`` and ``rid`` uint64,
each integer field the narrowest msgpack integer type that holds its domain, each
bitset a ``bin`` of its exact length). Such messages are ordinary msgpack — any decoder
reads them — but they all have the same length and differ only in known byte slots.

That is what makes ingest fast: the aggregator stacks the messages of that length into
one ``(n, L)`` byte matrix, checks every constant byte at once, and reads each field
from its slot with one numpy view. A message that does not match byte for byte (another
encoder, missing ``ts`` or ``rid``, an ``eps`` key, anything hostile) simply takes the
general decoder, so the layout is an optimisation, never a format of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.schema import Field, ReportBatch

VERSION = 1


def _str(text: str) -> bytes:
    data = text.encode()
    if len(data) < 32:
        return bytes([0xA0 | len(data)]) + data
    if len(data) < 256:
        return bytes([0xD9, len(data)]) + data
    return b"\xda" + len(data).to_bytes(2, "big") + data


def _int_header(f: Field) -> tuple[bytes, str]:
    """The msgpack type byte and the big-endian numpy type of an integer field's slot."""
    if f.kind == "int" and f.low < 0:
        for width, code in ((1, 0xD0), (2, 0xD1), (4, 0xD2), (8, 0xD3)):
            if -(2 ** (8 * width - 1)) <= f.low and f.high <= 2 ** (8 * width - 1):
                return bytes([code]), f">i{width}"
    for width, code in ((1, 0xCC), (2, 0xCD), (4, 0xCE)):
        if f.high <= 2 ** (8 * width):
            return bytes([code]), f">u{width}"
    return b"\xcf", ">u8"


def _bin_header(nbytes: int) -> bytes:
    if nbytes < 256:
        return bytes([0xC4, nbytes])
    if nbytes < 65536:
        return b"\xc5" + nbytes.to_bytes(2, "big")
    return b"\xc6" + nbytes.to_bytes(4, "big")


@dataclass(frozen=True)
class Slot:
    """Where a value lives in the layout: byte offset, width, and how to read it."""

    name: str
    offset: int
    width: int
    dtype: str  # big-endian numpy type, or "bits"


@dataclass(frozen=True)
class Matched:
    """The messages that matched the layout: their indices and their decoded values."""

    index: NDArray[np.int64]
    reports: ReportBatch
    ts: NDArray[np.int64]
    rids: NDArray[np.uint64]

    def select(self, keep: NDArray[np.bool_]) -> Matched:
        return Matched(
            self.index[keep], {k: v[keep] for k, v in self.reports.items()}, self.ts[keep], self.rids[keep]
        )


class SingleLayout:
    """The canonical single-report layout of one collection."""

    def __init__(
        self, collection_name: str, mechanism_name: str, digest: int, fields: Sequence[Field]
    ) -> None:
        self.fields = tuple(fields)
        parts: list[bytes] = [bytes([0x80 | (6 + len(self.fields))])]
        parts += [_str("ver"), bytes([VERSION]), _str("col"), _str(collection_name)]
        parts += [_str("mech"), _str(mechanism_name), _str("cfg"), b"\xce" + digest.to_bytes(4, "big")]
        slots: list[Slot] = []

        def slot(name: str, header: bytes, width: int, dtype: str) -> None:
            parts.extend((_str(name), header))
            slots.append(Slot(name, sum(map(len, parts)), width, dtype))
            parts.append(bytes(width))

        slot("ts", b"\xcf", 8, ">u8")
        slot("rid", b"\xcf", 8, ">u8")
        for f in self.fields:
            if f.kind == "bits":
                slot(f.name, _bin_header(f.nbytes), f.nbytes, "bits")
            else:
                header, dtype = _int_header(f)
                slot(f.name, header, np.dtype(dtype).itemsize, dtype)
        self.template = np.frombuffer(b"".join(parts), dtype=np.uint8).copy()
        self.length = int(self.template.shape[0])
        self.slots = {s.name: s for s in slots}
        constant = np.ones(self.length, dtype=bool)
        for s in slots:
            constant[s.offset : s.offset + s.width] = False
        #: 0xff at the bytes every canonical message has, 0 at the value slots
        self.constant_mask = np.where(constant, 0xFF, 0).astype(np.uint8)

    # ------------------------------------------------------------------ encoding
    def encode(self, reports: ReportBatch, ts_ms: NDArray[np.int64] | int, rids: NDArray[np.uint64]) -> bytes:
        """``n`` messages back to back (``n * length`` bytes): one numpy pass, no per-report work."""
        n = next(iter(reports.values())).shape[0]
        rows = np.repeat(self.template[None, :], n, axis=0)
        self._put(rows, "ts", np.broadcast_to(np.asarray(ts_ms, dtype=np.uint64), (n,)))
        self._put(rows, "rid", np.asarray(rids, dtype=np.uint64))
        for f in self.fields:
            self._put(rows, f.name, reports[f.name])
        return rows.tobytes()

    def _put(self, rows: NDArray[np.uint8], name: str, values: NDArray[Any]) -> None:
        s = self.slots[name]
        if s.dtype == "bits":
            rows[:, s.offset : s.offset + s.width] = values
        else:
            rows[:, s.offset : s.offset + s.width] = (
                np.ascontiguousarray(values, dtype=s.dtype).view(np.uint8).reshape(-1, s.width)
            )

    def split(self, data: bytes) -> list[bytes]:
        """The messages of :meth:`encode`'s output."""
        step = self.length
        return [data[i : i + step] for i in range(0, len(data), step)]

    # ------------------------------------------------------------------ decoding
    def match(self, messages: Sequence[bytes | None]) -> Matched:
        """Find the messages laid out canonically and read their values (vectorised)."""
        values: Sequence[bytes] = (
            messages  # type: ignore[assignment]
            if None not in messages
            else [m if m is not None else b"" for m in messages]
        )
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        fits = lengths == self.length
        if fits.all():
            index = np.arange(len(values), dtype=np.int64)
            joined = b"".join(values)
        else:
            index = np.flatnonzero(fits)
            joined = b"".join(compress(values, fits))
        rows = np.frombuffer(joined, dtype=np.uint8).reshape(-1, self.length)
        if rows.shape[0]:
            diff = (rows ^ self.template) & self.constant_mask
            if diff.any():  # some message differs in a constant byte: find which
                ok = ~diff.any(axis=1)
                rows, index = rows[ok], index[ok]
        reports: ReportBatch = {}
        for f in self.fields:
            raw = self._get(rows, f.name)
            reports[f.name] = raw if f.kind == "bits" else raw.astype(f.dtype)
        return Matched(
            index,
            reports,
            self._get(rows, "ts").astype(np.int64),
            self._get(rows, "rid").astype(np.uint64),
        )

    def _get(self, rows: NDArray[np.uint8], name: str) -> NDArray[Any]:
        s = self.slots[name]
        column = np.ascontiguousarray(rows[:, s.offset : s.offset + s.width])
        if s.dtype == "bits":
            return column
        return column.view(s.dtype).reshape(-1)
