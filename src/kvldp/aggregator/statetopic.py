"""The compacted state topic ``kvldp.<name>.state``: per-partition snapshots for scale-out.

A worker publishes, for every input partition it owns, the snapshot
``{next_offset, statistics, filters}`` keyed by the partition number (on a timer and
before giving a partition up in a rebalance, waiting until every in-sync replica holds it:
``acks=all``).
The next owner loads the latest snapshot of the partition and seeks to its offset, so
state moves between workers with Kafka alone. An exporter reads the latest snapshot of
every partition without joining the consumer group, merges and refits.

Snapshots use the checkpoint format of :mod:`kvldp.aggregator.state` with one partition, so a
snapshot can never be loaded into a differently configured collection. The topic is
created with ``cleanup.policy=compact``.

Per-device rows (the device book, the budget ledger) grow with the fleet, so a snapshot
does not carry them: it lists its partition's chain of segments
(:mod:`kvldp.aggregator.device_segments`), and each snapshot publishes only the new
segment, the rows changed since the last, cut into records of at most
:data:`PIECE_BYTES` keyed ``<partition>/<segment>/<piece>``. Pieces have keys of their own,
so compaction keeps them; once a new base replaces a chain, its pieces are deleted with
tombstones. No record comes near the broker's message size limit because of the fleet:
what a snapshot record holds beside the statistics is bounded by the windows and filters.

Which snapshot is current. Every snapshot carries its epoch (``resets``) and
``next_offset`` as record headers, and readers keep, per partition, the one with the
greatest ``(epoch, next_offset)`` — the newest on ties. Every snapshot is the fold of a
prefix of the same partition, so this is always a consistent state, and a stalled
"zombie" worker that publishes late cannot move a running reader's partition backwards.
Compaction keeps the last snapshot *written* per key, though: until the partition's owner
publishes again, a zombie's late snapshot may be the only one left, and the next owner
then reads on from its older offset — exact all the same (a consistent prefix), as long
as the topic's retention still holds the records after it. Readers read every record, so
they are also correct on brokers that do not compact (Tansu).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from kvldp.aggregator.device_segments import Segment
from kvldp.aggregator.state import AggregatorState, CheckpointMismatch, PartitionState, SegmentReader
from kvldp.common.config.collection import Collection
from kvldp.kafka.client_config import KafkaConfig, as_kafka_config
from kvldp.kafka.client_start import start_or_close
from kvldp.kafka.reachability import PROBE_INTERVAL_S, transient
from kvldp.kafka.topic_partitions import topic_partitions

#: snapshots of wide statistics (IOH at d = 10: 0.5 MB per bucket) must fit one message
MAX_SNAPSHOT_BYTES = 64 << 20
#: a former owner's pieces are deleted once it has written nothing for this long (its
#: consumer's max.poll.interval.ms: a member silent that long has left the group)
GONE_WRITER_S = 300
#: segments of per-device rows are cut into records of at most this many bytes: half of
#: Kafka's default limit (``message.max.bytes``, 1 MiB), which a managed cluster may keep
PIECE_BYTES = 1 << 19


def decode(
    collection: Collection,
    partition: int,
    data: bytes,
    segment: SegmentReader | None = None,
    rows: bool = True,
) -> PartitionState:
    """The state of ``partition`` in a snapshot (:class:`CheckpointMismatch` if the
    snapshot is another collection's, corrupt, or of another partition), its segments read
    with ``segment``; ``rows=False`` leaves the per-device rows out."""
    partitions = AggregatorState.from_bytes(collection, data, segment, rows).partitions
    if set(partitions) != {partition}:
        raise CheckpointMismatch(f"snapshot keyed {partition} holds partitions {sorted(partitions)}")
    return partitions[partition]


def piece_keys(partition: int, name: str, size: int) -> list[str]:
    """The record keys of the pieces of segment ``name`` (``size`` bytes) of ``partition``."""
    return [f"{partition}/{name}/{i}" for i in range(max(1, -(-size // PIECE_BYTES)))]


@dataclass(frozen=True)
class Entry:
    """The current snapshot of one input partition, as read from the state topic."""

    rank: tuple[int, int]
    value: bytes
    timestamp_ms: int


class Snapshots(dict[int, Entry]):
    """Current snapshot per input partition; :meth:`take` folds in newly read records.
    With ``pieces``, also the pieces of segments of per-device rows (by partition and
    key), which a snapshot's chain lists."""

    def __init__(self, pieces: bool = False) -> None:
        super().__init__()
        self.keeps_pieces = pieces
        self.pieces: dict[int, dict[str, bytes]] = {}
        #: the time (ms) of the latest piece read from each writer
        self.writers: dict[str, int] = {}

    def take(self, records: Iterable[object]) -> set[int]:
        """Keep each record that outranks the partition's current entry, and each piece
        (forget a piece whose tombstone comes); returns the partitions whose snapshot
        changed. Records without kvldp keys and headers are ignored."""
        changed = set()
        for r in records:
            piece = _piece(r)
            if piece is not None:
                partition, key, value = piece
                held = self.pieces.setdefault(partition, {})
                if value is None:
                    held.pop(key, None)
                    continue
                if self.keeps_pieces:
                    held[key] = value
                writer = _writer(key)
                stamp = int(getattr(r, "timestamp", 0) or 0)
                self.writers[writer] = max(self.writers.get(writer, stamp), stamp)
                continue
            parsed = _parse(r)
            if parsed is None:
                continue
            partition, entry = parsed
            current = self.get(partition)
            if current is None or entry.rank >= current.rank:
                self[partition] = entry
                changed.add(partition)
        return changed

    def reader(self, partition: int) -> SegmentReader:
        """Reads the segments of ``partition`` from the pieces held now (a copy: the reader
        may run in another thread while more records are read)."""
        held = dict(self.pieces.get(partition, {}))

        def segment(p: int, name: str) -> bytes:
            parts: list[bytes] = []
            while (key := f"{p}/{name}/{len(parts)}") in held:
                parts.append(held[key])
            if not parts:
                raise KeyError(f"no piece of segment {name} of partition {p} was read")
            return b"".join(parts)

        return segment

    def strays(self, partition: int, chain: list[tuple[str, int]], before_ms: int) -> list[str]:
        """Keys of the pieces held for ``partition`` that ``chain`` does not list, of
        writers that wrote nothing since ``before_ms`` (gone, not just stalled: a stalled
        former owner's late snapshot may be the only one compaction leaves, until the
        current owner publishes again, and it must stay readable)."""
        listed = {k for name, size in chain for k in piece_keys(partition, name, size)}
        return [
            k
            for k in self.pieces.get(partition, {})
            if k not in listed and self.writers.get(_writer(k), 0) < before_ms
        ]


def _writer(key: str) -> str:
    """The writer id of a piece key ``<partition>/<writer>.<n>/<piece>``."""
    return key.split("/", 2)[1].split(".", 1)[0] if key.count("/") == 2 else ""


def _piece(record: object) -> tuple[int, str, bytes | None] | None:
    """(partition, key, value or None for a tombstone) of a piece record."""
    key = getattr(record, "key", None)
    if not isinstance(key, bytes) or b"/" not in key:
        return None
    text = key.decode("utf-8", "replace")
    head = text.split("/", 1)[0]
    if not head.isdigit():
        return None
    value = getattr(record, "value", None)
    return int(head), text, value if isinstance(value, bytes) else None


def _parse(record: object) -> tuple[int, Entry] | None:
    key, value = getattr(record, "key", None), getattr(record, "value", None)
    headers = dict(getattr(record, "headers", None) or ())
    try:
        partition = int(key)  # type: ignore[arg-type]
        rank = (int(headers["resets"]), int(headers["next_offset"]))
    except (TypeError, ValueError, KeyError):
        return None
    if not isinstance(value, bytes):
        return None
    return partition, Entry(rank, value, int(getattr(record, "timestamp", 0) or 0))


def snapshot_records(
    state: AggregatorState, partition: int
) -> tuple[Segment | None, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]]:
    """The new segment of ``partition`` (None: its rows did not change) and the records
    of its snapshot, (key, value, headers) in the order they are sent: the segment's
    pieces, then the snapshot that lists its chain."""
    s = state.partitions[partition]
    headers = [("resets", str(s.resets).encode()), ("next_offset", str(s.next_offset).encode())]
    segment = s.take_segment()
    records = []
    if segment is not None:
        for i, key in enumerate(piece_keys(partition, segment.name, len(segment.data))):
            records.append((key.encode(), segment.data[i * PIECE_BYTES : (i + 1) * PIECE_BYTES], headers))
    records.append((str(partition).encode(), state.head_bytes([partition]), headers))
    return segment, records


