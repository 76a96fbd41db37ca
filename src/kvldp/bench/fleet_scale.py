"""``kvldp bench fleet``: what one partition's per-device state costs as the fleet grows.

A collection with a ``[privacy]`` table keeps a device book per partition, and with
``max_reports_per_device`` a budget ledger; both hold a row per device ever seen. This
benchmark grows one partition's book through the real ingest path (:func:`plan` and
``apply``, the aggregator's fold without Kafka) to each size asked for, and at each size
measures, median of :data:`REPEATS` fetches (the fetches of new devices are the last
ones to reach the size):

* the time to fold a 1,000-report fetch of new devices and of known devices, and its
  ratio to the same at the smallest size (flat ingest: near 1);
* the bytes the per-device structures hold (device book, payload hashes, ledger windows,
  their hash tables), per device;
* checkpoints of the partition, written to files as ``kvldp aggregate --state-dir`` writes
  them: the one after a fetch of 1,000 known devices (a delta segment and the head), its
  time and bytes, in all and per device changed; and a base (every row), which a chain
  rewrites once its deltas outweigh it;
* recovery: the time to load the head, the base and the delta back, as a restart does;
  and a hand-over: the records a worker publishes for a base (its pieces, then the
  snapshot) read and decoded as the next owner does, without the network (the pieces
  they make are counted).

Configurations: a single-symbol mechanism (``grr``) and a unary one (``oue``), each
memoized and not, all with ``max_reports_per_device``. Devices are added in batches of
:data:`GROW_FETCH` (:meth:`Fleet.grow`); partitions beyond the first (``--partitions``) grow the same
way so that the process holds the whole fleet.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from kvldp.aggregator.device_segments import SegmentChain
from kvldp.aggregator.devices import charges_distinct_payloads
from kvldp.aggregator.ingest import plan
from kvldp.aggregator.ledger import Charges, device_hashes
from kvldp.aggregator.state import AggregatorState, CheckpointStore, PartitionState
from kvldp.aggregator.statetopic import Snapshots, decode, snapshot_records
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.schema import row
from kvldp.common.messages.wire import WireFormat
from kvldp.progress import Progress
from kvldp.sim.simulate import simulate

#: (mechanism, memoized) of each configuration
CONFIGS = (("grr", False), ("grr", True), ("oue", False), ("oue", True))
#: devices added at once when growing the book (not what is measured)
GROW_FETCH = 50_000
#: reports per measured fetch
FETCH = 1_000
#: measured fetches per size and kind (the median is reported)
REPEATS = 5
#: record time of every report (one budget window, one time bucket)
T0_MS = 1_800_000_000_000
LEDGER_KEY = b"fleet-bench-ledger-key"

COLUMNS = [
    "mechanism",
    "memoize",
    "devices",
    "fleet",
    "fetch_new_ms",
    "fetch_known_ms",
    "new_ratio",
    "known_ratio",
    "bytes_per_device",
    "payload_bytes_per_device",
    "checkpoint_ms",
    "checkpoint_kib",
    "checkpoint_bytes_per_changed_device",
    "base_ms",
    "base_mib",
    "restore_ms",
    "handover_ms",
    "pieces",
]


class Rec(NamedTuple):
    """A Kafka record as the ingest path and the state topic's readers read it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def fleet_collection(mechanism: str, memoize: bool) -> Collection:
    return parse_collection(
        {
            "name": f"fleet-{mechanism}-{'memo' if memoize else 'plain'}",
            "mechanism": mechanism,
            "epsilon": 2.0,
            "key_count": 16,
            "value_range": [0.0, 1.0],
            "aggregate": {
                "windows": ["1h", "all"],
                "estimators": ["unbiased"],
                "max_reports_per_device": 1000,
            },
            # a lifetime cap gives the non-memoized collection its privacy table (and so its book)
            "privacy": {"memoize": memoize, "lifetime_epsilon": 1e6},
        }
    )


class Fleet:
    """Feeds one partition of ``collection`` fetches of reports from numbered devices."""

    def __init__(self, collection: Collection, seed: int) -> None:
        self.collection = collection
        self.wire = WireFormat(collection)
        self.state = AggregatorState(collection)
        self.rng = np.random.default_rng(seed)
        self.devices = 0  # devices 0 .. devices - 1 have reported

    def _records(self, partition: int, devices: Iterator[int], count: int) -> list[Rec]:
        users = simulate(self.collection, "gaussian", count, int(self.rng.integers(2**31)))
        reports = self.collection.estimation_mechanism.perturb_many(users, self.rng)
        start = self.state.partition(partition).next_offset
        fields = self.wire.fields
        return [
            Rec(
                start + i,
                T0_MS,
                f"device-{partition}-{device}".encode(),
                self.wire.encode_report(row(reports, fields, i), T0_MS),
            )
            for i, device in zip(range(count), devices, strict=False)
        ]

    def fold(self, partition: int, records: list[Rec]) -> float:
        """Plan and apply one fetch; its seconds."""
        started = time.perf_counter()
        work = plan(self.state, self.wire, partition, records, LEDGER_KEY, T0_MS)
        assert work is not None
        work.apply(self.state)
        return time.perf_counter() - started

    def grow(self, partition: int, devices: int) -> None:
        """Add new devices until the partition has seen ``devices``: each one report,
        recorded in the device book and charged to the budget ledger as a fold records
        and charges it, in batches of :data:`GROW_FETCH` (without encoding and decoding
        the reports, which is not what this measures, and without the statistics, whose
        size does not depend on the devices)."""
        part = self.state.partition(partition)
        collection = self.collection
        window = T0_MS // (collection.aggregate.budget_window_s * 1000)
        memoize = collection.privacy.memoize
        while (seen := len(part.devices)) < devices:
            count = min(GROW_FETCH, devices - seen)
            keys = [f"device-{partition}-{d}".encode() for d in range(seen, seen + count)]
            tags = device_hashes(LEDGER_KEY, keys)
            users = simulate(collection, "gaussian", count, int(self.rng.integers(2**31)))
            reports = collection.estimation_mechanism.perturb_many(users, self.rng)
            rows = part.devices.add(tags)
            buckets = self.state.buckets_of(np.full(count, T0_MS, np.int64))
            part.book.record(rows, tags, reports, buckets, memoize, charges_distinct_payloads(collection))
            part.ledger.commit(Charges({window: (tags, np.ones(count, np.int64))}), part.devices)

    def new_fetch(self, partition: int) -> list[Rec]:
        seen = len(self.state.partition(partition).devices)
        return self._records(partition, iter(range(seen, seen + FETCH)), FETCH)

    def known_fetch(self, partition: int) -> list[Rec]:
        seen = len(self.state.partition(partition).devices)
        chosen = self.rng.integers(0, seen, size=FETCH)
        return self._records(partition, iter(chosen.tolist()), FETCH)


