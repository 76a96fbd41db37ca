"""The decoder against hostile input: every hostile kind gets its documented reason for
every mechanism; hypothesis and atheris (bounded time) find no input that makes it raise,
count a message twice, or accept an invalid report."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvldp.common.config.collection_file import parse_collection
from kvldp.common.mechanisms import names
from kvldp.common.messages.wire import REASONS, WireFormat
from kvldp.common.spec.collection_fields import InvalidCollection
from kvldp.reliability.hostile import ANY, HostileFactory

from support import run

NOW_MS = 1_800_000_000_000
FUZZ_SECONDS = 20


def wire_for(mechanism: str, d: int = 6) -> WireFormat:
    return WireFormat(
        parse_collection(
            {"name": "fz", "mechanism": mechanism, "epsilon": 1.0, "key_count": d, "value_range": [0.0, 1.0]}
        )
    )


def _configurations() -> list[tuple[str, int]]:
    """Every mechanism with 5, 8 and 16 keys (bitsets with and without padding bits),
    where it takes that many (the ioh family: at most 10)."""
    out = []
    for mechanism in names():
        for d in (5, 8, 16):
            try:
                wire_for(mechanism, d)
            except InvalidCollection:
                continue
            out.append((mechanism, d))
    return out


@pytest.mark.parametrize(("mechanism", "d"), _configurations())
def test_every_hostile_kind_gets_its_reason(mechanism: str, d: int) -> None:
    wire = wire_for(mechanism, d)
    factory = HostileFactory(wire, NOW_MS)
    hostile = factory.make(3 * len(factory.kinds), seed=d)
    decoded = wire.decode([h.value for h in hostile], [h.timestamp_ms for h in hostile])
    assert decoded.message.size == 0
    got = {i: reason for i, reason, _ in decoded.rejected}
    assert len(got) == len(hostile)
    wrong = {(h.kind, h.reason, got[i]) for i, h in enumerate(hostile) if h.reason not in (ANY, got[i])}
    assert not wrong


def check_accounting(wire: WireFormat, messages: list[bytes | None]) -> None:
    decoded = wire.decode(messages, [NOW_MS] * len(messages))
    rejected = [i for i, _, _ in decoded.rejected]
    assert len(set(rejected)) == len(rejected)
    accepted = set(np.unique(decoded.message).tolist())
    assert accepted.isdisjoint(rejected) and accepted | set(rejected) == set(range(len(messages)))
    assert all(reason in REASONS for _, reason, _ in decoded.rejected)
    if decoded.message.size:
        valid, _, _ = wire.mechanism.validate_coded(decoded.reports)
        assert valid.all()


WIRES = {m: wire_for(m) for m in ("kvue", "pckv_ue", "ioh_oue", "olh")}

leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.binary(max_size=40)
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def near_valid(draw: st.DrawFn, mechanism: str) -> bytes:
    """A valid envelope with fields added, dropped or replaced by arbitrary values."""
    wire = WIRES[mechanism]
    body: dict[str, object] = {**wire.envelope}
    for f in wire.fields:
        body[f.name] = bytes(f.nbytes) if f.kind == "bits" else f.low
    for key in draw(st.lists(st.sampled_from([*body, "ts", "rid", "eps", "n", "cols", "zz"]), max_size=3)):
        if draw(st.booleans()):
            body.pop(key, None)
        else:
            body[key] = draw(values)
    return bytes(msgpack.packb(body, use_bin_type=True))


@given(st.sampled_from(sorted(WIRES)), st.lists(st.binary(max_size=200) | st.none(), min_size=1, max_size=8))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arbitrary_bytes_never_break_the_decoder(mechanism: str, messages: list[bytes | None]) -> None:
    check_accounting(WIRES[mechanism], messages)


@given(st.data())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_near_valid_messages_never_break_the_decoder(data: st.DataObject) -> None:
    mechanism = data.draw(st.sampled_from(sorted(WIRES)))
    messages = data.draw(st.lists(near_valid(mechanism), min_size=1, max_size=6))
    check_accounting(WIRES[mechanism], messages)


def test_atheris_finds_nothing_in_bounded_time(tmp_path: Path) -> None:
    """libFuzzer-guided inputs for FUZZ_SECONDS, starting from valid messages."""
    pytest.importorskip("atheris")  # a dev dependency; absent only where no wheel exists
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, wire in WIRES.items():
        report = {f.name: bytes(f.nbytes) if f.kind == "bits" else f.low for f in wire.fields}
        (corpus / f"{name}-single").write_bytes(wire.encode_report(report, ts_ms=NOW_MS, rid=7))
        batch = {
            f.name: np.zeros(
                (3, f.nbytes) if f.kind == "bits" else 3, dtype=np.uint8 if f.kind == "bits" else np.int64
            )
            + (0 if f.kind == "bits" else f.low)
            for f in wire.fields
        }
        (corpus / f"{name}-batch").write_bytes(
            wire.encode_batch(batch, rids=np.arange(1, 4, dtype=np.uint64))
        )
    started = time.monotonic()
    fuzzer = str(Path(__file__).with_name("fuzz_wire.py"))
    result = run(
        [sys.executable, fuzzer, f"-max_total_time={FUZZ_SECONDS}", "-rss_limit_mb=3072", str(corpus)],
        timeout=FUZZ_SECONDS + 120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done" in result.stderr and time.monotonic() - started >= FUZZ_SECONDS
