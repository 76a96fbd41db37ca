"""Public ratings datasets (``user,item,rating``) as key-value populations.

Ratings files are how the papers' real data comes (MovieLens, Clothing, Amazon): one
row per rating, extra columns (a timestamp) ignored, separated by commas, tabs or
MovieLens 10M's ``::``, with or without a header, in any row order. A user is a device, an item is a key, a rating
is a value. The papers keep the most-rated items as the key domain and scale ratings
linearly into [-1, 1] from the rating range (MovieLens 20M's 0.5-5 gives
v = (r - 2.75)/2.25); :func:`to_population` does exactly that, and every user stays in
the population — a user holding none of the kept items still reports (as "none").

The whole file is read into arrays (20 M ratings fit easily); every problem names its
line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.primitives import FloatArray, IntArray
from kvldp.sim.csvsource import InvalidCsv, parse_number

HEADER_WORDS = {
    "user",
    "userid",
    "user_id",
    "item",
    "itemid",
    "item_id",
    "movieid",
    "rating",
    "device",
    "key",
}


@dataclass(frozen=True)
class Ratings:
    """All ratings of a file: dense user and item indices, labels in first-seen order."""

    path: Path
    user_ids: list[str]
    item_ids: list[str]
    user: IntArray
    item: IntArray
    rating: FloatArray

    @property
    def range(self) -> tuple[float, float]:
        return float(self.rating.min()), float(self.rating.max())

    def top_items(self, d: int) -> list[str]:
        """The ``d`` most-rated items (ties: first seen first), as the papers pick keys."""
        counts = np.bincount(self.item, minlength=len(self.item_ids))
        order = np.argsort(-counts, kind="stable")[:d]
        return [self.item_ids[i] for i in order]

    def to_population(self, items: list[str], value_range: tuple[float, float] | None = None) -> KVData:
        """Every user's ratings of ``items`` (key j = items[j]), scaled into [-1, 1]."""
        lo, hi = value_range or self.range
        if not hi > lo:
            raise InvalidCsv(f"{self.path}: every rating is {lo:g}; a value range needs two distinct ratings")
        index = {label: i for i, label in enumerate(self.item_ids)}
        key_of = np.full(len(self.item_ids), -1, dtype=np.int64)
        for j, label in enumerate(items):
            if label not in index:
                raise InvalidCsv(f"{self.path}: item {label!r} has no rating")
            key_of[index[label]] = j
        keys = key_of[self.item]
        kept = keys >= 0
        users, keys = self.user[kept], keys[kept]
        values = np.clip((2.0 * self.rating[kept] - (lo + hi)) / (hi - lo), -1.0, 1.0)
        order = np.lexsort((keys, users))
        indptr = np.zeros(len(self.user_ids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(users, minlength=len(self.user_ids)), out=indptr[1:])
        return KVData(d=len(items), indptr=indptr, keys=keys[order], values=values[order])

    def devices(self, keys: frozenset[str]) -> Iterator[tuple[str, dict[str, float]]]:
        """(user id, {item: raw rating}) for every user, ratings of items outside ``keys`` dropped."""
        kept = np.array([label in keys for label in self.item_ids], dtype=bool)[self.item]
        order = np.argsort(self.user, kind="stable")
        bounds = np.searchsorted(self.user[order], np.arange(len(self.user_ids) + 1))
        for u, label in enumerate(self.user_ids):
            rows = order[bounds[u] : bounds[u + 1]]
            rows = rows[kept[rows]]
            yield label, {self.item_ids[int(self.item[i])]: float(self.rating[i]) for i in rows}


def is_ratings_file(path: Path) -> bool:
    """A ratings file announces itself: a ratings header (``user``, ``item``, ``rating``,
    MovieLens' ``userId,movieId,...``), tab or ``::`` separators, or more than three
    columns. Anything else is the device format (``device,key,value``, header optional),
    whose stricter checks — every key known, a device's rows together — then apply."""
    first = _first_line(path)
    if "\t" in first or "::" in first:
        return True
    cells = [c.strip() for c in first.split(",")]
    if [c.lower() for c in cells[:3]] == ["device", "key", "value"]:
        return False
    return len(cells) > 3 or _has_header_word(cells)


def _first_line(path: Path) -> str:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    return line
    except OSError as exc:
        raise InvalidCsv(f"{path}: cannot be read: {exc.strerror}") from None
    return ""


def _rows(handle: TextIO, first: str) -> Iterator[list[str]]:
    if "::" in first:  # MovieLens 1M/10M: user::item::rating::timestamp
        return (line.rstrip("\r\n").split("::") for line in handle)
    return csv.reader(handle, delimiter="\t" if "\t" in first else ",")


def read_ratings(path: Path) -> Ratings:
    """Parse a ratings file (see the module docstring); raise :class:`InvalidCsv` on bad rows."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InvalidCsv(f"{path}: cannot be read: {exc.strerror}") from None
    users: dict[str, int] = {}
    items: dict[str, int] = {}
    user_col: list[int] = []
    item_col: list[int] = []
    rating_col: list[float] = []
    with handle:
        first = _first_line(path)
        seen_row = False
        for lineno, row in enumerate(_rows(handle, first), start=1):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) < 3:
                raise InvalidCsv(f"{path}:{lineno}: expected user,item,rating, got {len(row)} columns")
            user, item, text = (cell.strip() for cell in row[:3])
            if not seen_row:
                seen_row = True
                if _is_header(user, item, text):
                    continue
            rating = parse_number(text, f"{path}:{lineno}: rating")
            user_col.append(users.setdefault(user, len(users)))
            item_col.append(items.setdefault(item, len(items)))
            rating_col.append(rating)
    if not rating_col:
        raise InvalidCsv(f"{path}: no ratings")
    user_arr = np.asarray(user_col, dtype=np.int64)
    item_arr = np.asarray(item_col, dtype=np.int64)
    pair = user_arr * len(items) + item_arr
    uniq, counts = np.unique(pair, return_counts=True)
    if uniq.shape[0] != pair.shape[0]:
        dup = int(uniq[np.argmax(counts > 1)])
        u, i = divmod(dup, len(items))
        raise InvalidCsv(
            f"{path}: user {list(users)[u]!r} rates item {list(items)[i]!r} more than once; "
            "keep one rating per user and item"
        )
    return Ratings(
        path=path,
        user_ids=list(users),
        item_ids=list(items),
        user=user_arr,
        item=item_arr,
        rating=np.asarray(rating_col, dtype=np.float64),
    )


def _has_header_word(cells: list[str]) -> bool:
    return any(c.strip().lower().split(":")[0] in HEADER_WORDS for c in cells)


def _is_header(user: str, item: str, rating: str) -> bool:
    """A header names its columns: a known word, or no field is a number (a data row
    whose rating is garbage must fail, not vanish as a "header")."""
    if _has_header_word([user, item, rating]):
        return True
    return not any(_is_number(c) for c in (user, item, rating))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
