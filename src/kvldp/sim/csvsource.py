"""Real device data from CSV: ``device,key,value`` rows, one device's rows together.

The reader streams the file and yields one device at a time, so a file of any size can
be read in bounded memory (the data of one device, and the ids of those seen); every
problem names its line. ``kvldp produce`` reads a file through once before it sends
anything, so that a bad row anywhere means nothing published and nothing spent.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

from kvldp.common.errors import KvldpError


class InvalidCsv(KvldpError):
    """A CSV row is malformed (the message names the line)."""


def parse_number(text: str, where: str) -> float:
    """A finite float, or :class:`InvalidCsv` saying ``where`` (file, line, field) it failed."""
    try:
        value = float(text)
    except ValueError:
        raise InvalidCsv(f"{where} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InvalidCsv(f"{where} {text!r} is not finite")
    return value


def check_range(value: float, value_range: tuple[float, float] | None, where: str) -> None:
    """:class:`InvalidCsv` saying ``where`` when ``value`` is outside ``value_range`` (None:
    any value goes, the collection clips them)."""
    if value_range is not None and not value_range[0] <= value <= value_range[1]:
        lo, hi = value_range
        raise InvalidCsv(
            f"{where} {value!r} is outside the collection's value_range [{lo:g}, {hi:g}] "
            "(set clip_values = true to clip on the device)"
        )


def read_devices(
    path: Path, keys: frozenset[str], value_range: tuple[float, float] | None = None
) -> Iterator[tuple[str, dict[str, float]]]:
    """Yield (device id, {key: raw value}) per device, in file order; a value outside
    ``value_range`` is an error naming its line."""
    seen: set[str] = set()
    current: str | None = None
    pairs: dict[str, float] = {}
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InvalidCsv(f"{path}: cannot be read: {exc.strerror}") from None
    with handle:
        for lineno, row in enumerate(csv.reader(handle), start=1):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != 3:
                raise InvalidCsv(f"{path}:{lineno}: expected device,key,value, got {len(row)} columns")
            device, key, text = (cell.strip() for cell in row)
            if lineno == 1 and (device, key, text) == ("device", "key", "value"):
                continue  # header
            value = parse_number(text, f"{path}:{lineno}: value")
            check_range(value, value_range, f"{path}:{lineno}: value")
            if key not in keys:
                raise InvalidCsv(f"{path}:{lineno}: key {key!r} is not a key of the collection")
            if device != current:
                if current is not None:
                    yield current, pairs
                if device in seen:
                    raise InvalidCsv(f"{path}:{lineno}: rows of device {device!r} are not together")
                seen.add(device)
                current, pairs = device, {}
            if key in pairs:
                raise InvalidCsv(f"{path}:{lineno}: device {device!r} lists key {key!r} twice")
            pairs[key] = value
    if current is not None:
        yield current, pairs
