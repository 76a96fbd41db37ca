"""The wire format: round trips for every mechanism, and hostile input classified, never raised."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.schema import row
from kvldp.common.mechanisms import names
from kvldp.common.messages.wire import REASONS, WireFormat

from support import FAST_PARAMS, population_for


def collection_for(name: str, d: int = 4):  # type: ignore[no-untyped-def]
    return parse_collection(
        {
            "name": f"c-{name}",
            "mechanism": name,
            "epsilon": 1.0,
            "key_count": d,
            "value_range": [-1.0, 1.0],
            "params": FAST_PARAMS.get(name, {}),
        }
    )


@pytest.mark.parametrize("name", names())
def test_single_and_batch_messages_round_trip(name: str) -> None:
    c = collection_for(name)
    wire = WireFormat(c)
    rng = np.random.default_rng(0)
    batch = c.mechanism.perturb_many(population_for(name, 60, c.d, rng), rng)
    n = next(iter(batch.values())).shape[0]
    singles = [wire.encode_report(row(batch, wire.fields, i), ts_ms=5, rid=i) for i in range(n)]
    half = n // 2
    batches = [
        wire.encode_batch({k: v[:half] for k, v in batch.items()}),
        wire.encode_batch({k: v[half:] for k, v in batch.items()}, ts_ms=9),
    ]
    for messages in (singles, batches):
        decoded = wire.decode(messages)
        assert decoded.rejected == []
        for k in batch:
            np.testing.assert_array_equal(decoded.reports[k], batch[k])
        assert c.mechanism.new_stats().fold(decoded.reports) == c.mechanism.new_stats().fold(batch)


def test_hostile_messages_get_reasons() -> None:
    c = collection_for("kvue", 5)
    wire = WireFormat(c)
    env = dict(wire.envelope)
    good = wire.encode_report({"j": 1, "s": 2})
    cases = {
        # arrays never occur in kvldp messages: the decoder refuses them before allocating
        "undecodable": [
            good[:-1],
            b"\xc1",
            good + b"\x00",
            b"\xdd\xff\xff\xff\xff",
            b"\x91" * 64 + b"\xc0",
            msgpack.packb([1, 2]),
            msgpack.packb({1: 2}),
        ],  # and non-string map keys
        "bad_envelope": [msgpack.packb("hello"), msgpack.packb({**env, "cfg": "x", "j": 1, "s": 1})],
        "unsupported_version": [msgpack.packb({**env, "ver": 2, "j": 1, "s": 1})],
        "wrong_collection": [msgpack.packb({**env, "col": "other", "j": 1, "s": 1})],
        "wrong_mechanism": [msgpack.packb({**env, "mech": "grr", "j": 1, "s": 1})],
        "config_mismatch": [msgpack.packb({**env, "cfg": env["cfg"] ^ 1, "j": 1, "s": 1})],
        "bad_payload": [
            msgpack.packb({**env, "j": 1.5, "s": 1}),
            msgpack.packb({**env, "j": 1}),
            msgpack.packb({**env, "j": 1, "s": 1, "zz": 3}),
            msgpack.packb({**env, "n": 2, "cols": {"j": b"\x00", "s": b"\x00\x00"}}),
        ],
        "out_of_range": [
            msgpack.packb({**env, "j": 5, "s": 1}),
            msgpack.packb({**env, "j": -1, "s": 0}),
            msgpack.packb({**env, "j": 2**64 - 1, "s": 0}),
        ],
        "oversize": [b"\x00" * (c.aggregate.max_message_bytes + 1)],
    }
    messages = [good] + [m for ms in cases.values() for m in ms]
    decoded = wire.decode(messages)
    assert decoded.message.tolist() == [0]
    got = [reason for _, reason, _ in decoded.rejected]
    assert got == [reason for reason, ms in cases.items() for _ in ms]
    assert set(got) <= set(REASONS)


def test_invalid_report_in_a_batch_rejects_the_whole_message() -> None:
    c = collection_for("pckv_grr", 4)
    wire = WireFormat(c)
    batch = {"k": np.array([0, 4, 2]), "v": np.array([1, 1, -1])}  # k = d must carry v = 0
    decoded = wire.decode([wire.encode_batch(batch), wire.encode_report({"k": 1, "v": -1})])
    assert decoded.rejected == [(0, "invalid_report", "k = 4 (dummy) must carry v = 0")]
    assert decoded.message.tolist() == [1]


def test_gateway_batches_stay_under_the_cap() -> None:
    c = collection_for("oue", 500)
    wire = WireFormat(c)
    rng = np.random.default_rng(1)
    users = population_for("oue", wire.max_batch(), c.d, rng)
    message = wire.encode_batch(c.mechanism.perturb_many(users, rng))
    assert len(message) <= c.aggregate.max_message_bytes


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_decoder_never_raises_on_garbage(data: bytes) -> None:
    wire = WireFormat(collection_for("kvue", 3))
    decoded = wire.decode([data])
    assert len(decoded.rejected) + decoded.message.size >= 1


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b"\x01\x02", "bytes follow the end of the message's msgpack value"),
        (b"\xc1", "not msgpack: a byte no msgpack value starts with"),
        (b"\x93\x01\x02\x03", "not a message: an array (messages hold none)"),
        (b"\xd4\x01\x01", "not a message: an extension type (messages hold none)"),
        (b"\x82\xa3ver\x01", "the msgpack value is cut short"),
        (b"\x81\x01\x02", "a map key that is not a string"),
        (b"\x81\xa2\xff\xfe\x01", "a string that is not UTF-8"),
    ],
)
def test_undecodable_bytes_are_named_in_kvldps_words(data: bytes, detail: str) -> None:
    """The detail of an ``undecodable`` refusal (the DLQ header, the gateway's answer) says
    what is wrong with the bytes, not which msgpack function failed."""
    decoded = WireFormat(collection_for("grr")).decode([data])
    assert decoded.rejected == [(0, "undecodable", detail)]
