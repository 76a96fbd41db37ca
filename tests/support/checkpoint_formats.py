"""Checkpoints as the older formats wrote them, made from today's (:meth:`to_bytes`, whose
rows are one inline segment): what the tests of reading old checkpoints load."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np


def format_4(payload: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint with inline rows written as format 4 wrote it: every partition's
    devices, its book (charges, latest reports, payload hashes), each ledger window whole,
    by row, and its remembered report ids, beside its statistics."""
    for entry in payload["partitions"].values():
        rows = msgpack.unpackb(entry.pop("segment"), raw=False, strict_map_key=False)
        assert rows["rows_from"] == rows["pairs_from"] == 0
        del entry["tally"]
        entry["devices"], entry["ledger"] = rows["tags"], rows["windows"]
        entry["recent"], entry["recent_at"] = rows["recent"], rows["recent_at"]
        del entry["round_tally"]
        # format 4 kept a round book (read for interactive collections only): its devices
        # sorted, a mask each
        tags = np.frombuffer(rows["tags"], dtype="<u8")
        masks = np.frombuffer(rows["rounds"], dtype="<u8")
        held = tags[: masks.shape[0]][masks != 0]
        order = np.argsort(held)
        entry["round_book"] = [held[order].tobytes(), masks[masks != 0][order].tobytes()]
        book = rows["book"]
        entry["book"] = {
            "charged": book["charged"],
            "bucket": book.get("bucket", b""),
            "latest": book.get("latest", {}),
            "pairs": rows["pairs"],
        }
    payload["v"] = 4
    return payload


def format_3(payload: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint with inline rows written as format 3 wrote it: the book with its own
    sorted devices and 64-bit charges, each ledger window with its own sorted devices."""
    payload = format_4(payload)
    for entry in payload["partitions"].values():
        tags = np.frombuffer(entry.pop("devices"), dtype="<u8")
        book = entry["book"]
        charged = np.frombuffer(book["charged"], dtype="<i4").astype("<i8")
        order = np.argsort(tags[: charged.shape[0]])
        book["tags"], book["charged"] = tags[order].tobytes(), charged[order].tobytes()
        book["bucket"] = np.frombuffer(book["bucket"], dtype="<i8")[order].tobytes()
        for name, (shape, dtype, data) in book["latest"].items():
            column = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(-1, *shape)
            book["latest"][name][2] = column[order].tobytes()
        for w, data in entry["ledger"].items():
            counts = np.frombuffer(data, dtype="<i4").astype("<i8")
            held = np.flatnonzero(counts)
            by_tag = np.argsort(tags[held])
            entry["ledger"][w] = [tags[held][by_tag].tobytes(), counts[held][by_tag].tobytes()]
    payload["v"] = 3
    return payload
