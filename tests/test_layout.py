"""The canonical single-report layout: ordinary msgpack that any decoder reads, and that
the aggregator decodes all at once with exactly the general decoder's results."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.mechanisms import names
from kvldp.common.messages.wire import WireFormat

NOW = 1_800_000_000_000


def wire_for(mechanism: str, d: int = 6, name: str = "layout") -> WireFormat:
    return WireFormat(
        parse_collection(
            {"name": name, "mechanism": mechanism, "epsilon": 1.0, "key_count": d, "value_range": [0.0, 1.0]}
        )
    )


def sample(wire: WireFormat, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    users = KVData.from_pairs(wire.collection.d, [{0: 0.5}, {1: 0.9}, {}] * (n // 3 + 1))
    return {k: v[:n] for k, v in wire.mechanism.perturb_many(users.rows(0, n), rng).items()}


@pytest.mark.parametrize("mechanism", names())
def test_canonical_messages_are_plain_msgpack_and_decode_exactly(mechanism: str) -> None:
    wire = wire_for(mechanism, name="a-rather-long-collection-name-of-forty-chars")
    batch = sample(wire, 50, 1)
    rids = np.arange(1, 51, dtype=np.uint64) * 0x9E3779B97F4A7C15
    messages = wire.encode_many(batch, NOW, rids)
    assert len(messages) == 50 and {len(m) for m in messages} == {wire.layout.length}
    for i, m in enumerate(messages):  # any msgpack decoder reads them
        obj = msgpack.unpackb(m, raw=False)
        assert obj["ts"] == NOW and obj["rid"] == int(rids[i]) and obj["cfg"] == wire.collection.digest
        for f in wire.fields:
            expected = batch[f.name][i]
            assert obj[f.name] == (expected.tobytes() if f.kind == "bits" else int(expected))
    fast = wire.decode(messages, [NOW] * 50)
    # the same reports through the general decoder (minimal msgpack of the same maps)
    general = wire.decode([msgpack.packb(msgpack.unpackb(m)) for m in messages], [NOW] * 50)
    assert not fast.rejected and not general.rejected
    assert np.array_equal(fast.message, general.message) and np.array_equal(fast.rids, rids)
    for k in wire.names:
        assert (
            np.array_equal(fast.reports[k], general.reports[k])
            and fast.reports[k].dtype == general.reports[k].dtype
        )


def test_a_mixed_stream_keeps_message_order_and_every_rejection() -> None:
    wire = wire_for("kvue")
    batch = sample(wire, 6, 2)
    canonical = wire.encode_many(batch, NOW, np.arange(1, 7, dtype=np.uint64))
    other = wire.encode_batch({k: v[:2] for k, v in batch.items()}, ts_ms=NOW)
    bad_domain = bytearray(canonical[0])
    bad_domain[wire.layout.slots["j"].offset] = 200  # j = 200 >= d: same bytes, out of domain
    flipped = bytearray(canonical[1])
    assert flipped[11:17] == b"layout"
    flipped[11] = ord("L")  # a constant byte changed: not canonical, and another collection
    stale = wire.encode_many(batch, NOW - 8 * 86_400_000, np.arange(7, 13, dtype=np.uint64))[0]
    messages = [
        canonical[0],
        other,
        bytes(bad_domain),
        canonical[1],
        bytes(flipped),
        None,
        stale,
        canonical[2],
    ]
    decoded = wire.decode(messages, [NOW] * len(messages))
    assert decoded.message.tolist() == [0, 1, 1, 3, 7]
    assert decoded.rids.tolist() == [1, 0, 0, 2, 3]
    assert [(i, reason) for i, reason, _ in decoded.rejected] == [
        (2, "out_of_range"),
        (4, "wrong_collection"),
        (5, "undecodable"),
        (6, "stale"),
    ]