class StateTopic:
    """Publishes and reads partition snapshots of one collection."""

    def __init__(self, collection: Collection, kafka: KafkaConfig | str) -> None:
        self.collection = collection
        self.topic = collection.state_topic
        self.kafka = as_kafka_config(kafka)
        self._producer = AIOKafkaProducer(
            **self.kafka.client_options("kvldp-state"),
            acks="all",
            max_request_size=MAX_SNAPSHOT_BYTES,
            linger_ms=0,
        )

    async def start(self) -> None:
        await start_or_close(self._producer, self.kafka)

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(
        self, state: AggregatorState, partitions: set[int], held: Snapshots | None = None
    ) -> None:
        """Send the snapshot of each of ``partitions`` — the new segment of its per-device
        rows, in pieces, then the head that lists its chain — and wait until every in-sync
        replica holds all of them (``acks=all``): only then may the worker commit offsets
        or give a partition up, so a leader failover cannot take back a snapshot the next
        owner relies on. All are encoded before the first await, so they show the state
        at the moment of the call. A partition's records all go to one partition of the
        state topic, so a reader has read a snapshot's pieces when it reads the snapshot.

        Once they are acknowledged, the pieces this writer wrote that its chain no longer
        lists (after a new base) are deleted with tombstones, and, with ``held``, the
        pieces of writers gone for :data:`GONE_WRITER_S` that no chain of this writer lists
        (a former owner's chain, or its unfinished snapshot). A former owner's pieces are
        not deleted sooner: while it may still publish, its late snapshot must stay
        readable."""
        records: list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]] = []
        taken: dict[int, Segment] = {}
        try:
            for p in sorted(partitions):
                segment, mine = snapshot_records(state, p)
                if segment is not None:
                    taken[p] = segment
                records += [(p, *record) for record in mine]
            spread = sorted(await self._producer.partitions_for(self.topic))
            futures = [
                await self._producer.send(
                    self.topic, key=key, value=value, headers=headers, partition=spread[p % len(spread)]
                )
                for p, key, value, headers in records
            ]
            for future in futures:
                await future
        except BaseException:
            for p in taken:
                state.partitions[p].chain.lost()
            raise
        gone_before = int(time.time() * 1000) - GONE_WRITER_S * 1000
        obsolete = {
            p: [
                k
                for name, size in segment.obsolete
                if name.startswith(state.partitions[p].chain.writer + ".")
                for k in piece_keys(p, name, size)
            ]
            + (held.strays(p, state.partitions[p].chain.entries, gone_before) if held is not None else [])
            for p, segment in taken.items()
            if segment.obsolete
        }
        tombstones = [
            await self._producer.send(
                self.topic, key=key.encode(), value=None, partition=spread[p % len(spread)]
            )
            for p, keys in obsolete.items()
            for key in dict.fromkeys(keys)
        ]
        for future in tombstones:
            await future


