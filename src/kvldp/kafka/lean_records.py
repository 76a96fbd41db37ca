"""Fetched records that carry what an aggregator reads: offset, timestamp, key and value.

For every record it fetches, aiokafka builds a ``ConsumerRecord``: eleven fields, the
headers copied into a tuple, the key and the value measured. On single-report messages
that construction is most of a consumer's CPU, and an aggregator reads four of the
fields. A consumer made with :func:`lean` as its ``key_deserializer`` (kvldp's reports
consumer, :func:`kvldp.aggregator.consumer.reports_consumer`) gets a :class:`LeanRecord`
per record instead; every other consumer of the process gets aiokafka's records as
before.

aiokafka offers no public way to choose the record it builds: :func:`install` wraps its
per-record constructor (``PartitionRecords._consumer_record``, aiokafka 0.11 to 0.14)
with one that asks which key deserializer the consumer was given. If an aiokafka release
renames it, nothing is wrapped and the reports consumer gets aiokafka's own records
(the same values, slower); ``tests/test_lean_records.py`` then fails to say so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from aiokafka.consumer import fetcher


class LeanRecord(NamedTuple):
    """A fetched record as an aggregator reads it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def lean(key: bytes | None) -> bytes | None:
    """The key deserializer that asks for :class:`LeanRecord`: keys are left as they are."""
    return key


_installed: list[Callable[..., Any]] = []


def install() -> bool:
    """Make consumers whose key deserializer is :func:`lean` build :class:`LeanRecord`
    (once per process); whether aiokafka's record constructor was found and wrapped."""
    if _installed:
        return True
    records = getattr(fetcher, "PartitionRecords", None)
    original: Callable[..., Any] | None = getattr(records, "_consumer_record", None)
    if records is None or original is None:
        return False

    def consumer_record(self: Any, tp: Any, record: Any) -> Any:
        if self._key_deserializer is lean:
            return LeanRecord(record.offset, record.timestamp, record.key, record.value)
        return original(self, tp, record)

    records._consumer_record = consumer_record
    _installed.append(original)
    return True
