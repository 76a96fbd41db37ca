"""Fetched records that carry what an aggregator reads: offset, timestamp, key and value.

For every record it fetches, aiokafka builds a ``ConsumerRecord``: eleven fields, the
headers copied into a tuple, the key and the value measured. On single-report messages
that construction is most of a consumer's CPU, and an aggregator reads four of the
fields. A consumer made with :func:`lean` as its ``key_deserializer`` (kvldp's reports
consumer, :func:`kvldp.aggregator.consumer.reports_consumer`) gets the records of
aiokafka's batch reader themselves, which already carry those four (a
:class:`LeanRecord`): nothing is built per record. Every other consumer of the process
gets aiokafka's records as before.

aiokafka offers no public way to choose the record it builds. Its per-fetch reader
(``PartitionRecords``, aiokafka 0.11 to 0.14) calls ``self._consumer_record(tp, record)``
for each record: :func:`install` wraps the reader's constructor so that a reader made
for a lean consumer gets, as an attribute of its own, a function that returns the record
as it is; the method stays for every other reader. Nothing is asked per record. If an
aiokafka release renames either, nothing is wrapped and the reports consumer gets
aiokafka's own records (the same values, slower); ``tests/test_lean_records.py`` then
fails to say so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from aiokafka.consumer import fetcher


class LeanRecord(Protocol):
    """A fetched record as an aggregator reads it: a record of aiokafka's batch reader,
    or one read back from a recording."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


def lean(key: bytes | None) -> bytes | None:
    """The key deserializer that asks for :class:`LeanRecord`: keys are left as they are."""
    return key


_installed: list[Callable[..., Any]] = []


def _as_read(tp: Any, record: Any) -> Any:
    """A lean reader's record: the batch reader's own."""
    return record


def install() -> bool:
    """Make consumers whose key deserializer is :func:`lean` hand out the batch reader's
    records (once per process); whether aiokafka's reader was found and wrapped."""
    if _installed:
        return True
    records = getattr(fetcher, "PartitionRecords", None)
    if records is None or not callable(getattr(records, "_consumer_record", None)):
        return False
    original: Callable[..., None] = records.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self._key_deserializer is lean:
            self._consumer_record = _as_read

    records.__init__ = init
    _installed.append(original)
    return True
