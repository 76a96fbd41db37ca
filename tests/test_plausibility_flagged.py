"""The aggregator's bounded list of devices with implausible reports."""

from __future__ import annotations

import numpy as np
import pytest

from kvldp.aggregator import flagged
from kvldp.aggregator.flagged import FlaggedDevices


def test_counts_per_device_and_survives_the_wire() -> None:
    book = FlaggedDevices()
    book.add(np.array([7, 3, 7], dtype=np.uint64))
    book.add(np.array([3, 9], dtype=np.uint64))
    assert book.count == 3
    assert dict(zip(book.tags.tolist(), book.refused.tolist(), strict=True)) == {3: 2, 7: 2, 9: 1}
    again = FlaggedDevices.from_wire(book.to_wire())
    assert (
        again.count == 3
        and np.array_equal(again.tags, book.tags)
        and np.array_equal(again.refused, book.refused)
    )


def test_memory_is_bounded_and_the_count_an_upper_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flagged, "MAX_FLAGGED_DEVICES", 4)
    book = FlaggedDevices()
    book.add(np.arange(10, dtype=np.uint64))
    assert book.tags.shape[0] == 4 and book.overflow == 6 and book.count == 10
    book.add(np.array([0], dtype=np.uint64))  # a listed device: counted, not overflowed
    assert book.overflow == 6 and int(book.refused[0]) == 2


def test_unequal_arrays_are_refused() -> None:
    entry = FlaggedDevices(np.array([1, 2], dtype=np.uint64), np.array([1, 1], dtype=np.int64)).to_wire()
    entry["refused"] = entry["refused"][:8]
    with pytest.raises(ValueError, match="differ in length"):
        FlaggedDevices.from_wire(entry)
