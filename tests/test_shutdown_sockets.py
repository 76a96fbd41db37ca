"""A Kafka client whose stop is cut off at the deadline leaves no connection open: aiokafka
closes them at the very end of ``stop()``, which such a client never reaches."""

from __future__ import annotations

import asyncio
import os
import signal

import psutil
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kvldp.broker.tansu import EmbeddedBroker
from kvldp.kafka.shutdown import close_within

pytestmark = pytest.mark.asyncio

TOPIC = "kvldp.shutdown-sockets"


#: brokers to start before a consumer's stop has had to wait for the cluster (it does
#: unless the consumer is between two group generations when the cluster stops, rarely)
ATTEMPTS = 5


async def _stop_with_the_cluster_frozen() -> list[str]:
    """A consumer that has read a record is stopped while its broker does not answer,
    with 0.5 s to do it; what :func:`close_within` found unclean. Either way no socket to
    the broker is left open."""
    with EmbeddedBroker(0) as broker:
        assert broker.process is not None
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(TOPIC, 1, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        await producer.start()
        try:
            await producer.send_and_wait(TOPIC, b"one record")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=broker.bootstrap_servers,
            group_id="kvldp-shutdown",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        # a consumed record: stop() commits its offset, and waits for the cluster to answer
        deadline = asyncio.get_running_loop().time() + 30
        while not sum(len(records) for records in (await consumer.getmany(timeout_ms=500)).values()):
            assert asyncio.get_running_loop().time() < deadline, "the consumer never read the record"
        os.kill(broker.process.pid, signal.SIGSTOP)  # the cluster stops answering: stop() hangs
        try:
            loop = asyncio.get_running_loop()
            unclean = await close_within([consumer], loop.time() + 0.5)
            await asyncio.sleep(0)  # the closed transports report their end
            port = int(broker.bootstrap_servers.rsplit(":", 1)[1])
            assert [
                c for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port == port
            ] == []
            return unclean
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)


async def test_a_consumer_cut_off_while_stopping_leaves_no_socket_open() -> None:
    outcomes = []
    while len(outcomes) < ATTEMPTS and ["AIOKafkaConsumer"] not in outcomes:
        outcomes.append(await _stop_with_the_cluster_frozen())
    assert outcomes[-1] == ["AIOKafkaConsumer"], f"stop() never had to wait for the cluster: {outcomes}"