def reader(kafka: KafkaConfig) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        **kafka.client_options("kvldp-state-reader"),
        enable_auto_commit=False,
        fetch_max_bytes=MAX_SNAPSHOT_BYTES,
        max_partition_fetch_bytes=MAX_SNAPSHOT_BYTES,
    )


class StateFollower:
    """Reads the state topic from the beginning and then keeps following it (outside any
    consumer group), so a rebalance only reads what is new, not the topic's history."""

    def __init__(
        self,
        collection: Collection,
        kafka: KafkaConfig | str,
        failed: Callable[[str, BaseException], None] | None = None,
        pieces: bool = True,
    ) -> None:
        self.topic = collection.state_topic
        #: told of a fetch that failed for a transient reason (and is tried again)
        self.failed = failed
        #: ``pieces=False``: a reader of statistics alone, which needs no per-device rows
        self.snapshots = Snapshots(pieces)
        #: input partitions whose snapshot changed since the owner last cleared this set
        self.changed: set[int] = set()
        self.kafka = as_kafka_config(kafka)
        self._consumer = reader(self.kafka)
        self._tps: list[TopicPartition] = []
        self._fetched = asyncio.Event()

    async def start(self) -> None:
        """Start at the beginning of the (existing) state topic."""
        await start_or_close(self._consumer, self.kafka)
        # what the consumer was told at start (Tansu), else the cluster's answer (Apache
        # Kafka); a topic not created yet has the one partition kvldp creates it with
        partitions = (
            self._consumer.partitions_for_topic(self.topic)
            or await topic_partitions(self.kafka, self.topic)
            or {0}
        )
        self._tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        self._consumer.assign(self._tps)
        await self._consumer.seek_to_beginning(*self._tps)

    async def stop(self) -> None:
        await self._consumer.stop()

    async def follow(self) -> None:
        """Fetch forever (run as a task); the only reader of the consumer. A fetch that
        fails for a transient reason (the cluster away) is tried again a second later."""
        while True:
            try:
                fetched = await self._consumer.getmany(timeout_ms=200, max_records=1000)
            except Exception as exc:
                if not transient(exc):
                    raise
                if self.failed is not None:
                    self.failed(f"reading {self.topic}", exc)
                await asyncio.sleep(PROBE_INTERVAL_S)
                continue
            for records in fetched.values():
                self.changed |= self.snapshots.take(records)
            self._fetched.set()

    async def caught_up(self, timeout: float) -> bool:
        """Wait until the follower has read to the high watermark of a fetch made after
        this call (everything acknowledged before it); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        rounds = 0
        while loop.time() < deadline:
            self._fetched.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._fetched.wait(), max(0.0, deadline - loop.time()))
            rounds += 1
            if rounds >= 2 and all([await self._at_end(tp) for tp in self._tps]):
                return True
        return False

    async def _at_end(self, tp: TopicPartition) -> bool:
        highwater = self._consumer.highwater(tp)
        return highwater is not None and await self._consumer.position(tp) >= highwater

    async def wait_for(self, partition: int, next_offset: int, timeout: float) -> Entry | None:
        """The current snapshot of ``partition`` once it has reached ``next_offset`` (e.g. the
        offset its previous owner committed after publishing), or whatever is current
        when ``timeout`` runs out; at once when ``next_offset`` is 0 (nothing committed:
        whatever is current, or nothing, is a place to start)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            entry = self.snapshots.get(partition)
            reached = next_offset <= 0 or (entry is not None and entry.rank[1] >= next_offset)
            if reached or loop.time() >= deadline:
                return entry
            self._fetched.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._fetched.wait(), max(0.0, deadline - loop.time()))
