"""Hostile report messages: every way a message can be wrong, with the reason the
aggregator must give it.

Used by the hostile-input scenario (spread through a live stream, each must land in the
dead-letter topic with its original bytes) and by the decoder's tests. Generic over the
collection's payload schema, so it attacks bitset and integer fields alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from kvldp.common.data.schema import Field
from kvldp.common.messages.wire import WireFormat

#: the reason is data-dependent (random bytes may parse as anything)
ANY = "*"


@dataclass(frozen=True)
class Hostile:
    """One hostile message: its kind, the reason it must be rejected with, its bytes (None:
    a tombstone) and the Kafka record timestamp to send it with."""

    kind: str
    reason: str
    value: bytes | None
    timestamp_ms: int


def _pack(obj: Any) -> bytes:
    return bytes(msgpack.packb(obj, use_bin_type=True))


def _valid_value(f: Field) -> Any:
    return bytes(f.nbytes) if f.kind == "bits" else f.low


class HostileFactory:
    """Makes hostile messages for one collection; ``i`` varies each kind's details."""

    def __init__(self, wire: WireFormat, now_ms: int) -> None:
        self.wire = wire
        self.now_ms = now_ms
        self.env: dict[str, Any] = dict(wire.envelope)
        self.fields = wire.fields
        self.single = {**self.env, **{f.name: _valid_value(f) for f in self.fields}}
        self.good = _pack(self.single)
        config = wire.collection.aggregate
        self.max_age_ms = int(config.max_report_age_s * 1000)
        self.max_skew_ms = int(config.max_clock_skew_s * 1000)
        self.kinds: dict[str, tuple[str, Callable[[int, np.random.Generator], bytes | None]]] = {
            "truncated": ("undecodable", lambda i, r: self.good[: 1 + i % (len(self.good) - 1)]),
            "trailing_bytes": ("undecodable", lambda i, r: self.good + bytes([i % 256])),
            "empty": ("undecodable", lambda i, r: b""),
            "tombstone": ("undecodable", lambda i, r: None),
            "deep_nesting": ("undecodable", lambda i, r: b"\x91" * 64 + b"\xc0"),
            "deep_nesting_arrays_in_field": ("undecodable", lambda i, r: self._deep_field(i, r, list)),
            "deep_nesting_maps_in_field": ("bad_payload", lambda i, r: self._deep_field(i, r, dict)),
            "deep_nesting_20000_maps": ("undecodable", lambda i, r: b"\x81\xa1x" * 20_000 + b"\xc0"),
            "array_header_2^32-1": ("undecodable", lambda i, r: b"\xdd\xff\xff\xff\xff" + bytes(i % 8)),
            "map_header_2^32-1": ("undecodable", lambda i, r: b"\xdf\xff\xff\xff\xff" + bytes(i % 8)),
            "bin_header_2^32-1": ("undecodable", lambda i, r: b"\xc6\xff\xff\xff\xff" + bytes(i % 8)),
            "oversize": ("oversize", lambda i, r: b"\x00" * (wire.cap + 1 + i % 512)),
            "ext_type": (
                "undecodable",
                lambda i, r: _pack({**self.single, self.fields[0].name: msgpack.ExtType(i % 100, b"x")}),
            ),
            "timestamp_ext": ("undecodable", lambda i, r: _pack({**self.env, "ts": msgpack.Timestamp(i, 0)})),
            "non_string_keys": ("undecodable", lambda i, r: _pack({**self.single, i % 7: 1})),
            "not_a_map": ("bad_envelope", lambda i, r: _pack(i)),
            "missing_envelope": (
                "bad_envelope",
                lambda i, r: _pack({k: v for k, v in self.single.items() if k != "cfg"}),
            ),
            "wrong_type_envelope": ("bad_envelope", lambda i, r: _pack({**self.single, "cfg": str(i)})),
            "wrong_type_ts": ("bad_envelope", lambda i, r: _pack({**self.single, "ts": -1 - i})),
            "wrong_type_field": ("bad_payload", self._wrong_type),
            "float_field": (
                "bad_payload",
                lambda i, r: _pack({**self.single, self.fields[-1].name: 0.5 + i}),
            ),
            "extra_field": ("bad_payload", lambda i, r: _pack({**self.single, f"x{i % 9}": 1})),
            "wrong_vector_length": ("bad_payload", self._wrong_length),
            "batch_wrong_column_length": ("bad_payload", self._batch_short),
            "batch_bad_n": ("bad_payload", lambda i, r: _pack({**self.env, "n": -(i % 3), "cols": {}})),
            "out_of_domain": ("out_of_range", self._out_of_domain),
            "integer_beyond_64_bits": ("out_of_range", self._beyond_64),
            "unsupported_version": (
                "unsupported_version",
                lambda i, r: _pack({**self.single, "ver": 2 + i % 5}),
            ),
            "wrong_collection": (
                "wrong_collection",
                lambda i, r: _pack({**self.single, "col": f"other{i % 50}"}),
            ),
            "wrong_mechanism": ("wrong_mechanism", lambda i, r: _pack({**self.single, "mech": "nope"})),
            "wrong_digest": (
                "config_mismatch",
                lambda i, r: _pack({**self.single, "cfg": (self.env["cfg"] + 1 + i) % 2**32}),
            ),
            "wrong_epsilon": (
                "config_mismatch",
                lambda i, r: _pack({**self.single, "eps": wire.collection.epsilon * 2 + i}),
            ),
            "stale_timestamp": (
                "stale",
                lambda i, r: _pack({**self.single, "ts": now_ms - self.max_age_ms - 1 - i}),
            ),
            "future_timestamp": (
                "future",
                lambda i, r: _pack({**self.single, "ts": now_ms + self.max_skew_ms + 1 + i}),
            ),
            "random_bytes": (ANY, lambda i, r: bytes(r.integers(0, 256, size=1 + i % 64, dtype=np.uint8))),
        }
        # kinds a schema cannot express: no integer field, or bitsets without padding bits
        if not any(f.kind != "bits" for f in self.fields):
            del self.kinds["integer_beyond_64_bits"]
            if not any(f.high % 8 for f in self.fields):
                del self.kinds["out_of_domain"]

    def _deep_field(self, i: int, r: np.random.Generator, container: type) -> bytes:
        nested: Any = i
        for _ in range(63):  # with the top-level map: 64 levels
            nested = {"x": nested} if container is dict else [nested]
        return _pack({**self.single, self.fields[0].name: nested})

    def _wrong_type(self, i: int, r: np.random.Generator) -> bytes:
        f = self.fields[i % len(self.fields)]
        return _pack({**self.single, f.name: 7 if f.kind == "bits" else "seven"})

    def _wrong_length(self, i: int, r: np.random.Generator) -> bytes:
        bits = [f for f in self.fields if f.kind == "bits"]
        if not bits:  # integer fields only: a byte vector where an integer belongs
            return _pack({**self.single, self.fields[0].name: bytes(2 + i % 5)})
        f = bits[i % len(bits)]
        return _pack({**self.single, f.name: bytes(f.nbytes + 1 + i % 3)})

    def _batch_short(self, i: int, r: np.random.Generator) -> bytes:
        n = 2 + i % 5
        cols = {f.name: bytes((n - 1) * (f.nbytes if f.kind == "bits" else 8)) for f in self.fields}
        return _pack({**self.env, "n": n, "cols": cols})

    def _out_of_domain(self, i: int, r: np.random.Generator) -> bytes:
        """An integer outside its domain, or a padding bit set in a bitset."""
        ints = [f for f in self.fields if f.kind != "bits"]
        if ints:
            f = ints[i % len(ints)]
            return _pack({**self.single, f.name: f.high + i % 3 if i % 2 else f.low - 1 - i % 3})
        f = next(f for f in self.fields if f.high % 8)
        value = bytearray(f.nbytes)
        value[-1] = 0x80
        return _pack({**self.single, f.name: bytes(value)})

    def _beyond_64(self, i: int, r: np.random.Generator) -> bytes:
        f = min((f for f in self.fields if f.kind != "bits"), key=lambda g: g.high)
        return _pack({**self.single, f.name: 2**64 - 1 - i % 100})

    def make(self, count: int, seed: int) -> list[Hostile]:
        """``count`` hostile messages cycling through every kind."""
        rng = np.random.default_rng(seed)
        names = sorted(self.kinds)
        out = []
        for i in range(count):
            kind = names[i % len(names)]
            reason, maker = self.kinds[kind]
            out.append(Hostile(kind, reason, maker(i, rng), self.now_ms))
        return out
