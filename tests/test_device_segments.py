"""Checkpoints of per-device rows in segments: a chain restores every row exactly however
often the stream is checkpointed and restarted, a checkpoint writes in proportion to the
rows that changed, the chain stays within twice the rows' size, and a segment that was
not stored, is missing or is damaged is never taken for state."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvldp.aggregator import statetopic
from kvldp.aggregator.ingest import plan
from kvldp.aggregator.state import AggregatorState, CheckpointMismatch, CheckpointStore
from kvldp.aggregator.statetopic import Snapshots, decode, piece_keys
from kvldp.common.config.collection import Collection
from kvldp.common.messages.wire import WireFormat

from support import Rec
from support.pipeline import unique_collection

T0 = 1_800_000_000_000
HOUR_MS = 3_600_000


def collection(memoize: bool) -> Collection:
    return unique_collection(
        "kvue",
        4,
        privacy={"memoize": memoize, "lifetime_epsilon": 1000.0},
        windows=["2h", "all"],
        max_reports_per_device=5,
        budget_window="1h",
    )


def stream(c: Collection, n: int, devices: int, seed: int, start: int = 0) -> list[Rec]:
    """Single reports of ``devices`` devices over a few hours, some repeated byte for byte
    (a device's memoized report), a tenth re-sent (the same report id: duplicates)."""
    wire, rng = WireFormat(c), np.random.default_rng(seed)
    out = []
    for i in range(n):
        ts = T0 + i * (4 * HOUR_MS // n)
        device = int(rng.zipf(1.3)) % devices
        if out and rng.random() < 0.1:  # a resend of an earlier report: a duplicate
            earlier = out[int(rng.integers(0, len(out)))]
            out.append(Rec(start + i, ts, earlier.key, earlier.value))
            continue
        body = {"j": device % 4 if rng.random() < 0.7 else int(rng.integers(0, 4)), "s": device % 3}
        out.append(Rec(start + i, ts, b"dev-%d" % device, wire.encode_report(body, ts, rid=start + i + 1)))
    return out


def fold(state: AggregatorState, records: list[Rec]) -> list[tuple[int, str]]:
    work = plan(state, WireFormat(state.collection), 0, records, b"k")
    assert work is not None
    work.apply(state)
    return [(r.offset, r.reason) for r in work.rejected]


def rows(state: AggregatorState) -> dict[str, Any]:
    """Every per-device row of partition 0 and its remembered report ids, as plain lists."""
    s = state.partition(0)
    n = len(s.devices)
    bucket, latest = s.book.latest_of(n)
    return {
        "tags": s.devices.tags.tolist(),
        "charged": s.book.charged.values(n).tolist(),
        "tally": dict(s.book.devices_by_charges),
        "windows": {w: c.values(n).tolist() for w, c in s.ledger.windows.items()},
        "pairs": sorted(s.book.pairs.tags.tolist()),
        "bucket": bucket.tolist(),
        "latest": {name: column.tolist() for name, column in latest.items()},
        "recent": (s.recent.ordered().tolist(), s.recent.ordered_times().tolist()),
    }


@pytest.mark.parametrize("memoize", [False, True])
def test_a_chain_restores_every_row_however_the_stream_is_checkpointed(memoize: bool, tmp_path: Path) -> None:
    c = collection(memoize)
    records = stream(c, 3000, 400, seed=7)
    cuts = np.r_[0, np.sort(np.random.default_rng(7).choice(np.arange(1, 3000), 59, replace=False)), 3000]
    straight, resumed = AggregatorState(c), AggregatorState(c)
    store = CheckpointStore(tmp_path, c)
    straight_letters, resumed_letters, bases, deltas = [], [], 0, 0
    restarts = np.random.default_rng(8).random(60) < 0.3
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts.tolist())):
        straight_letters += fold(straight, records[lo:hi])
        resumed_letters += fold(resumed, records[lo:hi])
        checkpoint = store.take(resumed)
        if 0 in checkpoint.segments:  # a chain of one segment is a base
            bases += len(resumed.partition(0).chain.entries) == 1
            deltas += len(resumed.partition(0).chain.entries) > 1
        store.save(checkpoint)
        if restarts[i]:
            loaded = store.load()
            assert loaded is not None
            assert rows(loaded) == rows(resumed)
            resumed = loaded
    assert deltas > 20 and bases >= 2  # deltas, and a new base once they outgrew the last
    assert resumed_letters == straight_letters and ("budget_exceeded" in {r for _, r in straight_letters})
    assert resumed.duplicates_total == straight.duplicates_total > 100
    assert rows(resumed) == rows(straight)
    assert resumed.all_stats() == straight.all_stats()
    assert sorted(resumed.device_spent().tolist()) == sorted(straight.device_spent().tolist())
    listed = {f"0.{name}" for name, _ in resumed.partition(0).chain.entries}
    assert {p.name for p in store.segments.iterdir()} == listed  # nothing obsolete left behind


