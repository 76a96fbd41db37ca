"""Scale-out on Kafka's own consumer group (on Apache Kafka, whose group coordinator and
rebalances are the ones deployments meet): workers publish partition snapshots to the
state topic, an exporter merges them; a rebalance hands state over exactly."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kvldp.aggregator import statetopic
from kvldp.aggregator.ledgerkey import LEDGER_KEY_ENV
from kvldp.aggregator.merged import MergedExporter
from kvldp.aggregator.service import Aggregator
from kvldp.aggregator.state import AggregatorState
from kvldp.aggregator.statetopic import Snapshots, StateFollower, StateTopic, decode
from kvldp.aggregator.topics import STATE_TOPIC_CONFIG
from kvldp.bench.fleet_scale import Fleet, fleet_collection
from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.producer.collector import Collector
from kvldp.reliability.cluster import count_records
from kvldp.sim import simulate

from support.pipeline import oracle, scrape, start, unique_collection, wait_for
from support.snapshots import single_snapshot


def worker(collection: Collection, bootstrap: str) -> Aggregator:
    return Aggregator(
        collection, bootstrap, metrics_port=0, role="worker", checkpoint_interval=0.3, log=lambda _: None
    )


@pytest.mark.asyncio
async def test_two_workers_and_an_exporter_match_the_oracle_across_a_handover(
    apache_kafka: ApacheKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Statistics and device books (the collection has a privacy table) are handed over
    exactly: the spent epsilon of every device equals the oracle's after the hand-over."""
    monkeypatch.setenv(LEDGER_KEY_ENV, "workers share this")
    bootstrap = apache_kafka.bootstrap_servers
    collection = unique_collection(
        "kvue", 5, privacy={"lifetime_epsilon": 1e6}, partitions=4, windows=["all"]
    )
    users = simulate.simulate(collection, "gaussian", 8_000, seed=5)
    exporter = MergedExporter(collection, bootstrap, metrics_port=0, refit_interval=0.3, log=lambda _: None)
    first, second = worker(collection, bootstrap), worker(collection, bootstrap)
    runners = [await start(exporter), await start(first), await start(second)]
    try:
        async with Collector(collection, bootstrap, rng=np.random.default_rng(5)) as sdk:
            await sdk.publish_users(users.rows(0, 4000), simulate.device_ids(4000), batch_size=20)
            await wait_for(lambda: exporter.state.reports_total == 4000, 60, "the first half, merged")
            # the group may still be handing partitions to the second worker: each takes a share
            await wait_for(
                lambda: (
                    bool(first.state.partitions and second.state.partitions)
                    and len(first.state.partitions) + len(second.state.partitions) == 4
                ),
                30,
                "both workers to own a share",
            )
            assert not set(first.state.partitions) & set(second.state.partitions)
            # the second worker leaves gracefully: the first takes its partitions over
            runners[2][0].set()
            await runners[2][1]
            await sdk.publish_users(users.rows(4000, 8000), simulate.device_ids(4000)[::-1], batch_size=20)
        await wait_for(lambda: exporter.state.reports_total == 8000, 60, "everything, merged")
        await wait_for(
            lambda: len(first.state.partitions) == 4, 30, "the first worker to own every partition"
        )
        clean = await oracle(collection, bootstrap, tmp_path)
        assert exporter.state.all_stats() == clean.all_stats()
        assert sorted(first.state.device_spent().tolist()) == sorted(clean.device_spent().tolist())
        assert exporter.state.devices_by_charges() == clean.devices_by_charges()
        assert sum(clean.devices_by_charges().values()) == len(clean.device_spent()) > 100
        await wait_for(lambda: exporter.exporter.snapshot is not None, 10, "a refit")
        await wait_for(
            lambda: exporter.exporter.snapshot.fits["all"].n_reports == 8000,  # type: ignore[union-attr]
            10,
            "a refit of everything",
        )
        samples = await asyncio.to_thread(scrape, exporter.bound_port)  # type: ignore[arg-type]
        name = (("collection", collection.name),)
        assert samples[("kvldp_reports_total", name)] == 8000
        assert samples[("kvldp_last_checkpoint_timestamp_seconds", name)] > 0
        assert any(key[0] == "kvldp_frequency" for key in samples)
    finally:
        for stop, task in runners:
            stop.set()
            if not task.done():
                await task


