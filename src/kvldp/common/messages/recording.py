"""The recording file: raw report messages with their Kafka metadata, for replay.

A recording is a msgpack stream: one header map, then one map per record

    {"format": "kvldp-recording", "v": 1, "collection": name, "digest": uint32, "topic": str}
    {"p": partition, "o": offset, "t": timestamp_ms, "k": key | nil, "v": value | nil}

It keeps the original bytes (bad messages included) and timestamps, so replaying it
into a fresh topic, or folding it offline, reproduces the original statistics and
windows exactly. The functions take open binary streams; opening files is the caller's
business, which keeps this module free of I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import msgpack

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError

FORMAT = "kvldp-recording"
VERSION = 1


class InvalidRecording(KvldpError):
    """A file is not a kvldp recording, or belongs to another collection."""


@dataclass(frozen=True)
class RecordedMessage:
    """One report message as it was read from Kafka, with the metadata a replay restores."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class RecordingHeader:
    """What a recording is of: the collection (name and digest) and the topic it was read from."""

    collection: str
    digest: int
    topic: str


def write_header(stream: IO[bytes], collection: Collection) -> None:
    header = {
        "format": FORMAT,
        "v": VERSION,
        "collection": collection.name,
        "digest": collection.digest,
        "topic": collection.reports_topic,
    }
    stream.write(msgpack.packb(header, use_bin_type=True))


def write_record(stream: IO[bytes], record: RecordedMessage) -> None:
    entry = {
        "p": record.partition,
        "o": record.offset,
        "t": record.timestamp,
        "k": record.key,
        "v": record.value,
    }
    stream.write(msgpack.packb(entry, use_bin_type=True))


def read_recording(stream: IO[bytes]) -> tuple[RecordingHeader, Iterator[RecordedMessage]]:
    """The header and a lazy iterator over the records of a recording stream."""
    unpacker = msgpack.Unpacker(stream, raw=False, max_buffer_size=64 << 20)
    try:
        head: Any = next(unpacker)
    except StopIteration:
        raise InvalidRecording("the recording is empty") from None
    except Exception as exc:
        raise InvalidRecording(f"not a kvldp recording: {exc}") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("v") != VERSION:
        raise InvalidRecording("not a kvldp recording (missing or unsupported header)")
    header = RecordingHeader(str(head["collection"]), int(head["digest"]), str(head["topic"]))

    def records() -> Iterator[RecordedMessage]:
        for entry in unpacker:
            if not isinstance(entry, dict):
                raise InvalidRecording("corrupt record in recording")
            yield RecordedMessage(int(entry["p"]), int(entry["o"]), int(entry["t"]), entry["k"], entry["v"])

    return header, records()


def check_header(header: RecordingHeader, collection: Collection) -> None:
    """Refuse to fold or replay a recording of another collection or configuration."""
    if header.collection != collection.name or header.digest != collection.digest:
        raise InvalidRecording(
            f"the recording is of collection {header.collection!r} (digest {header.digest}), "
            f"not {collection.name!r} (digest {collection.digest})"
        )
