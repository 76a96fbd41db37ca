"""Additive sufficient statistics: fixed-shape int64 arrays tagged with their configuration.

Everything the aggregator keeps per partition and window is a :class:`Stats`. Folding
adds integers, merging adds arrays, so ``fold(A ++ B) == merge(fold(A), fold(B))`` and
the order of reports never matters (docs/mechanisms.md, *Statistics and configurations*).
Memory is fixed by the configuration (d, mechanism parameters), never by the number of
reports. The byte form is msgpack
with raw little-endian int64 buffers and carries mechanism name and config digest, so
a checkpoint can never be loaded into a differently-configured collection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import msgpack
import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.schema import ReportBatch, batch_len
from kvldp.common.errors import KvldpError

IntArray = NDArray[np.int64]
_FORMAT = "kvldp-stats"
_VERSION = 1


class StatsMismatch(KvldpError):
    """Statistics of different mechanisms or configurations cannot be combined."""


class Folder(Protocol):
    """What :class:`Stats` needs from its mechanism."""

    @property
    def name(self) -> str: ...

    @property
    def digest(self) -> int: ...

    def stats_shapes(self) -> dict[str, tuple[int, ...]]: ...

    def check_batch(self, batch: ReportBatch) -> None: ...

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None: ...


class Stats:
    """Sufficient statistics of one mechanism configuration. ``arrays['n']`` counts reports."""

    __slots__ = ("arrays", "exact", "mechanism")

    def __init__(self, mechanism: Folder, arrays: Mapping[str, IntArray] | None = None) -> None:
        self.mechanism = mechanism
        self.exact = True
        shapes = mechanism.stats_shapes()
        if arrays is None:
            self.arrays: dict[str, IntArray] = {k: np.zeros(s, dtype=np.int64) for k, s in shapes.items()}
            self.arrays["n"] = np.zeros(1, dtype=np.int64)
        else:
            expected = {**shapes, "n": (1,)}
            if set(arrays) != set(expected):
                raise StatsMismatch(f"statistics arrays {sorted(arrays)} do not match {sorted(expected)}")
            for k, shape in expected.items():
                if tuple(arrays[k].shape) != tuple(shape):
                    raise StatsMismatch(f"array {k!r} has shape {arrays[k].shape}, expected {shape}")
            self.arrays = {k: np.asarray(v, dtype=np.int64) for k, v in arrays.items()}

    @classmethod
    def expected(cls, mechanism: Folder, arrays: Mapping[str, NDArray[np.float64]]) -> Stats:
        """Expected (real-valued) statistics of a population, for exact estimator checks
        (docs/mechanisms.md, *Expected-count round trip*). They can be estimated but never folded
        into, merged or serialised."""
        stats = cls(mechanism)
        for k, v in arrays.items():
            if k not in stats.arrays or tuple(np.shape(v)) != stats.arrays[k].shape:
                raise StatsMismatch(f"expected array {k!r} does not match the statistics layout")
        stats.arrays = cast(
            "dict[str, IntArray]", {k: np.asarray(arrays[k], dtype=np.float64) for k in stats.arrays}
        )
        stats.exact = False
        return stats

    @property
    def n_reports(self) -> int:
        return round(float(self.arrays["n"][0]))

    def _require_exact(self) -> None:
        if not self.exact:
            raise StatsMismatch("expected statistics are real-valued and cannot be folded, merged or stored")

    def fold(self, batch: ReportBatch, check: bool = True) -> Stats:
        """Add a batch of reports in place. It is validated first (a bad batch changes
        nothing) unless the caller already validated it with the same mechanism
        (``check=False``, the aggregator's hot path after wire decoding)."""
        self._require_exact()
        if check:
            self.mechanism.check_batch(batch)
        self.mechanism.fold_arrays(self.arrays, batch)
        self.arrays["n"][0] += batch_len(batch)
        return self

    def _check_compatible(self, other: Stats) -> None:
        if other.mechanism.name != self.mechanism.name or other.mechanism.digest != self.mechanism.digest:
            raise StatsMismatch(
                f"cannot merge {other.mechanism.name}/{other.mechanism.digest:08x} "
                f"into {self.mechanism.name}/{self.mechanism.digest:08x}"
            )

    def add(self, other: Stats) -> Stats:
        """In-place elementwise sum (same configuration); returns self."""
        self._require_exact()
        other._require_exact()
        self._check_compatible(other)
        for k, v in other.arrays.items():
            self.arrays[k] += v
        return self

    def subtract(self, other: Stats) -> Stats:
        """In-place elementwise difference: takes back reports ``other`` folded (they must
        have been added to ``self`` before); returns self."""
        self._require_exact()
        other._require_exact()
        self._check_compatible(other)
        for k, v in other.arrays.items():
            self.arrays[k] -= v
        return self

    def merge(self, other: Stats) -> Stats:
        """Elementwise sum as a new object (requires the same mechanism configuration)."""
        self._require_exact()
        other._require_exact()
        self._check_compatible(other)
        return Stats(self.mechanism, {k: self.arrays[k] + other.arrays[k] for k in self.arrays})

    def copy(self) -> Stats:
        return Stats(self.mechanism, {k: v.copy() for k, v in self.arrays.items()})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stats):
            return NotImplemented
        return (
            other.mechanism.name == self.mechanism.name
            and other.mechanism.digest == self.mechanism.digest
            and all(np.array_equal(self.arrays[k], other.arrays[k]) for k in self.arrays)
        )

    __hash__ = None  # type: ignore[assignment]

    def to_bytes(self) -> bytes:
        self._require_exact()
        payload: dict[str, Any] = {
            "format": _FORMAT,
            "v": _VERSION,
            "mech": self.mechanism.name,
            "cfg": self.mechanism.digest,
            "arrays": {
                k: {"shape": list(v.shape), "data": v.astype("<i8", copy=False).tobytes()}
                for k, v in sorted(self.arrays.items())
            },
        }
        return bytes(msgpack.packb(payload, use_bin_type=True))

    @classmethod
    def from_bytes(cls, mechanism: Folder, data: bytes) -> Stats:
        """Decode and check against ``mechanism``: name, digest and every shape must match."""
        try:
            payload = msgpack.unpackb(data, raw=False, strict_map_key=True)
        except Exception as exc:  # msgpack raises several unrelated types on garbage
            raise StatsMismatch(f"statistics bytes are not valid msgpack: {exc}") from exc
        if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
            raise StatsMismatch("bytes are not kvldp statistics")
        if payload.get("v") != _VERSION:
            raise StatsMismatch(f"unsupported statistics version {payload.get('v')!r}")
        if payload.get("mech") != mechanism.name or payload.get("cfg") != mechanism.digest:
            raise StatsMismatch(
                f"statistics belong to {payload.get('mech')}/{payload.get('cfg')}, "
                f"not {mechanism.name}/{mechanism.digest}"
            )
        raw_arrays = payload.get("arrays")
        if not isinstance(raw_arrays, dict):
            raise StatsMismatch("statistics lack their arrays")
        arrays: dict[str, IntArray] = {}
        for k, entry in raw_arrays.items():
            shape = tuple(int(s) for s in entry["shape"])
            buf = entry["data"]
            if not isinstance(buf, bytes) or len(buf) != 8 * int(np.prod(shape, dtype=np.int64)):
                raise StatsMismatch(f"array {k!r} has a truncated buffer")
            arrays[k] = np.frombuffer(buf, dtype="<i8").astype(np.int64).reshape(shape)
        return cls(mechanism, arrays)