@pytest.mark.asyncio
async def test_a_worker_of_a_budgeted_collection_needs_the_shared_ledger_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decided when the worker is made, before it connects: no broker at the address."""
    monkeypatch.delenv("KVLDP_LEDGER_KEY", raising=False)
    collection = unique_collection("kvue", 3, max_reports_per_device=1)
    with pytest.raises(KvldpError, match="KVLDP_LEDGER_KEY"):
        worker(collection, "127.0.0.1:1")
    monkeypatch.setenv("KVLDP_LEDGER_KEY", "shared secret")
    assert worker(collection, "127.0.0.1:1").ledger_key == b"shared secret"


class FakeRecord:
    def __init__(self, partition: int, resets: int, offset: int, value: bytes, ts: int = 0) -> None:
        self.key = str(partition).encode()
        self.value = value
        self.timestamp = ts
        self.headers = [("resets", str(resets).encode()), ("next_offset", str(offset).encode())]


@pytest.mark.asyncio
async def test_a_follower_reads_every_partition_of_a_state_topic_on_apache_kafka(
    apache_kafka: ApacheKafka,
) -> None:
    """kvldp creates the state topic with one partition; one an operator made with more is
    read whole, on Apache Kafka too, where a consumer starts knowing no topic at all."""
    bootstrap = apache_kafka.bootstrap_servers
    collection = unique_collection("kvue", 3, partitions=8)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(collection.state_topic, 3, 1, topic_configs=STATE_TOPIC_CONFIG)])
    finally:
        await admin.close()
    publisher = StateTopic(collection, bootstrap)
    await publisher.start()
    try:
        state = AggregatorState(collection)
        for p in range(8):
            state.partition(p)
        await publisher.publish(state, set(range(8)))
    finally:
        await publisher.stop()
    held = await count_records(bootstrap, collection.state_topic)
    assert sum(held.values()) == 8 and held[0] < 8, held  # some snapshots beyond partition 0
    follower = StateFollower(collection, bootstrap)
    await follower.start()
    task = asyncio.create_task(follower.follow())
    try:
        assert await follower.caught_up(timeout=30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await follower.stop()
    assert sorted(follower.snapshots) == list(range(8))


@pytest.mark.asyncio
async def test_a_large_device_book_travels_in_pieces_and_a_replaced_chain_is_deleted(
    apache_kafka: ApacheKafka,
) -> None:
    """A book of 150,000 memoized devices: its base goes as several pieces, the next
    snapshot only as the rows one fetch changed; once a new base replaces the chain, the
    old pieces are deleted with tombstones. A follower restores every row each time."""
    bootstrap = apache_kafka.bootstrap_servers
    fleet = Fleet(fleet_collection("grr", True), seed=3)
    collection = fleet.collection
    fleet.grow(0, 150_000)
    publisher, follower = StateTopic(collection, bootstrap), StateFollower(collection, bootstrap)
    await publisher.start()
    await follower.start()
    reading = asyncio.create_task(follower.follow())
    part = fleet.state.partition(0)

    async def restored() -> list[int]:
        """The charges of every row, as a worker taking the partition over restores them."""
        await wait_for(
            lambda: 0 in follower.snapshots and follower.snapshots[0].rank[1] == part.next_offset,
            30,
            "the snapshot",
        )
        assert await follower.caught_up(30)
        state = decode(collection, 0, follower.snapshots[0].value, follower.snapshots.reader(0))
        assert state.devices.tags.tolist() == part.devices.tags.tolist()
        assert state.chain.entries == part.chain.entries
        return list(state.book.charged.values(len(state.devices)))

    try:
        await publisher.publish(fleet.state, {0})
        (base,) = part.chain.entries
        assert base[1] > 3 * statetopic.PIECE_BYTES
        assert await restored() == list(part.book.charged.values(150_000))
        fleet.fold(0, fleet.known_fetch(0))
        await publisher.publish(fleet.state, {0}, follower.snapshots)
        assert len(part.chain.entries) == 2 and part.chain.entries[1][1] < 100_000
        assert await restored() == list(part.book.charged.values(150_000))
        part.chain.lost()  # the next snapshot is a new base: the old chain's pieces go
        fleet.fold(0, fleet.known_fetch(0))
        await publisher.publish(fleet.state, {0}, follower.snapshots)
        assert await restored() == list(part.book.charged.values(150_000))
        (new_base,) = part.chain.entries
        kept = set(statetopic.piece_keys(0, *new_base))
        await wait_for(lambda: set(follower.snapshots.pieces[0]) == kept, 30, "tombstones for the old pieces")
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await publisher.stop()
        await follower.stop()


def test_the_current_snapshot_is_the_greatest_epoch_then_offset_never_the_last_written() -> None:
    snapshots = Snapshots()
    assert snapshots.take([FakeRecord(0, 0, 10, b"a"), FakeRecord(1, 0, 5, b"b")]) == {0, 1}
    # a late "zombie" snapshot of partition 0 at a lower offset does not move it backwards
    assert snapshots.take([FakeRecord(0, 0, 7, b"zombie")]) == set()
    assert snapshots[0].value == b"a"
    # ties: the newest wins; a new epoch beats any offset of the old one
    assert snapshots.take([FakeRecord(0, 0, 10, b"a2"), FakeRecord(1, 1, 0, b"reset")]) == {0, 1}
    assert (snapshots[0].value, snapshots[1].value) == (b"a2", b"reset")
    # foreign records on the topic are ignored
    junk = FakeRecord(2, 0, 1, b"x")
    junk.headers = []
    assert snapshots.take([junk]) == set() and 2 not in snapshots


def test_a_snapshot_decodes_only_as_its_own_partition_of_its_own_collection() -> None:
    collection = unique_collection("kvue", 3)
    state = AggregatorState(collection).partition(2)
    state.next_offset = 42
    data = single_snapshot(collection, 2, state)
    assert decode(collection, 2, data).next_offset == 42
    with pytest.raises(KvldpError, match="holds partitions"):
        decode(collection, 1, data)
    with pytest.raises(KvldpError, match=r"checkpoint belongs to collection .* the collection file changed"):
        decode(unique_collection("kvue", 4), 2, data)
    with pytest.raises(KvldpError, match=r"corrupt|msgpack"):
        decode(collection, 2, data[: len(data) // 2])
