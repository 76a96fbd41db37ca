"""kvldp's partitioner sends every keyed record where aiokafka's (Kafka's rule) would.

A device's records must land in one partition whichever path sends them (the SDK's Kafka
transport, the gateway, another Kafka client), since the aggregator keeps a device's
state in its partition. :func:`kvldp.kafka.partitioner.partition_of` hashes with a
compiled MurmurHash2; it must pick aiokafka's partition for every key and partition
count, and a random available one for a record without a key.
"""

from __future__ import annotations

import random

import numpy as np
from aiokafka.partitioner import DefaultPartitioner

from kvldp.kafka.partitioner import partition_of


def test_every_key_goes_where_kafkas_default_partitioner_sends_it() -> None:
    rng = np.random.default_rng(3)
    reference = DefaultPartitioner()
    keys = [rng.bytes(int(n)) for n in rng.integers(0, 160, size=20_000)]
    keys += [b"", b"device-0", "ünïcode-dévice".encode()] + [f"dev-{i}".encode() for i in range(2_000)]
    for count in (1, 2, 3, 4, 7, 12, 64, 1000):
        partitions = list(range(count))
        for key in keys:
            assert partition_of(key, partitions, partitions) == reference(key, partitions, partitions), (
                key,
                count,
            )
    assert [partition_of(b"device-0", list(range(n)), []) for n in (4, 12)] == [
        reference(b"device-0", list(range(n)), []) for n in (4, 12)
    ]


def test_a_record_without_a_key_goes_to_an_available_partition() -> None:
    random.seed(2)  # the partitioner draws from the random module, as aiokafka's does
    seen = {partition_of(None, [0, 1, 2, 3], [1, 3]) for _ in range(200)}
    assert seen == {1, 3}
    assert {partition_of(None, [0, 1, 2], []) for _ in range(200)} == {0, 1, 2}
