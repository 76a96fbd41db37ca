"""The reports consumer fetches lean records (the batch reader's, with offset, timestamp,
key and value), a record batch at a time, with the values aiokafka's own records carry,
while every other consumer of the process still gets aiokafka's records, headers and all.

Against a broker, and against aiokafka's own reader on record batches built here: several
batches, a fetch that begins inside a batch, a control batch, a corrupt batch
and a consumer that reads committed records only. If an aiokafka release renames what
kvldp wraps, this fails (the aggregator still works, on aiokafka's records)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.consumer import fetcher
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c

from kvldp.aggregator.consumer import reports_consumer
from kvldp.aggregator.topics import ensure_topics
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.lean_records import install, lean, records_of

from support import Rec
from support.pipeline import unique_collection

TP = TopicPartition("reports", 0)
#: where a v2 record batch keeps its CRC, and where the bytes it covers begin (attributes)
CRC_AT, ATTRIBUTES_AT = 17, 21
#: the attributes bit of a control batch
CONTROL = 0x20


def fields(records: Any) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in records]


async def fetch_all(consumer: AIOKafkaConsumer, tp: TopicPartition, count: int, start: int = 0) -> list[Any]:
    """What ``getmany`` hands out, item by item, until ``count`` records came."""
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        got: list[Any] = []
        while len(records_of(got)) < count:
            got += (await consumer.getmany(tp, timeout_ms=1000)).get(tp, [])
        return got
    finally:
        await consumer.stop()


async def produce(servers: str, tp: TopicPartition, count: int, batches: int) -> None:
    """``count`` records in ``batches`` record batches (each batch sent as one)."""
    producer = AIOKafkaProducer(bootstrap_servers=servers)
    await producer.start()
    try:
        per = count // batches
        for b in range(batches):
            batch = producer.create_batch()
            for i in range(b * per, (b + 1) * per):
                assert (
                    batch.append(key=b"device-%d" % i, value=b"report-%d" % i, timestamp=1000 + i) is not None
                )
            await (await producer.send_batch(batch, tp.topic, partition=tp.partition))
        await producer.send_and_wait(
            tp.topic, value=b"with-header", key=b"d", headers=[("h", b"1")], partition=0
        )
    finally:
        await producer.stop()


@pytest.mark.asyncio
async def test_the_reports_consumer_gets_record_batches_and_other_consumers_aiokafkas_records(
    broker: EmbeddedBroker,
) -> None:
    assert install()  # aiokafka's reader was found and wrapped
    kafka = KafkaConfig.plaintext(broker.bootstrap_servers)
    collection = unique_collection("kvue", 3, partitions=1)
    await ensure_topics(kafka, collection)
    tp = TopicPartition(collection.reports_topic, 0)
    await produce(broker.bootstrap_servers, tp, 60, 3)
    for start in (0, 7, 20, 45):  # a fetch may begin inside a batch, or at its first record
        lean_items = await fetch_all(reports_consumer(kafka, collection, "all"), tp, 61 - start, start)
        full = await fetch_all(
            AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers), tp, 61 - start, start
        )
        assert all(type(item) is list and item for item in lean_items)
        assert max(len(item) for item in lean_items) > 1  # whole batches, not records one by one
        lean_records = records_of(lean_items)
        assert not any(isinstance(r, ConsumerRecord) for r in lean_records)
        assert all(isinstance(r, ConsumerRecord) for r in full)
        assert records_of(full) is full  # another consumer's records are passed on as they are
        assert fields(lean_records) == fields(full)
        assert [r.offset for r in lean_records] == list(range(start, 61))
    assert full[-1].headers == (("h", b"1"),)


@pytest.mark.asyncio
async def test_a_lean_consumer_reading_committed_records_gets_them_one_by_one(broker: EmbeddedBroker) -> None:
    install()
    collection = unique_collection("kvue", 3, partitions=1)
    await ensure_topics(KafkaConfig.plaintext(broker.bootstrap_servers), collection)
    tp = TopicPartition(collection.reports_topic, 0)
    await produce(broker.bootstrap_servers, tp, 20, 2)

    def consumer(**options: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap_servers, isolation_level="read_committed", **options
        )

    lean_items = await fetch_all(consumer(key_deserializer=lean), tp, 21)
    full = await fetch_all(consumer(), tp, 21)
    assert [len(item) for item in lean_items] == [1] * 21
    assert fields(records_of(lean_items)) == fields(full)


# ---------------------------------------------------------------- against aiokafka's reader
def batch(base: int, count: int, *, control: bool = False, corrupt: bool = False) -> bytes:
    """A v2 record batch of ``count`` records from offset ``base``."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(
            i, timestamp=5000 + base + i, key=b"k%d" % (base + i), value=b"v%d" % (base + i), headers=[]
        )
    data = builder.build()
    data[0:8] = struct.pack(">q", base)
    if control:
        data[ATTRIBUTES_AT + 1] |= CONTROL
    data[CRC_AT:ATTRIBUTES_AT] = struct.pack(">I", calc_crc32c(bytes(data[ATTRIBUTES_AT:])))
    if corrupt:
        data[-1] ^= 0xFF
    return bytes(data)


def read(data: bytes, fetch_offset: int, key_deserializer: Any) -> tuple[list[Any], int]:
    """Every item a fetch reader hands out, and the offset it leaves the consumer at."""
    reader = fetcher.PartitionRecords(
        TP, MemoryRecords(data), [], fetch_offset, key_deserializer, None, True, 0
    )
    return list(reader), reader.next_fetch_offset


#: logs of one partition, as (base offset, records, control batch) per record batch
LOGS = {
    "three batches": [(0, 5, False), (5, 4, False), (9, 6, False)],
    "a control batch between two": [(0, 5, False), (5, 1, True), (6, 3, False)],
    "a control batch last": [(0, 3, False), (3, 1, True)],
    "a batch of one": [(0, 1, False)],
}


@pytest.mark.parametrize("log", sorted(LOGS))
def test_a_lean_reader_hands_out_what_aiokafkas_does_and_leaves_the_same_position(log: str) -> None:
    install()
    batches = LOGS[log]
    end = batches[-1][0] + batches[-1][1]
    for start in range(end):  # at and inside every batch
        # a broker's answer begins with the batch that holds the fetch offset
        data = b"".join(batch(b, n, control=c) for b, n, c in batches if b + n > start)
        items, lean_next = read(data, start, lean)
        full, full_next = read(data, start, None)
        assert all(type(item) is list and item for item in items)
        assert fields(records_of(items)) == fields(full)
        assert [r.offset for r in records_of(items)] == [
            o for b, n, c in batches if not c for o in range(max(b, start), b + n)
        ]
        assert lean_next == full_next == end


def test_a_lean_reader_refuses_a_corrupt_batch_as_aiokafkas_does() -> None:
    install()
    data = batch(0, 4) + batch(4, 4, corrupt=True)
    with pytest.raises(CorruptRecordException):
        read(data, 0, None)
    with pytest.raises(CorruptRecordException, match="CRC"):
        read(data, 0, lean)


def test_records_of_joins_batches_in_order_and_passes_records_on() -> None:
    a, b, c = (Rec(i, 0, None, b"%d" % i) for i in range(3))
    assert records_of([[a, b], [c]]) == [a, b, c]
    flat = [a, b, c]
    assert records_of(flat) is flat
    assert records_of([]) == []
