"""Per-partition filters kept with the statistics: report de-duplication and the
privacy-budget ledger. Both are part of the checkpointed partition state, so a crash
cannot reset them, and both are vectorised over a fetch (no Python loop per report).

**De-duplication.** A device may tag every report with a random 64-bit ``rid``. A
report whose id is among the last ``dedup_horizon`` ids of its partition (or repeated
within the fetch) is dropped and counted as a duplicate. Device resends land in the
same partition because reports are keyed by device id. Reports without an id cannot be
told from fresh ones and are always folded.

**Budget ledger.** With ``max_reports_per_device`` set, each message is charged to its
Kafka key — the device id — in the budget window of its record timestamp. A message
whose reports would take its device past the limit goes to the dead-letter topic as
``budget_exceeded`` (a gateway batch is charged whole to its key). The ledger stores
only ``HMAC-SHA256(ledger key, device id)[:8]``, never device ids, and keeps the current
and the previous window.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]


def first_occurrences(rids: U64) -> NDArray[np.bool_]:
    """True where a non-zero id appears for the first time in ``rids`` (zeros are kept)."""
    keep = np.ones(rids.shape[0], dtype=bool)
    tagged = np.flatnonzero(rids != 0)
    if tagged.size:
        _, first = np.unique(rids[tagged], return_index=True)
        mask = np.zeros(tagged.size, dtype=bool)
        mask[first] = True
        keep[tagged] = mask
    return keep


def deduplicate(rids: U64, recent: U64, horizon: int) -> tuple[NDArray[np.bool_], U64]:
    """(reports to keep, the new recent-id ring). ``recent`` lists ids oldest first."""
    if horizon <= 0:
        return np.ones(rids.shape[0], dtype=bool), recent
    keep = first_occurrences(rids) & ~((rids != 0) & np.isin(rids, recent))
    fresh = rids[keep & (rids != 0)]
    updated = np.concatenate([recent, fresh])[-horizon:] if fresh.size else recent
    return keep, updated.astype(np.uint64)


def device_hashes(key: bytes, devices: Sequence[bytes | None]) -> U64:
    """Keyed 64-bit hashes of device ids (``None``, an unkeyed record, hashes the empty id)."""
    out = np.empty(len(devices), dtype=np.uint64)
    for i, device in enumerate(devices):
        digest = hmac.new(key, device or b"", hashlib.sha256).digest()
        out[i] = int.from_bytes(digest[:8], "little")
    return out


@dataclass
class Ledger:
    """Reports charged per hashed device, per budget window (the latest two windows)."""

    windows: dict[int, tuple[U64, I64]] = field(default_factory=dict)

    def copy(self) -> Ledger:
        return Ledger({w: (k.copy(), c.copy()) for w, (k, c) in self.windows.items()})

    def charge(self, windows: I64, devices: U64, reports: I64, limit: int) -> NDArray[np.bool_]:
        """Charge messages in order; returns which were within budget (and records them).

        A message is admitted when the device's reports in that window, counting every
        earlier message of this fetch (admitted or not), stay within ``limit``.
        """
        admitted = np.zeros(devices.shape[0], dtype=bool)
        for window in np.unique(windows):
            rows = np.flatnonzero(windows == window)
            keys, counts = self.windows.get(int(window), (np.zeros(0, np.uint64), np.zeros(0, np.int64)))
            dev = devices[rows]
            uniq, inverse = np.unique(dev, return_inverse=True)
            before = np.zeros(uniq.shape[0], dtype=np.int64)
            if keys.size:
                pos = np.minimum(np.searchsorted(keys, uniq), keys.size - 1)
                hit = keys[pos] == uniq
                before[hit] = counts[pos[hit]]
            # running total per device, in message order
            order = np.argsort(inverse, kind="stable")
            sizes = reports[rows][order]
            group = inverse[order]
            running = _group_cumsum(sizes, group)
            ok = before[group] + running <= limit
            admitted[rows[order]] = ok
            spent = np.bincount(group, weights=np.where(ok, sizes, 0), minlength=uniq.size).astype(np.int64)
            merged_keys = np.union1d(keys, uniq)
            merged = np.zeros(merged_keys.shape[0], dtype=np.int64)
            merged[np.searchsorted(merged_keys, keys)] += counts
            merged[np.searchsorted(merged_keys, uniq)] += spent
            self.windows[int(window)] = (merged_keys.astype(np.uint64), merged)
        latest = max(self.windows, default=0)
        for window in [w for w in self.windows if w < latest - 1]:
            del self.windows[window]
        return admitted


def _group_cumsum(values: I64, groups: I64) -> I64:
    """Running sum of ``values`` within each group, for values sorted by group."""
    total = np.cumsum(values)
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    offsets = np.repeat(np.r_[0, total[starts[1:] - 1]], np.diff(np.r_[starts, values.shape[0]]))
    return np.asarray(total - offsets, dtype=np.int64)
