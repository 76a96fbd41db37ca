"""The aggregator service: consume, validate, fold, dead-letter, checkpoint, refit, export.

One asyncio process per collection and role:

* ``all`` (default) — consumes every partition, checkpoints to ``--state-dir``, refits
  and serves the estimates;
* ``worker`` — joins the consumer group, folds the partitions Kafka assigns it and
  publishes their snapshots to the state topic (see :mod:`kvldp.aggregator.statetopic`);
  refits and estimates are the exporter's job. Workers compact their time buckets on
  the refit timer like role ``all`` (:meth:`Aggregator.compact`), so a snapshot stays
  bounded.

The consume loop only decodes and folds (numpy); refits run in a worker thread on a
timer so the consumer never misses its poll interval (aiokafka #848), and checkpoints
are written on a timer and at every revocation and shutdown. A malformed message goes,
with its original bytes and a reason, to the dead-letter topic, and the partition only
moves past it once every in-sync replica holds that write (``acks=all``).

Topic resets. Every checkpoint fingerprints the record just before the next offset. When a
partition is assigned, that record is read again; if it differs, the topic was reset (an
in-memory broker restarted, a topic was recreated). A partition whose end seems to be
below the next offset is only a suspicion (a new leader's high watermark lags for a
moment): the broker's log start and end offsets decide (:mod:`kvldp.aggregator.position`).
On a reset the aggregator keeps its statistics, starts a new epoch at offset 0 of the
partition, counts ``kvldp_topic_resets_total`` and says so: nothing is lost that was ever
folded, and nothing new is skipped.

Retention. The consumer never moves itself (``auto_offset_reset="none"``): a next offset
that retention deleted comes back as out of range, and the aggregator counts the offsets
it can no longer read in ``kvldp_offsets_lost_to_retention_total``, says so in one line
and reads on from the log start.

Around this module: the consumer's settings are :mod:`kvldp.aggregator.consumer`, the
dead-letter writer :mod:`kvldp.aggregator.dlq`, the budget ledger's secret
:mod:`kvldp.aggregator.ledgerkey`; what a fetch folds is planned by
:mod:`kvldp.aggregator.ingest`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError

from kvldp.aggregator.console import stderr_line
from kvldp.aggregator.consumer import MAX_RECORDS, SNAPSHOT_WAIT_S, reports_consumer
from kvldp.aggregator.control_publisher import ControlPublisher
from kvldp.aggregator.dlq import dead_letter, dlq_producer
from kvldp.aggregator.exporter import Exporter
from kvldp.aggregator.heap_trim import release_free_memory
from kvldp.aggregator.ingest import plan, record_digest
from kvldp.aggregator.ledgerkey import ledger_key
from kvldp.aggregator.position import Kind, judge
from kvldp.aggregator.serving import ServingRole, cancel, every
from kvldp.aggregator.snapshot_wait import SnapshotWait
from kvldp.aggregator.state import CheckpointMismatch, CheckpointStore
from kvldp.aggregator.statetopic import Entry, StateFollower, StateTopic, decode
from kvldp.aggregator.topics import ensure_topics
from kvldp.common.config.collection import Collection
from kvldp.common.files.path_checks import writable_directory
from kvldp.common.messages.control_record import is_interactive
from kvldp.common.messages.wire import WireFormat
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.client_start import start_or_close
from kvldp.kafka.lean_records import records_of
from kvldp.kafka.reachability import PROBE_INTERVAL_S, Reachability, transient
from kvldp.kafka.shutdown import STOP_GRACE_S, close_within
from kvldp.web.security import HttpSecurity

ROLES = ("all", "worker")
#: seconds an informational offset commit may take before it is given up
COMMIT_TIMEOUT_S = 2.0


class Aggregator(ServingRole):
    """Consumes one collection's reports topic (all partitions, or a worker's share)."""

    def __init__(
        self,
        collection: Collection,
        kafka: KafkaConfig | str,
        metrics_host: str = "127.0.0.1",
        metrics_port: int = 9108,
        state_dir: str | Path | None = None,
        refit_interval: float | None = None,
        checkpoint_interval: float = 1.0,
        log: Callable[[str], None] = stderr_line,
        security: HttpSecurity | None = None,
        role: str = "all",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}")
        if state_dir is not None:
            writable_directory(state_dir, "state directory")
        super().__init__(
            collection, kafka, role, metrics_host, metrics_port, refit_interval, log, security, clock
        )
        self.store = (
            CheckpointStore(state_dir, collection) if state_dir is not None and role == "all" else None
        )
        self.ledger_key = ledger_key(collection, state_dir, role)
        self.checkpoint_interval = checkpoint_interval
        self.wire = WireFormat(collection)
        self.exporter = Exporter(collection, lambda: self.state, self.lag, clock)
        service, meanwhile = _AWAY[role]
        self.reachability = Reachability(self.kafka, service, meanwhile, log, self.exporter.registry)
        self.snapshot_wait = (
            SnapshotWait(
                collection.name,
                collection.state_topic,
                self.exporter.registry,
                log,
                "every assigned partition is loaded",
            )
            if role == "worker"
            else None
        )
        #: the event loop's time by which Kafka work must end, once the service is stopping
        self._kafka_deadline: float | None = None
        self.snapshots: StateTopic | None = None
        self.follower: StateFollower | None = None
        self._dirty: set[int] = set()
        self._verify: set[int] = set()
        #: assigned partitions (paused) whose snapshots a worker is still loading
        self._loading: set[int] = set()
        self._loader: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._dlq: AIOKafkaProducer | None = None
        self._save_lock = asyncio.Lock()
        self._fatal: Exception | None = None
        self._partition_warnings: set[int] = set()
        self.control = ControlPublisher(collection, self.kafka) if is_interactive(collection) else None

    # ------------------------------------------------------------------ lifecycle
    async def run(self, stop: asyncio.Event, ready: Callable[[Aggregator], None] | None = None) -> None:
        """Run until ``stop`` is set; leaves a final checkpoint. The checkpoint of a
        ``--state-dir`` is this process's while it runs (a second aggregator of the
        collection on the directory is refused)."""
        if self.store is not None:
            self.store.hold()
        try:
            await self._run(stop, ready)
        finally:
            if self.store is not None:
                self.store.release()

    async def _run(self, stop: asyncio.Event, ready: Callable[[Aggregator], None] | None) -> None:
        if self.store is not None:
            loaded = self.store.load()
            if loaded is not None:
                self.state = loaded
                self.log(f"resumed from {self.store.path}: {self.state.reports_total} reports folded")
        elif self.role == "all":
            self.log("no --state-dir: state is kept in memory only and is lost when the aggregator stops")
        await ensure_topics(self.kafka, self.collection, state=self.role == "worker", log=self.log)
        self.bound_port = await self.exporter.serve(self.metrics_host, self.metrics_port, self.security)
        self._dlq = dlq_producer(self.kafka)
        self._consumer = reports_consumer(self.kafka, self.collection, self.role)
        if self.role == "worker":
            self.snapshots = StateTopic(self.collection, self.kafka)
            self.follower = StateFollower(self.collection, self.kafka, self.reachability.failed)
        tasks: list[asyncio.Task[None]] = []
        try:
            await start_or_close(self._dlq, self.kafka)
            if self.control is not None and self.state.rounds is not None:
                await self.control.start()
                await self.control.announce(self.state.rounds)
                self.log(f"{self.control.topic}: {self.state.rounds.control().describe()}")
            if self.snapshots is not None and self.follower is not None:
                await self.snapshots.start()
                await self.follower.start()
                tasks.append(asyncio.create_task(self.follower.follow(), name="follow"))
            await start_or_close(self._consumer, self.kafka)
            self._consumer.subscribe([self.collection.reports_topic], listener=_Rebalance(self))
            await self.reachability.start()
            tasks += [
                asyncio.create_task(self.reachability.watch(), name="reachability"),
                asyncio.create_task(self._consume(), name="consume"),
                asyncio.create_task(every(self.checkpoint_interval, self.checkpoint), name="checkpoint"),
                asyncio.create_task(every(self.refit_interval, self._housekeeping), name="refit"),
            ]
            await self._housekeeping()
            if ready is not None:
                ready(self)
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            self._kafka_deadline = asyncio.get_running_loop().time() + STOP_GRACE_S
            await cancel(tasks)  # a task that failed raises here
            self._dirty |= set(self.state.partitions)
            await self.checkpoint()
            if self.snapshots is not None and self._dirty:
                self.log(
                    f"stopping without publishing the latest snapshots of partitions {sorted(self._dirty)}: "
                    "their next owner reads on from the previous ones (nothing is counted twice)"
                )
        finally:
            for task in [*tasks, *([self._loader] if self._loader is not None else [])]:
                task.cancel()
            if self._loader is not None:
                await asyncio.gather(self._loader, return_exceptions=True)
            deadline = self._kafka_deadline or asyncio.get_running_loop().time() + STOP_GRACE_S
            unclean = await close_within(
                [self._consumer, self.follower, self.snapshots, self._dlq, self.control, self.reachability],
                deadline,
            )
            if unclean:
                self.log(
                    f"stopped without closing {', '.join(unclean)} cleanly (Kafka did not answer in time)"
                )
            await self.exporter.close()

    # ------------------------------------------------------------------ consuming
    async def _consume(self) -> None:
        while True:
            try:
                await self.consume_once()
            except Exception as exc:
                if not transient(exc):
                    raise
                # what was fetched and not folded is fetched again: nothing is skipped
                self.reachability.failed("reading and dead-lettering reports", exc)
                for tp in list(self._consumer.assignment() if self._consumer is not None else ()):
                    self._seek_to_state(tp)
                await asyncio.sleep(PROBE_INTERVAL_S)

    async def consume_once(self) -> None:
        """One fetch and what comes of it: folds, dead letters, judged surprises (the
        consume loop's body; the tests drive it with a stand-in consumer)."""
        consumer = self._consumer
        assert consumer is not None
        try:
            fetched = await consumer.getmany(timeout_ms=200, max_records=MAX_RECORDS)
        except OffsetOutOfRangeError as exc:
            for tp in _partitions_of(exc):
                await self._resolve(tp, "the broker answered out of range", reposition=True)
            return
        except NoOffsetForPartitionError as exc:
            for tp in _partitions_of(exc):
                self._seek_to_state(tp)
            return
        if self._fatal is not None:
            raise self._fatal
        for tp, batches in fetched.items():
            # let the fetcher ask for the next records before this fetch is folded, so that
            # the broker works while this process folds, and the other tasks run between
            # partitions (a fetch holds up to FETCH_BYTES of each)
            await asyncio.sleep(0)
            records = records_of(batches)
            if not records or tp not in consumer.assignment() or tp.partition in self._loading:
                continue
            state = self.state.partition(tp.partition)
            if tp.partition in self._verify:
                expected = state.next_offset - 1
                if records[0].offset < expected:
                    consumer.seek(tp, expected)
                    continue
                self._verify.discard(tp.partition)
                if records[0].offset == expected:
                    if record_digest(records[0]) != state.last_digest:
                        await self._reset(tp, "the record before the checkpoint's next offset changed")
                        continue
                    records = records[1:]
            if not records:
                continue
            if records[0].offset > state.next_offset:
                # fetched past our state: rewind, never skip, unless retention took the gap
                await self._resolve(tp, f"records began at offset {records[0].offset}", reposition=True)
                continue
            work = plan(self.state, self.wire, tp.partition, records, self.ledger_key, self.now_ms())
            if work is None:
                continue
            if work.rejected:
                assert self._dlq is not None
                await dead_letter(self._dlq, self.collection.dlq_topic, tp, work.rejected)
                if self.state.partitions.get(tp.partition) is not state or state.next_offset != work.start:
                    continue  # revoked or reset while the dead letters were written: stale plan
            work.apply(self.state)
            state.highwater = consumer.highwater(tp) or state.highwater
            self._dirty.add(tp.partition)
        await self._close_round()

    async def _close_round(self) -> None:
        """Close the open round if its policy says so: fold nothing more (this runs in the
        consume loop, between fetches), compute the next means, checkpoint, then publish
        the control record (see :mod:`kvldp.aggregator.round_state` for why in this order)."""
        rounds, control = self.state.rounds, self.control
        now_ms = self.now_ms()
        if rounds is None or control is None or not rounds.due(now_ms):
            return
        rounds.close(self.state.all_stats().arrays["counts"], now_ms)
        self._dirty |= set(self.state.partitions)
        await self.checkpoint()
        await control.publish(rounds.control())
        self.log(f"round {rounds.closed} closed; {control.topic}: {rounds.control().describe()}")

    async def _reset(self, tp: TopicPartition, why: str) -> None:
        """Start a new epoch of a reset partition at its offset 0, keeping the statistics."""
        state = self.state.partition(tp.partition)
        self.log(
            f"partition {tp.partition} of {tp.topic} was reset ({why}); keeping the {state.reports} reports "
            f"folded so far and reading the partition again from offset 0"
        )
        state.next_offset = 0
        state.last_digest = b""
        state.resets += 1
        self._verify.discard(tp.partition)
        self._dirty.add(tp.partition)
        await ensure_topics(self.kafka, self.collection, state=self.role == "worker")
        if self._consumer is not None and tp in self._consumer.assignment():
            self._consumer.seek(tp, 0)

    async def _resolve(self, tp: TopicPartition, suspicion: str, reposition: bool) -> None:
        """Ask the broker where ``tp``'s log starts and ends, and act on that evidence only:
        a reset, offsets lost to retention, or (``reposition``) reading on from our state."""
        consumer = self._consumer
        if consumer is None or tp not in consumer.assignment():
            return
        state = self.state.partition(tp.partition)
        asked_at = state.next_offset
        verdict = await judge(consumer, tp, asked_at)
        if (
            tp not in consumer.assignment()
            or self.state.partitions.get(tp.partition) is not state
            or state.next_offset != asked_at
        ):
            return  # revoked, folded on or reset meanwhile: the next suspicion judges afresh
        if verdict.kind is Kind.RESET:
            await self._reset(
                tp, f"{suspicion}; the broker says it ends at offset {verdict.end}, below {asked_at}"
            )
        elif verdict.kind is Kind.LOST:
            self._lose(tp, verdict.start)
        elif verdict.kind is Kind.FINE and reposition:
            if verdict.start >= asked_at:  # the record before next_offset is gone: nothing to compare
                self._verify.discard(tp.partition)
            self._seek_to_state(tp)

    def _seek_to_state(self, tp: TopicPartition) -> None:
        """Read ``tp`` on from the partition's state (the record before it first, when
        verifying); a partition still loading is positioned once loaded."""
        if tp.partition in self._loading:
            return
        state = self.state.partition(tp.partition)
        if self._consumer is not None and tp in self._consumer.assignment():
            verifying = tp.partition in self._verify
            self._consumer.seek(tp, state.next_offset - 1 if verifying else state.next_offset)

    def _lose(self, tp: TopicPartition, start: int) -> None:
        """The log of ``tp`` starts at ``start``, past our next offset: count the offsets that
        can no longer be read, say so once, and read on from the log start."""
        state = self.state.partition(tp.partition)
        lost = start - state.next_offset
        self.log(
            f"partition {tp.partition} of {tp.topic}: {lost} offsets ({state.next_offset} to {start - 1}) were "
            f"deleted by retention before they were read; reading on from offset {start}"
        )
        state.lost += lost
        state.next_offset = start
        state.last_digest = b""
        self._verify.discard(tp.partition)
        self._dirty.add(tp.partition)
        self._seek_to_state(tp)

    async def _check_topics(self) -> None:
        """An in-memory broker that restarted (or an operator) may have dropped our topics:
        create them again so devices and the consumer group resume by themselves. A
        broker may also have auto-created the reports topic with its own partition count:
        every partition is folded anyway, but say so (devices then map to other partitions,
        so their de-duplication and budget history starts afresh)."""
        consumer = self._consumer
        if consumer is None:
            return
        partitions = consumer.partitions_for_topic(self.collection.reports_topic)
        if not partitions:
            created = await ensure_topics(self.kafka, self.collection, state=self.role == "worker")
            if created:
                self.log(
                    f"topics {', '.join(created)} were missing (broker restarted or topics deleted): created them"
                )
            return
        wanted = self.collection.aggregate.partitions
        if len(partitions) != wanted and len(partitions) not in self._partition_warnings:
            self._partition_warnings.add(len(partitions))
            self.log(
                f"{self.collection.reports_topic} has {len(partitions)} partitions, the collection says {wanted} "
                "(auto-created by the broker? disable auto.create.topics.enable); folding all of them"
            )

    async def check_resets(self) -> None:
        """A partition whose fetch high watermark is below our next offset may have been
        reset: the broker's log offsets decide (one lagging reading is no reset)."""
        consumer = self._consumer
        if consumer is None:
            return
        for tp in list(consumer.assignment()):
            if tp.partition in self._loading:
                continue
            highwater = consumer.highwater(tp)
            state = self.state.partition(tp.partition)
            if highwater is not None:
                state.highwater = highwater
                if highwater < state.next_offset:
                    await self._resolve(tp, f"a fetch said it ends at offset {highwater}", reposition=False)

    def lag(self) -> dict[int, int]:
        """Records not yet folded per assigned partition (from the fetch high watermark)."""
        consumer = self._consumer
        if consumer is None:
            return {}
        out = {}
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            if highwater is not None and tp.partition not in self._loading:
                out[tp.partition] = max(0, highwater - self.state.partition(tp.partition).next_offset)
        return out

    # ------------------------------------------------------------------ checkpoints and refits
    async def checkpoint(self, partitions: set[int] | None = None) -> None:
        """Persist state with its next offsets atomically — the whole state to the file
        (role all, fsynced) or each changed partition's snapshot to the state topic
        (worker, acknowledged by every in-sync replica) — then commit the same offsets to
        Kafka for lag dashboards (informational: the group coordinator's acknowledgement
        is not waited on for correctness, the saved offsets are what count)."""
        async with self._save_lock:
            # only partitions held and loaded: a partition given up or still loading has
            # no state here, and an empty snapshot of it must never be published
            self._dirty &= set(self.state.partitions) - self._loading
            changed = set(self._dirty) if partitions is None else self._dirty & partitions
            if not changed:
                return
            self._dirty -= changed
            started = time.perf_counter()
            # the offsets and the state they belong to, taken at one instant (folds go on
            # during the awaits below): the commit never runs ahead of what was saved
            offsets = {p: self.state.partitions[p].next_offset for p in changed}
            try:
                if self.store is not None:
                    await _finish(asyncio.to_thread(self.store.save, self.store.take(self.state)))
                if self.snapshots is not None:
                    if not self.reachability.up:  # no replica can acknowledge it: keep it for later
                        self._dirty |= changed
                        return
                    async with asyncio.timeout_at(self._kafka_deadline):
                        await self.snapshots.publish(
                            self.state, changed, self.follower.snapshots if self.follower else None
                        )
            except Exception as exc:
                self._dirty |= changed
                if not transient(exc):
                    raise
                self.reachability.failed(f"publishing snapshots to {self.collection.state_topic}", exc)
                return
            except BaseException:
                self._dirty |= changed
                raise
            if self.store is not None or self.snapshots is not None:
                self.exporter.checkpointed(time.perf_counter() - started)
            await self._commit(offsets)

    async def _commit(self, offsets: dict[int, int]) -> None:
        """Commit saved offsets of the partitions still assigned, for lag dashboards: skipped
        while the cluster is unreachable, and given up after :data:`COMMIT_TIMEOUT_S`."""
        consumer = self._consumer
        if consumer is None or not self.reachability.up:
            return
        topic = self.collection.reports_topic
        mine = {
            TopicPartition(topic, p): o
            for p, o in offsets.items()
            if TopicPartition(topic, p) in consumer.assignment() and o > 0
        }
        if mine:
            limit = asyncio.get_running_loop().time() + COMMIT_TIMEOUT_S
            if self._kafka_deadline is not None:
                limit = min(limit, self._kafka_deadline)
            with contextlib.suppress(CommitFailedError, KafkaError, TimeoutError):
                async with asyncio.timeout_at(limit):
                    await consumer.commit(mine)

    async def _housekeeping(self) -> None:
        if self.reachability.up:
            try:
                await self._check_topics()
                await self.check_resets()
            except Exception as exc:
                if not transient(exc):
                    raise
                self.reachability.failed("checking the topics and their offsets", exc)
        self.compact()
        if self.role == "all":
            await self.exporter.refresh(self.state)
        release_free_memory()

    def compact(self) -> None:
        """Merge the buckets that left every finite window into each partition's base, on
        the same rule in every role. A worker's snapshot then stays bounded, and the
        exporter's merge is unchanged: it replaces whole partitions, compaction never
        changes the ``all`` window, and a bucket is merged only once it is older than the
        longest window plus two buckets (:meth:`AggregatorState.compact`), which no window
        the exporter reads still holds while its clock is within two buckets of the
        worker's."""
        self.state.compact(self.now_ms())

    # ------------------------------------------------------------------ rebalancing
    async def revoked(self, revoked: list[TopicPartition]) -> None:
        mine = {tp.partition for tp in revoked}
        if self._loader is not None:  # partitions still loading have nothing to publish
            self._loader.cancel()
            await asyncio.gather(self._loader, return_exceptions=True)
            self._loader = None
        self._loading -= mine
        self._loading_changed()
        self._dirty |= mine & set(self.state.partitions)
        await self.checkpoint(mine)
        if self.role == "worker":
            for p in mine:  # the next owner continues from the snapshot just published
                self.state.partitions.pop(p, None)
                self._verify.discard(p)
            self._dirty -= mine

    async def assigned(self, assigned: list[TopicPartition]) -> None:
        """Start reading the assigned partitions from their state. A worker takes theirs
        over from the state topic after this returns (aiokafka sends no heartbeat while a
        listener runs): until then they are paused, and nothing reads their state."""
        consumer = self._consumer
        assert consumer is not None
        if self.follower is None:
            for tp in assigned:
                self._start_at_state(consumer, tp)
            return
        consumer.pause(*assigned)
        for tp in assigned:  # a position, so that the fetcher does not ask for one meanwhile
            consumer.seek(tp, 0)
        self._loading |= {tp.partition for tp in assigned}
        self._loading_changed()
        self._loader = asyncio.create_task(
            self._take_over(consumer, self.follower, assigned), name="take over"
        )

    def _start_at_state(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
        state = self.state.partition(tp.partition)
        if state.next_offset > 0 and state.last_digest:
            self._verify.add(tp.partition)  # re-read the last folded record first
            consumer.seek(tp, state.next_offset - 1)
        else:
            consumer.seek(tp, state.next_offset)

    async def _take_over(
        self, consumer: AIOKafkaConsumer, follower: StateFollower, assigned: list[TopicPartition]
    ) -> None:
        """Load the assigned partitions' snapshots, then read each on from its state."""
        try:
            await self._load_snapshots(consumer, follower, assigned)
        except Exception as exc:  # raised from the consume loop
            self._fatal = exc
            return
        for tp in assigned:
            if tp.partition in self._loading and tp in consumer.assignment():
                self._loading.discard(tp.partition)
                self._start_at_state(consumer, tp)
                consumer.resume(tp)
        self._loading_changed()

    def _loading_changed(self) -> None:
        if self.snapshot_wait is not None:
            self.snapshot_wait.update(self._loading, "they are paused until their snapshots are loaded")

    async def _no_snapshots(
        self, follower: StateFollower, missing: dict[TopicPartition, int]
    ) -> dict[TopicPartition, Entry | None]:
        """The snapshots of partitions whose group committed offsets (``missing``: the
        offset of each) but whose snapshots were not read in time: waited for until the
        state topic is read to its end (a partition never starts afresh while a snapshot
        of it may still be on its way), all together; None, said once for all of them,
        for a partition of which the topic holds none (deleted, or never written: a
        ``--role all`` aggregator committed the offsets)."""
        topic = self.collection.state_topic
        listed = ", ".join(
            f"{tp.partition} (offset {offset} committed)" for tp, offset in sorted(missing.items())
        )
        self.log(f"partitions {listed}: waiting for their snapshots in {topic}")
        while True:
            caught_up = await follower.caught_up(timeout=SNAPSHOT_WAIT_S)
            found = {tp: follower.snapshots.get(tp.partition) for tp in missing}
            absent = sorted(tp.partition for tp, entry in found.items() if entry is None)
            if not absent or caught_up:
                if absent:
                    self.log(
                        f"partitions {', '.join(map(str, absent))}: {topic} holds no snapshot of them; "
                        "folding them afresh from their first offsets"
                    )
                return found

    async def _load_snapshots(
        self, consumer: AIOKafkaConsumer, follower: StateFollower, assigned: list[TopicPartition]
    ) -> None:
        """Take over assigned partitions from the state topic. The previous owner published
        each snapshot before committing its offset, so the committed offset says which
        snapshot to wait for. An older one would also be correct (every snapshot is a
        consistent prefix); it only means re-reading some records. All the partitions
        share one bound, :data:`SNAPSHOT_WAIT_S`: the committed offsets are asked for
        together, the snapshots waited for together, and a partition with nothing
        committed (a new collection, an added partition) waits for none."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SNAPSHOT_WAIT_S
        await follower.caught_up(timeout=SNAPSHOT_WAIT_S / 2)
        offsets = await asyncio.gather(*(_committed(consumer, tp) for tp in assigned))
        entries = await asyncio.gather(
            *(
                follower.wait_for(tp.partition, committed, timeout=max(0.0, deadline - loop.time()))
                for tp, committed in zip(assigned, offsets, strict=True)
            )
        )
        missing = {
            tp: committed
            for tp, committed, found in zip(assigned, offsets, entries, strict=True)
            if found is None and committed > 0
        }
        late = await self._no_snapshots(follower, missing) if missing else {}
        for tp, committed, found in zip(assigned, offsets, entries, strict=True):
            entry = found if found is not None else late.get(tp)
            if entry is None:
                continue
            if entry.rank[1] < committed:
                self.log(
                    f"partition {tp.partition}: the newest snapshot in {self.collection.state_topic} is at offset "
                    f"{entry.rank[1]}, below the committed {committed}; re-reading from there (nothing is counted twice)"
                )
            # decoding takes time in proportion to the partition's devices: in a thread
            segments = follower.snapshots.reader(tp.partition)
            try:
                loaded = await asyncio.to_thread(decode, self.collection, tp.partition, entry.value, segments)
            except CheckpointMismatch as exc:
                raise CheckpointMismatch(
                    f"the snapshot of partition {tp.partition} in {self.collection.state_topic} "
                    f"cannot be loaded (another collection's, or damaged): {exc}"
                ) from exc
            if tp.partition in self._loading:
                # its own base first: the chain it continues was written by another
                # process, which (stalled, not gone) may still delete its own segments
                loaded.chain.lost()
                self.state.partitions[tp.partition] = loaded


async def _finish(work: Awaitable[None]) -> None:
    """Await ``work`` to its end even if the caller is cancelled meanwhile (then re-raise
    the cancellation): a checkpoint's file writes, in a thread, must never overlap the
    next checkpoint's, which may remove the files the late one's head would list."""
    future = asyncio.ensure_future(work)
    try:
        await asyncio.shield(future)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await future
        raise


#: how each role names itself, and what it does while Kafka does not answer
_AWAY = {
    "all": ("aggregator", "folding resumes when it answers; /metrics serves the estimates so far"),
    "worker": ("worker", "folding and snapshots resume when it answers"),
}


async def _committed(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int:
    """The group's committed offset of ``tp``; 0 when there is none or it cannot be read."""
    with contextlib.suppress(KafkaError):
        return int(await consumer.committed(tp) or 0)
    return 0


def _partitions_of(exc: OffsetOutOfRangeError | NoOffsetForPartitionError) -> list[TopicPartition]:
    """The partitions an aiokafka fetch error names (a dict of them, or one)."""
    named = exc.args[0] if exc.args else None
    if isinstance(named, dict):
        return [tp for tp in named if isinstance(tp, TopicPartition)]
    return [named] if isinstance(named, TopicPartition) else []


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Checkpoint before partitions leave; resume from the checkpoint when they arrive."""

    def __init__(self, aggregator: Aggregator) -> None:
        self.aggregator = aggregator

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.aggregator.revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.aggregator.assigned(assigned)