def known_fleet(c: Collection, devices: int) -> AggregatorState:
    wire = WireFormat(c)
    state = AggregatorState(c)
    fold(
        state,
        [
            Rec(i, T0, b"dev-%d" % i, wire.encode_report({"j": i % 4, "s": i % 3}, T0, rid=i + 1))
            for i in range(devices)
        ],
    )
    return state


@pytest.mark.parametrize("memoize", [False, True])
def test_a_checkpoint_writes_in_proportion_to_the_rows_changed(memoize: bool) -> None:
    """100 devices of 20,000 report between checkpoints: the segment holds their rows (a
    row index, a charge, a window count, and memoized their latest report, a bucket and a
    payload hash, in at most 40 bytes) and their reports' ids (16 bytes each), not the
    others'; the chain never passes twice its base, and a new base comes only once the
    deltas since the last outweigh it."""
    c = collection(memoize)
    state = known_fleet(c, 20_000)
    s = state.partition(0)
    base = s.take_segment()
    assert base is not None and len(base.data) > 20_000 * 16
    wire, rng, offset = WireFormat(c), np.random.default_rng(3), 20_000
    sizes, rebased = [], 0
    for k in range(400):
        chosen = rng.choice(20_000, 100, replace=False)
        ts = T0 + 1000 * (k + 1)
        batch = [
            Rec(
                offset + i,
                ts,
                b"dev-%d" % d,
                wire.encode_report({"j": (d + k) % 4, "s": d % 3}, ts, rid=offset + i + 1),
            )
            for i, d in enumerate(chosen.tolist())
        ]
        offset += len(batch)
        fold(state, batch)
        before = list(s.chain.entries)
        segment = s.take_segment()
        assert segment is not None
        if segment.obsolete:
            rebased += 1
            assert segment.obsolete == before
            assert sum(size for _, size in before[1:]) + 100 * (40 + 16) > before[0][1]
        else:
            sizes.append(len(segment.data))
        chain = sum(size for _, size in s.chain.entries)
        assert chain <= 2 * s.chain.entries[0][1] + 100 * (40 + 16) + 1024
    assert max(sizes) < 100 * (40 + 16) + 1024
    assert rebased >= 1


def test_a_segment_never_listed_is_removed_and_one_not_stored_starts_a_new_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = collection(False)
    state = known_fleet(c, 500)
    store = CheckpointStore(tmp_path, c)
    store.save(store.take(state))
    fold(state, stream(c, 50, 800, seed=1, start=500))
    import kvldp.aggregator.state as state_module

    real = state_module.write_atomically

    def crash_at_the_head(path: Path, data: bytes, mode: int = 0o600) -> None:
        if path == store.path:
            raise OSError("disk full")
        real(path, data, mode)

    monkeypatch.setattr(state_module, "write_atomically", crash_at_the_head)
    with pytest.raises(OSError, match="disk full"):
        store.save(store.take(state))
    monkeypatch.setattr(state_module, "write_atomically", real)
    assert len(list(store.segments.iterdir())) == 2  # the base, and a delta no head lists
    loaded = store.load()
    assert loaded is not None and len(list(store.segments.iterdir())) == 1
    assert state.partition(0).chain.rebase
    after = store.take(state)
    assert after.segments[0].obsolete  # a new base: the delta that was lost is not relied on
    store.save(after)
    again = store.load()
    assert again is not None and rows(again) == rows(state)