def device_bytes(part: PartitionState) -> int:
    """Bytes held by one partition's per-device structures (with their room to grow)."""
    return part.devices.nbytes + part.book.nbytes + part.ledger.nbytes


def payload_bytes(part: PartitionState) -> int:
    """Bytes of the latest reports a memoized book keeps (with their room to grow)."""
    _, latest = part.book.latest_of(len(part.devices))
    return sum(column.base.nbytes if column.base is not None else column.nbytes for column in latest.values())


def _checkpoints(fleet: Fleet) -> dict[str, Any]:
    """Checkpoint partition 0 to files as the aggregator does: a base (the whole rows),
    then the checkpoint after one fetch of known devices (a delta), then a restart (the
    head, base and delta read back). A worker's hand-over decodes the same chain."""
    single = AggregatorState(fleet.collection)
    part = single.partitions[0] = fleet.state.partition(0)
    part.chain = SegmentChain()  # start a chain: the first checkpoint is a base
    with tempfile.TemporaryDirectory(prefix="kvldp-fleet-") as directory:
        store = CheckpointStore(directory, fleet.collection)
        started = time.perf_counter()
        store.save(store.take(single))
        base_s = time.perf_counter() - started
        base_bytes = part.chain.entries[0][1]
        fleet.fold(0, fleet.known_fetch(0))
        started = time.perf_counter()
        delta = store.take(single)
        store.save(delta)
        delta_s = time.perf_counter() - started
        started = time.perf_counter()
        restored = store.load()
        restore_s = time.perf_counter() - started
    assert restored is not None and len(restored.partitions[0].devices) == len(part.devices)
    part.chain = SegmentChain()
    records = [
        Rec(0, 0, key, value, tuple(headers)) for key, value, headers in snapshot_records(single, 0)[1]
    ]
    started = time.perf_counter()
    held = Snapshots(pieces=True)
    held.take(records)
    taken = decode(fleet.collection, 0, held[0].value, held.reader(0))
    handover_s = time.perf_counter() - started
    assert len(taken.devices) == len(part.devices)
    written = len(delta.segments[0].data)
    return {
        "checkpoint_ms": round(delta_s * 1000, 1),
        "checkpoint_kib": round((written + len(delta.head)) / 1024, 1),
        "checkpoint_bytes_per_changed_device": round(written / FETCH, 1),
        "base_ms": round(base_s * 1000, 1),
        "base_mib": round(base_bytes / 2**20, 2),
        "restore_ms": round(restore_s * 1000, 1),
        "handover_ms": round(handover_s * 1000, 1),
        "pieces": len(records) - 1,
    }


def _median_fold(fleet: Fleet, make: Any) -> float:
    times = []
    for _ in range(REPEATS):
        records = make(0)
        times.append(fleet.fold(0, records))
    return statistics.median(times)


def measure(
    mechanism: str, memoize: bool, sizes: list[int], partitions: int, seed: int
) -> list[dict[str, Any]]:
    fleet = Fleet(fleet_collection(mechanism, memoize), seed)
    rows: list[dict[str, Any]] = []
    first: dict[str, float] = {}
    for size in sizes:
        if size == sizes[-1]:  # the rest of the fleet, held in the same process
            for partition in range(1, partitions):
                fleet.grow(partition, size)
        fleet.grow(0, size - REPEATS * FETCH)  # the measured fetches of new devices bring it to size
        new_s = _median_fold(fleet, fleet.new_fetch)
        known_s = _median_fold(fleet, fleet.known_fetch)
        first = first or {"new": new_s, "known": known_s}
        part = fleet.state.partition(0)
        held = len(part.devices)
        checkpoint = _checkpoints(fleet)
        rows.append(
            {
                "mechanism": mechanism,
                "memoize": memoize,
                "devices": held,
                "fleet": sum(len(p.devices) for p in fleet.state.partitions.values()),
                "fetch_new_ms": round(new_s * 1000, 2),
                "fetch_known_ms": round(known_s * 1000, 2),
                "new_ratio": round(new_s / first["new"], 2),
                "known_ratio": round(known_s / first["known"], 2),
                "bytes_per_device": round(device_bytes(part) / held, 1),
                "payload_bytes_per_device": round(payload_bytes(part) / held, 1),
                **checkpoint,
            }
        )
    return rows


def bench_fleet(
    sizes: list[int], partitions: int, seed: int, configs: tuple[tuple[str, bool], ...] = CONFIGS
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with Progress(len(configs), "fleet") as progress:
        for mechanism, memoize in configs:
            rows += measure(mechanism, memoize, sorted(sizes), partitions, seed)
            progress.advance()
    return rows
