"""``WireFormat.count``, the one-message check the gateway runs on each body, gives
exactly :meth:`WireFormat.decode`'s verdict on that message: the same count, or the
same refusal reason, for well-formed reports of every mechanism and for each way a
message can be wrong."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import numpy as np
import pytest

from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.mechanisms import names
from kvldp.common.messages.wire import WireError, WireFormat

NOW = 1_800_000_000_000
DAY_MS = 86_400_000


def wire_for(mechanism: str, d: int = 6) -> WireFormat:
    return WireFormat(
        parse_collection(
            {
                "name": "count",
                "mechanism": mechanism,
                "epsilon": 1.0,
                "key_count": d,
                "value_range": [0.0, 1.0],
            }
        )
    )


def verdict_of_decode(wire: WireFormat, message: bytes | None, ts: int | None) -> int | str:
    decoded = wire.decode([message], None if ts is None else [ts])
    return decoded.rejected[0][1] if decoded.rejected else int(decoded.message.size)


def verdict_of_count(wire: WireFormat, message: bytes | None, ts: int | None) -> int | str:
    try:
        return wire.count(message, ts)
    except WireError as exc:
        return exc.reason


def variants(wire: WireFormat, rng: random.Random) -> list[bytes | None]:
    """Messages of every kind: canonical and general single reports, batches, and each
    way a field, the envelope, the options or the bytes can be wrong."""
    n = 12
    users = KVData.from_pairs(wire.collection.d, [{0: 0.5}, {1: 0.9}, {}, {2: 0.1}] * n)
    batch = {
        k: v[:n]
        for k, v in wire.mechanism.perturb_many(
            users.rows(0, n), np.random.default_rng(rng.randrange(2**32))
        ).items()
    }
    canonical = wire.encode_many(batch, NOW, np.arange(1, n + 1, dtype=np.uint64))
    out: list[bytes | None] = [*canonical, None, b"", b"\xc1", b"\x93\x01\x02\x03", bytes(wire.cap + 1)]
    out.append(wire.encode_batch(batch, ts_ms=NOW))
    out.append(wire.encode_batch({k: v[:1] for k, v in batch.items()}))
    for message in canonical:
        obj: dict[str, Any] = msgpack.unpackb(message, raw=False)
        out.append(msgpack.packb(obj))  # not canonical: the general decoder's shape
        for f in wire.fields:
            value = obj[f.name]
            if f.kind == "bits":
                flipped = bytearray(value)
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
                padded = bytearray(value)
                padded[-1] |= 0x80
                candidates: list[Any] = [
                    bytes(flipped),
                    bytes(padded),
                    bytes(len(value)),
                    b"\xff" * len(value),
                    value[:-1],
                    7,
                ]
            else:
                bounds = [f.low - 1, f.low, f.high - 1, f.high, 2**63, -(2**63), 2**64 - 1]
                # what msgpack can carry of them, and values of other types
                candidates = [v for v in bounds if -(2**63) <= v < 2**64] + ["3", 1.0, None]
            for candidate in candidates:
                out.append(msgpack.packb({**obj, f.name: candidate}))
        for key, bad in [
            ("ts", NOW - 30 * DAY_MS),
            ("ts", NOW + DAY_MS),
            ("ts", -1),
            ("ts", 1.5),
            ("rid", 0),
            ("rid", 2**64 - 1),
            ("rid", "x"),
            ("eps", 1.0),
            ("eps", 2.0),
            ("eps", "1"),
            ("ver", 2),
            ("ver", "1"),
            ("col", "other"),
            ("mech", "grr"),
            ("cfg", obj["cfg"] ^ 1),
            ("cfg", -1),
            ("n", 1),
            ("extra", 1),
            ("ts", None),
            ("ts", True),
            ("rid", None),
            ("rid", -1),
            ("eps", None),
            ("eps", True),
            ("col", b"count"),
            (wire.names[0], True),
        ]:
            out.append(msgpack.packb({**obj, key: bad}))
        out += duplicated_keys(obj, wire.names[0])
        out.append(msgpack.packb({k.encode(): v for k, v in obj.items()}))  # bin keys
        out.append(message.replace(wire.collection.name.encode(), b"\xff" * len(wire.collection.name)))
        for key in ["ts", "rid", "cfg", wire.names[0]]:
            out.append(msgpack.packb({k: v for k, v in obj.items() if k != key}))
        cut = bytearray(message)
        out.append(bytes(cut[: rng.randrange(1, len(cut))]))
        cut[rng.randrange(len(cut))] ^= 0xFF
        out.append(bytes(cut))
    return out


def duplicated_keys(obj: dict[str, Any], name: str) -> list[bytes]:
    """The map of ``obj`` with a second entry for ``name`` (msgpack allows it; the last
    one counts), once with a bad value first and once with a bad value last."""
    good = obj[name]
    bad = b"\x00" * 99 if isinstance(good, bytes) else "x"
    out = []
    for first, last in ((bad, good), (good, bad)):
        entries = [msgpack.packb(k) + msgpack.packb(v) for k, v in obj.items() if k != name]
        entries += [msgpack.packb(name) + msgpack.packb(first), msgpack.packb(name) + msgpack.packb(last)]
        out.append(bytes([0x80 | len(entries)]) + b"".join(entries))
    return out


@pytest.mark.parametrize("mechanism", names())
def test_count_gives_the_decoders_verdict_on_every_kind_of_message(mechanism: str) -> None:
    wire = wire_for(mechanism)
    rng = random.Random(mechanism)
    messages = variants(wire, rng)
    taken = refused = 0
    for message in messages:
        for ts in (NOW, None):
            expected = verdict_of_decode(wire, message, ts)
            assert verdict_of_count(wire, message, ts) == expected, (message, ts)
            taken += isinstance(expected, int)
            refused += isinstance(expected, str)
    # both verdicts occur many times: the comparison is not of refusals alone
    assert taken >= 24 and refused >= 100
