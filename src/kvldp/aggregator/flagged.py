"""Devices whose reports the plausibility rule refused, per partition (docs/plausibility.md).

A device is its record key, stored as ``HMAC-SHA256(ledger key, device id)[:8]`` like the
budget ledger's and the device book's, never as an id. Each partition keeps the sorted
hashes of the devices with at least one ``implausible_report`` and how many each sent,
bounded at :data:`MAX_FLAGGED_DEVICES`: past the bound a refused report of a device not yet
listed only adds to ``overflow``, so memory stays bounded under a flood of forged
device ids, and ``count`` (devices listed + overflow) is an upper bound on the devices.
Exported as ``kvldp_implausible_devices{collection}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: most devices one partition lists (8 + 8 bytes each)
MAX_FLAGGED_DEVICES = 1 << 16

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]


@dataclass
class FlaggedDevices:
    """Sorted device hashes with the number of refused reports of each, plus overflow."""

    tags: U64 = field(default_factory=lambda: np.zeros(0, np.uint64))
    refused: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    overflow: int = 0

    @property
    def count(self) -> int:
        """Devices with at least one refused report (an upper bound past the cap)."""
        return int(self.tags.shape[0]) + self.overflow

    def add(self, devices: U64) -> None:
        """Count one refused report for each entry of ``devices`` (repeats allowed)."""
        if not devices.size:
            return
        uniq, counts = np.unique(devices, return_counts=True)
        known = np.isin(uniq, self.tags, assume_unique=True)
        at = np.searchsorted(self.tags, uniq[known])
        self.refused[at] += counts[known]
        new, new_counts = uniq[~known], counts[~known]
        room = max(0, MAX_FLAGGED_DEVICES - self.tags.shape[0])
        self.overflow += int(new.shape[0] - min(room, new.shape[0]))
        new, new_counts = new[:room], new_counts[:room]
        if new.size:
            tags = np.concatenate([self.tags, new])
            order = np.argsort(tags, kind="stable")
            self.tags = tags[order].astype(np.uint64)
            self.refused = np.concatenate([self.refused, new_counts.astype(np.int64)])[order]

    def to_wire(self) -> dict[str, Any]:
        return {
            "tags": self.tags.astype("<u8").tobytes(),
            "refused": self.refused.astype("<i8").tobytes(),
            "overflow": self.overflow,
        }

    @classmethod
    def from_wire(cls, entry: dict[str, Any]) -> FlaggedDevices:
        tags = np.frombuffer(entry["tags"], dtype="<u8").astype(np.uint64)
        refused = np.frombuffer(entry["refused"], dtype="<i8").astype(np.int64)
        if tags.shape != refused.shape:
            raise ValueError("flagged device arrays differ in length")
        return cls(tags, refused, int(entry["overflow"]))
