"""Report payload schemas and columnar report batches.

A mechanism declares its payload as a tuple of :class:`Field` (docs/wire-format.md: indices are
unsigned integers below a bound, bitsets are LSB-first ``bin`` of exactly ceil(L/8)
bytes with zero padding). A *batch* is a dict of numpy columns, one row per report;
bitset columns are (n, nbytes) uint8 matrices. Validation is vectorised and returns a
reason per rejected row, which is what the aggregator's dead-letter queue needs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from kvldp.common.errors import KvldpError
from kvldp.common.typed_fields import Refusal, integer

ReportBatch = dict[str, NDArray[Any]]
Report = dict[str, int | bytes]


class InvalidReport(KvldpError):
    """A report or batch does not match its mechanism's payload schema."""


@dataclass(frozen=True)
class Field:
    """One payload field. ``uint``/``int``: values in [low, high); ``bits``: ``high`` bits."""

    name: str
    kind: Literal["uint", "int", "bits"]
    low: int
    high: int

    @property
    def nbytes(self) -> int:
        return (self.high + 7) // 8

    @property
    def dtype(self) -> np.dtype[Any]:
        if self.kind == "bits":
            return np.dtype(np.uint8)
        if self.kind == "int":
            return np.dtype(np.int64)
        return np.dtype(np.uint64) if self.high > 2**63 - 1 else np.dtype(np.int64)


def batch_len(batch: Mapping[str, NDArray[Any]]) -> int:
    """Number of reports in a batch (all columns share the first dimension)."""
    for column in batch.values():
        return int(column.shape[0])
    return 0


def row(batch: Mapping[str, NDArray[Any]], fields: Sequence[Field], i: int) -> Report:
    """Report ``i`` of a batch as plain Python values (bitsets as bytes)."""
    out: Report = {}
    for f in fields:
        value = batch[f.name][i]
        out[f.name] = bytes(np.asarray(value, dtype=np.uint8)) if f.kind == "bits" else int(value)
    return out


def _not_an_integer(field: str) -> Refusal:
    return lambda value: InvalidReport(f"field {field} must be an integer, got {value!r}")


def from_rows(reports: Sequence[Mapping[str, object]], fields: Sequence[Field]) -> ReportBatch:
    """Stack single reports (as produced by :func:`row`) into a batch; shape errors raise."""
    batch: ReportBatch = {}
    for f in fields:
        try:
            values = [r[f.name] for r in reports]
        except KeyError as exc:
            raise InvalidReport(f"report lacks field {f.name!r}") from exc
        if f.kind == "bits":
            buf = []
            for v in values:
                if not isinstance(v, (bytes, bytearray)) or len(v) != f.nbytes:
                    raise InvalidReport(f"field {f.name} must be {f.nbytes} bytes")
                buf.append(np.frombuffer(bytes(v), dtype=np.uint8))
            batch[f.name] = np.stack(buf) if buf else np.zeros((0, f.nbytes), np.uint8)
        else:
            refuse = _not_an_integer(f.name)
            for v in values:
                integer(v, refuse)
            batch[f.name] = np.asarray(values, dtype=f.dtype).reshape(len(values))
    return batch


def concat(batches: Sequence[ReportBatch]) -> ReportBatch:
    """Concatenate batches of the same mechanism."""
    if not batches:
        return {}
    return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}


@functools.cache
def _largest(dtype: np.dtype[Any]) -> int:
    """The largest value of an integer dtype."""
    return int(np.iinfo(dtype).max)


def field_checks(
    batch: Mapping[str, NDArray[Any]], fields: Sequence[Field]
) -> Iterator[tuple[NDArray[np.bool_], str]]:
    """The schema's checks as (bad-row mask, reason) pairs, in order. A batch whose
    columns have the wrong shape or type cannot be checked row by row and raises
    :class:`InvalidReport` (when the check of that column is reached)."""
    n = batch_len(batch)
    for f in fields:
        if f.name not in batch:
            raise InvalidReport(f"batch lacks column {f.name!r}")
        col = batch[f.name]
        if col.shape[0] != n:
            raise InvalidReport(f"column {f.name!r} has {col.shape[0]} rows, expected {n}")
        if f.kind == "bits":
            if col.ndim != 2 or col.shape[1] != f.nbytes or col.dtype != np.uint8:
                raise InvalidReport(f"column {f.name!r} must be an (n, {f.nbytes}) uint8 matrix")
            spare = f.nbytes * 8 - f.high
            if spare:
                pad_mask = np.uint8((0xFF << (8 - spare)) & 0xFF)
                yield (col[:, -1] & pad_mask) != 0, f"{f.name}: padding bits set"
        else:
            if col.ndim != 1 or col.dtype.kind not in "iu":
                raise InvalidReport(f"column {f.name!r} must be a 1-D integer array")
            if col.dtype.kind == "i":
                yield col < f.low, f"{f.name}: below {f.low}"
            elif f.low > 0:
                yield col < np.uint64(f.low), f"{f.name}: below {f.low}"
            if f.high <= _largest(col.dtype):
                yield col >= f.high, f"{f.name}: not below {f.high}"


def reasons_of(
    n: int, checks: Iterable[tuple[NDArray[np.bool_], str]]
) -> tuple[NDArray[np.bool_], NDArray[np.object_]]:
    """(valid mask, reason per row; '' where valid): the first failing check names it."""
    valid = np.ones(n, dtype=bool)
    reasons = np.full(n, "", dtype=object)
    for mask, reason in checks:
        if mask.any():
            reasons[mask & valid] = reason
            valid[mask] = False
    return valid, reasons


def validate_fields(
    batch: Mapping[str, NDArray[Any]], fields: Sequence[Field]
) -> tuple[NDArray[np.bool_], NDArray[np.object_]]:
    """Vectorised schema check. Returns (valid mask, reason per row; '' where valid)."""
    return reasons_of(batch_len(batch), field_checks(batch, fields))


def take(batch: Mapping[str, NDArray[Any]], mask: NDArray[np.bool_]) -> ReportBatch:
    """Rows of a batch selected by a boolean mask."""
    return {name: col[mask] for name, col in batch.items()}
