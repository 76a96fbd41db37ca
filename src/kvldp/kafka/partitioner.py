"""Kafka's default partitioner, with a compiled MurmurHash2.

A record with a key goes to partition ``murmur2(key) & 0x7fffffff`` modulo the topic's
partition count: the rule of the Java client's default partitioner and of aiokafka's, so
a device's records land in one partition whichever kvldp path sends them (the SDK's Kafka
transport, the gateway) and whatever other client writes beside them. A record without a
key goes to a random available partition, as aiokafka's does.

aiokafka computes MurmurHash2 in pure Python, about 1.8 µs for a device id; the
``murmurhash2`` package computes the same hash (seed ``0x9747b28c``, as Kafka's) in
about 0.2 µs, and the gateway hashes the key of every request it forwards.
``tests/test_partitioner.py`` checks that both partitioners agree.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from murmurhash2 import murmurhash2

#: the seed of Kafka's MurmurHash2 (``org.apache.kafka.common.utils.Utils.murmur2``)
KAFKA_SEED = 0x9747B28C


def partition_of(key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
    """The partition of a record keyed ``key`` (an aiokafka ``partitioner``)."""
    if key is None:
        return random.choice(available or all_partitions)
    return all_partitions[(murmurhash2(key, KAFKA_SEED) & 0x7FFFFFFF) % len(all_partitions)]
