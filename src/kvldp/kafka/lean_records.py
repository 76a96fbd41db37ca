"""Fetched records that carry what an aggregator reads, handed out a record batch at a time.

For every record it fetches, aiokafka builds a ``ConsumerRecord`` (eleven fields, the
headers copied into a tuple, the key and the value measured), and hands records out one
by one through two Python-level loops. On single-report messages that is most of a
consumer's CPU, and an aggregator reads four of the fields: offset, timestamp, key and
value, which the records of aiokafka's batch reader already carry (a
:class:`LeanRecord`). A consumer made with :func:`lean` as its ``key_deserializer``
(kvldp's reports consumer, :func:`kvldp.aggregator.consumer.reports_consumer`) gets
those records, a whole Kafka record batch per item: ``getmany`` returns, per partition,
a list of lists (:func:`records_of` makes one list of it), and its ``max_records`` counts
record batches. Every other consumer of the process gets aiokafka's records as before.

What a lean reader does per record batch is what aiokafka's own reader does per record:
it checks the batch's CRC (when the consumer checks CRCs), skips control batches, drops
the records before the fetch offset (a fetch may begin inside a batch) and moves the
position past the batch. A consumer that reads committed records only keeps aiokafka's
per-record reader (its aborted-transaction bookkeeping is per record), with each record
as a batch of one.

aiokafka offers no public way to choose how it reads. Its per-fetch reader
(``PartitionRecords``, aiokafka 0.11 to 0.14) keeps the iterator it reads from in
``_records_iterator``: :func:`install` wraps the reader's constructor so that a reader
made for a lean consumer gets :func:`_record_batches` in its place. Nothing is asked per
record. If an aiokafka release renames what is wrapped, nothing is wrapped and the
reports consumer gets aiokafka's own records one by one (the same values, slower);
``tests/test_lean_records.py`` then fails to say so.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any, Protocol

from aiokafka.consumer import fetcher
from aiokafka.errors import CorruptRecordException


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
    """The key deserializer that asks for record batches of :class:`LeanRecord`: keys
    are left as they are."""
    return key


def records_of(fetched: Sequence[Any]) -> Sequence[LeanRecord]:
    """One partition's records from what ``getmany`` returned for it: a lean consumer's
    record batches joined in order, any other consumer's records as they are."""
    if fetched and type(fetched[0]) is list:
        return list(chain.from_iterable(fetched))
    return fetched


_offset = attrgetter("offset")
_installed: list[Callable[..., Any]] = []


def _record_batches(reader: Any) -> Iterator[list[Any]]:
    """The records of a fetch, one list per record batch (see the module docstring)."""
    records = reader._records
    while records.has_next():
        batch = records.next_batch()
        if reader._check_crcs and not batch.validate_crc():
            # the fetch is dropped with the error and fetched again, as aiokafka does
            raise CorruptRecordException(f"Invalid CRC - {reader._tp}")
        held = [] if batch.is_control_batch else list(batch)
        start = reader.next_fetch_offset
        if held and held[0].offset < start:  # the fetch began inside this batch
            held = held[bisect_left(held, start, key=_offset) :]
        reader.next_fetch_offset = batch.next_offset
        if held:
            yield held


def _one_by_one(records: Iterator[Any]) -> Iterator[list[Any]]:
    """aiokafka's own reader's records, each as a batch of one."""
    for record in records:
        yield [record]


def _as_read(tp: Any, record: Any) -> Any:
    """A lean reader's record: the batch reader's own."""
    return record


def install() -> bool:
    """Make consumers whose key deserializer is :func:`lean` read record batches of
    :class:`LeanRecord` (once per process); whether aiokafka's reader was found and wrapped."""
    if _installed:
        return True
    records = getattr(fetcher, "PartitionRecords", None)
    read_committed = getattr(fetcher, "READ_COMMITTED", None)
    if records is None or read_committed is None or not callable(getattr(records, "_unpack_records", None)):
        return False
    original: Callable[..., None] = records.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self._key_deserializer is not lean or not hasattr(self, "_records_iterator"):
            return
        self._consumer_record = _as_read
        if self._isolation_level == read_committed:
            self._records_iterator = _one_by_one(self._records_iterator)
        else:
            self._records_iterator = _record_batches(self)

    records.__init__ = init
    _installed.append(original)
    return True
