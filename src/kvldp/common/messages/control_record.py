"""The control record of an interactive collection: the open round and its published means.

PrivKVM is interactive: before round r >= 2 the server publishes the means m^(r-1), and
devices that do not hold a key perturb that mean instead of a fake 0. The aggregator
owns a compacted topic ``kvldp.<name>.control`` keyed by the collection name; its latest
record is a msgpack map

* ``format`` ``"kvldp-control"``, ``v`` 1, ``col`` the collection name, ``cfg`` its digest;
* ``round`` — 0-based index of the open round (when ``complete``: the rounds run);
* ``means`` — the d means published before that round, little-endian float64 (``bin``);
* ``md`` — :func:`kvldp.common.mechanisms.privkvm_rounds.means_digest` of (round, means), which every
  report of the round carries;
* ``complete`` — true once the last round closed (no report is taken any more).

Devices check everything before trusting a record (:func:`decode_control` raises
:class:`InvalidControl` with one line saying why): a record of another collection or
configuration, with the wrong number of means, means outside [-1, 1], or a digest that
does not match its means is never used to perturb.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.common.mechanisms.privkvm_rounds import means_digest
from kvldp.common.primitives import FloatArray

FORMAT = "kvldp-control"
VERSION = 1
_FIELDS = frozenset(("format", "v", "col", "cfg", "round", "means", "md", "complete"))


class InvalidControl(KvldpError):
    """A control record that cannot be used (corrupt, or of another collection)."""


def is_interactive(collection: Collection) -> bool:
    """Whether the collection's devices follow a control topic (PrivKVM's rounds)."""
    return isinstance(collection.mechanism, PrivKVM)


def interactive_mechanism(collection: Collection) -> PrivKVM:
    mechanism = collection.mechanism
    if not isinstance(mechanism, PrivKVM):
        raise InvalidControl(f"collection {collection.name} is not interactive ({mechanism.name})")
    return mechanism


def control_topic(collection: Collection) -> str:
    return f"kvldp.{collection.name}.control"


@dataclass(frozen=True)
class Control:
    """One valid control record."""

    collection: str
    digest: int
    round: int
    means: FloatArray
    means_digest: int
    complete: bool

    @classmethod
    def build(cls, collection: Collection, round_index: int, means: FloatArray, complete: bool) -> Control:
        values = np.ascontiguousarray(means, dtype=np.float64)
        return cls(
            collection.name,
            collection.digest,
            int(round_index),
            values,
            means_digest(round_index, values),
            bool(complete),
        )

    def to_bytes(self) -> bytes:
        return bytes(
            msgpack.packb(
                {
                    "format": FORMAT,
                    "v": VERSION,
                    "col": self.collection,
                    "cfg": self.digest,
                    "round": self.round,
                    "means": np.ascontiguousarray(self.means, dtype="<f8").tobytes(),
                    "md": self.means_digest,
                    "complete": self.complete,
                },
                use_bin_type=True,
            )
        )

    def describe(self) -> str:
        if self.complete:
            return f"complete after {self.round} round(s)"
        return f"round {self.round + 1} open (means digest {self.means_digest:08x})"


def decode_control(collection: Collection, data: bytes | None) -> Control:
    """The control record in ``data`` if it is a valid one of ``collection``."""
    mechanism = interactive_mechanism(collection)
    if data is None:
        raise InvalidControl("empty control record")
    try:
        obj: Any = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=8 * collection.d + 64)
    except Exception:
        raise InvalidControl("control record is not msgpack") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT or set(obj) != _FIELDS:
        raise InvalidControl("not a kvldp control record")
    if obj["v"] != VERSION:
        raise InvalidControl(f"control record version {obj['v']!r} (this kvldp reads {VERSION})")
    if obj["col"] != collection.name or obj["cfg"] != collection.digest:
        raise InvalidControl(
            f"control record of collection {obj['col']!r} (digest {obj['cfg']!r}), "
            f"not {collection.name!r} (digest {collection.digest})"
        )
    round_index, means, md, complete = obj["round"], obj["means"], obj["md"], obj["complete"]
    if type(round_index) is not int or not 0 <= round_index <= mechanism.rounds or type(complete) is not bool:
        raise InvalidControl(f"control record round {round_index!r} is not a round of this collection")
    if not complete and round_index >= mechanism.rounds:
        raise InvalidControl(f"control record opens round {round_index + 1} of {mechanism.rounds}")
    if not isinstance(means, bytes) or len(means) != 8 * collection.d:
        raise InvalidControl(f"control record means are not {collection.d} float64 values")
    values = np.frombuffer(means, dtype="<f8").astype(np.float64)
    if not all(math.isfinite(v) and -1.0 <= v <= 1.0 for v in values.tolist()):
        raise InvalidControl("control record means are not all in [-1, 1]")
    if type(md) is not int or md != means_digest(round_index, values):
        raise InvalidControl("control record digest does not match its means")
    return Control(collection.name, collection.digest, round_index, values, md, complete)