def test_a_missing_or_damaged_segment_is_refused(tmp_path: Path) -> None:
    c = collection(True)
    state = known_fleet(c, 300)
    store = CheckpointStore(tmp_path, c)
    store.save(store.take(state))
    (segment,) = store.segments.iterdir()
    data = segment.read_bytes()
    segment.write_bytes(data[:-10])
    with pytest.raises(CheckpointMismatch, match=r"holds \d+ bytes"):
        store.load()
    segment.write_bytes(data[:10] + bytes(len(data) - 10))
    with pytest.raises(CheckpointMismatch, match="corrupt"):
        store.load()
    segment.unlink()
    with pytest.raises(CheckpointMismatch, match="FileNotFoundError"):
        store.load()


class Record:
    def __init__(self, key: str, value: bytes | None, headers: list[tuple[str, bytes]] = []) -> None:  # noqa: B006
        self.key, self.value, self.headers, self.timestamp = key.encode(), value, headers, 0


def test_a_snapshot_is_put_together_from_its_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records as :meth:`StateTopic.publish` sends them: a segment cut into pieces, then the
    head. A follower puts the segment together and restores every row; the exporter's
    reader, which keeps no pieces, reads the statistics and the spent tally alone;
    tombstones take pieces away."""
    monkeypatch.setattr(statetopic, "PIECE_BYTES", 4096)
    c = collection(True)
    state = known_fleet(c, 2000)
    segment = state.partition(0).take_segment()
    assert segment is not None
    keys = piece_keys(0, segment.name, len(segment.data))
    assert len(keys) == -(-len(segment.data) // 4096) > 3
    headers = [("resets", b"0"), ("next_offset", b"2000")]
    records = [Record(k, segment.data[i * 4096 : (i + 1) * 4096], headers) for i, k in enumerate(keys)]
    records.append(Record("0", state.head_bytes([0]), headers))
    worker, exporter = Snapshots(pieces=True), Snapshots(pieces=False)
    assert worker.take(records) == exporter.take(records) == {0}
    restored = decode(c, 0, worker[0].value, worker.reader(0))
    assert len(restored.devices) == 2000 and restored.chain.entries == state.partition(0).chain.entries
    light = decode(c, 0, exporter[0].value, rows=False)
    assert light.book.devices_by_charges == state.partition(0).book.devices_by_charges
    assert not exporter.pieces.get(0)
    with pytest.raises(CheckpointMismatch, match="no piece"):
        decode(c, 0, exporter[0].value, exporter.reader(0))
    stray = Record("0/gone.1/0", b"x")
    stray.timestamp = 1_000
    worker.take([stray])
    chain = state.partition(0).chain.entries
    assert worker.strays(0, chain, before_ms=1_001) == ["0/gone.1/0"]  # its writer is gone
    assert worker.strays(0, chain, before_ms=1_000) == []  # it may still be publishing
    worker.take([Record(keys[-1], None)])  # a tombstone
    with pytest.raises(CheckpointMismatch, match=r"holds \d+ bytes"):
        decode(c, 0, worker[0].value, worker.reader(0))


def test_remembered_report_ids_are_checkpointed_in_proportion_to_the_new_ones(tmp_path: Path) -> None:
    """A collection without per-device rows still remembers report ids: they live in the
    segments, not the head, each checkpoint adds the new ones (16 bytes each), and after a
    restart a resend of a report remembered before is still a duplicate."""
    c = unique_collection("kvue", 4, windows=["all"])
    wire, store = WireFormat(c), CheckpointStore(tmp_path, c)
    state = AggregatorState(c)

    def records(start: int, n: int) -> list[Rec]:
        return [
            Rec(
                start + i,
                T0 + start + i,
                b"d",
                wire.encode_report({"j": i % 4, "s": i % 3}, T0, rid=start + i + 1),
            )
            for i in range(n)
        ]

    first = records(0, 5000)
    fold(state, first)
    store.save(store.take(state))
    assert store.path.stat().st_size < 5000 * 16 / 4  # the ids are not in the head
    fold(state, records(5000, 100))
    delta = store.take(state)
    assert len(delta.segments[0].data) < 100 * 16 + 512
    store.save(delta)
    loaded = store.load()
    assert loaded is not None
    assert loaded.partition(0).recent.ordered().tolist() == state.partition(0).recent.ordered().tolist()
    resent = Rec(5100, T0 + 5100, b"d", first[10].value)
    work = plan(loaded, wire, 0, [resent], b"k")
    assert work is not None and work.duplicates == 1
