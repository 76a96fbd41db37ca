"""The tag index against a dict: rows in first-arrival order, lookups of held and unheld
tags, repeats inside a batch, growth of the table, and tags built to share low or high
bits (the hash is multiplicative with a secret multiplier: they still spread)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvldp.aggregator.tag_index import TagIndex

batches = st.lists(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 40), max_size=60), max_size=25)


@settings(max_examples=150, deadline=None)
@given(batches, st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 40), max_size=60))
def test_rows_follow_first_arrival_like_a_dict(adds: list[list[int]], probes: list[int]) -> None:
    index, rows = TagIndex(), {}
    for batch in adds:
        got = index.add(np.array(batch, dtype=np.uint64)).tolist()
        for tag, row in zip(batch, got, strict=True):
            assert rows.setdefault(tag, len(rows)) == row
    assert index.tags.tolist() == list(rows)
    assert index.find(np.array(probes, dtype=np.uint64)).tolist() == [rows.get(t, -1) for t in probes]
    again = TagIndex(np.array(list(rows), dtype=np.uint64))  # rebuilt from a checkpoint's tags
    assert again.find(np.array(list(rows), dtype=np.uint64)).tolist() == list(range(len(rows)))


@pytest.mark.parametrize("shift", [0, 20, 40, 56])
def test_structured_tags_are_found_through_many_doublings(shift: int) -> None:
    tags = (np.arange(1, 50_001, dtype=np.uint64) << np.uint64(shift)) | np.uint64(0)
    index = TagIndex()
    for part in np.array_split(tags, 37):
        index.add(part)
    assert len(index) == np.unique(tags).shape[0]
    rows = index.find(tags)
    assert (index.tags[rows] == tags).all()
    absent = tags + np.uint64(1) if shift else tags + np.uint64(10**6)
    assert (index.find(absent) == -1).all()


def test_a_checkpoint_with_a_repeated_tag_is_refused() -> None:
    with pytest.raises(ValueError, match="every tag once"):
        TagIndex(np.array([3, 5, 3], dtype=np.uint64))
