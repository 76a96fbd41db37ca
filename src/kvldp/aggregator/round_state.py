"""The aggregator's side of an interactive collection's rounds (PrivKVM, live).

:class:`RoundState` is the protocol's server: which round is open, the means published
before every round so far, and when the open round may close. It lives in the
checkpoint next to the statistics and offsets it belongs to, and the service keeps one
order when a round closes: fold nothing more, compute m^(r) from the round's counts,
**checkpoint**, and only then publish the control record. A crash before the checkpoint
leaves the round open and nothing published; a crash after it restarts from the closed
round and publishes its record again (the control topic is compacted and keyed, so
that is idempotent). A round is never repeated and never skipped.

A round closes when it holds ``round_min_reports`` reports *and* ``round_period`` has
passed since it opened (wall-clock time of the aggregator): the period gives every
device its chance to report once, the minimum keeps a quiet period from closing a
round on a handful of reports.

:class:`RoundBook` is the server's mirror of the devices' rule of one report per round:
per partition, a bit mask of the rounds each device (a row of its keyed hashes)
reported in. A
second report of a device in one round is refused as ``budget_exceeded``; the masks
also give the epsilon each device has spent (``kvldp_device_privacy_spent_epsilon``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvldp.aggregator.tag_index import grown
from kvldp.common.config.collection import Collection
from kvldp.common.data.schema import ReportBatch
from kvldp.common.mechanisms.privkvm_rounds import means_digest
from kvldp.common.messages.control_record import Control, interactive_mechanism
from kvldp.common.primitives import FloatArray

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]


@dataclass
class RoundState:
    """Open round, published means m^(0..closed), and what the close rule needs."""

    collection: Collection
    #: m^(0), m^(1), ...: the means published before each round so far
    published: list[FloatArray]
    #: wall time (ms) the open round opened
    opened_ms: int
    #: reports folded in the open round
    open_reports: int = 0
    complete: bool = False
    #: wall time (ms) each closed round closed
    closed_ms: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, collection: Collection, now_ms: int) -> RoundState:
        return cls(collection, [np.zeros(collection.d)], now_ms)

    @property
    def open_round(self) -> int:
        """0-based index of the open round (when complete: the number of rounds run)."""
        return len(self.published) - 1

    @property
    def closed(self) -> int:
        """Rounds closed so far."""
        return len(self.closed_ms)

    def control(self) -> Control:
        return Control.build(self.collection, self.open_round, self.published[-1], self.complete)

    def due(self, now_ms: int) -> bool:
        """Whether the open round may close now."""
        mech = interactive_mechanism(self.collection)
        return (
            not self.complete
            and self.open_reports >= mech.round_min_reports
            and now_ms - self.opened_ms >= mech.round_period_s * 1000
        )

    def close(self, counts: NDArray[np.int64], now_ms: int) -> None:
        """Close the open round on ``counts`` (every round's counts, all partitions):
        publish m^(r+1), and open the next round unless the rounds are over."""
        mech = interactive_mechanism(self.collection)
        r = self.open_round
        exact = np.asarray(counts, dtype=np.float64)
        self.published.append(mech.next_means(exact, r, self.published[-1]))
        self.closed_ms.append(now_ms)
        self.complete = mech.stops_after(r, exact)
        self.opened_ms = now_ms
        self.open_reports = 0

    def gate(
        self, reports: ReportBatch
    ) -> tuple[NDArray[np.bool_], NDArray[np.object_], NDArray[np.object_]]:
        """(bad rows, reason, detail): a report for another round than the open one is
        ``stale_round``; one built on other means than the published ones ``round_mismatch``."""
        rounds = np.asarray(reports["r"], dtype=np.int64)
        digests = np.asarray(reports["md"], dtype=np.int64)
        n = rounds.shape[0]
        reason = np.full(n, "", dtype=object)
        detail = np.full(n, "", dtype=object)
        r = self.open_round
        stale = np.ones(n, dtype=bool) if self.complete else rounds != r
        now = "the rounds are complete" if self.complete else f"round {r + 1} is open"
        for bad_round in np.unique(rounds[stale]):
            hit = stale & (rounds == bad_round)
            reason[hit] = "stale_round"
            detail[hit] = f"report for round {int(bad_round) + 1}; {now}"
        expected = means_digest(r, self.published[-1])
        mismatch = ~stale & (digests != expected)
        reason[mismatch] = "round_mismatch"
        detail[mismatch] = f"report built on other means than round {r + 1}'s (digest {expected:08x})"
        return stale | mismatch, reason, detail

    def to_wire(self) -> dict[str, Any]:
        return {
            "published": [np.ascontiguousarray(m, dtype="<f8").tobytes() for m in self.published],
            "opened_ms": self.opened_ms,
            "open_reports": self.open_reports,
            "complete": self.complete,
            "closed_ms": list(self.closed_ms),
        }

    @classmethod
    def from_wire(cls, collection: Collection, obj: dict[str, Any]) -> RoundState:
        return cls(
            collection,
            [np.frombuffer(m, dtype="<f8").astype(np.float64) for m in obj["published"]],
            int(obj["opened_ms"]),
            int(obj["open_reports"]),
            bool(obj["complete"]),
            [int(t) for t in obj["closed_ms"]],
        )


class RoundBook:
    """Rounds reported per device (bit r of a 64-bit mask: round r), by the device's row of
    the partition's :class:`~kvldp.aggregator.tag_index.TagIndex`, and how many devices
    hold each mask (what the spent histogram reads, without a pass over the devices).
    Charging a fetch costs the fetch, not the devices held."""

    def __init__(self, masks: U64 | None = None) -> None:
        held = np.zeros(0, np.uint64) if masks is None else np.asarray(masks, np.uint64)
        self._masks = held.copy()
        self._size = held.shape[0]
        #: devices per non-zero mask
        self.by_mask: Counter[int] = Counter()
        self._tally(held, 1)

    @property
    def rows(self) -> int:
        """Rows with a mask so far (past them every mask is 0)."""
        return int(self._size)

    def masks_of(self, rows: I64) -> U64:
        """The mask of each row (0 for a row never charged, or -1: a device not held)."""
        out = np.zeros(rows.shape[0], np.uint64)
        inside = (rows >= 0) & (rows < self._size)
        out[inside] = self._masks[rows[inside]]
        return out

    def assess(self, devices: U64, rows: I64, round_index: int) -> NDArray[np.bool_]:
        """Which of these reports of round ``round_index`` (their devices, in order, and
        their rows, -1 for a device not held) are admitted: a device's first report in
        the round, if it had none there before. The book is unchanged (:meth:`commit`)."""
        bit = np.uint64(1) << np.uint64(round_index)
        _, first = np.unique(devices, return_index=True)
        fresh = (self.masks_of(rows[first]) & bit) == 0
        admitted = np.zeros(devices.shape[0], dtype=bool)
        admitted[first[fresh]] = True
        return admitted

    def commit(self, rows: I64, round_index: int) -> None:
        """Mark round ``round_index`` reported for ``rows`` (distinct)."""
        if not rows.size:
            return
        before = self.masks_of(rows)
        self._reach(int(rows.max()) + 1)
        after = before | (np.uint64(1) << np.uint64(round_index))
        self._tally(before, -1)
        self._tally(after, 1)
        self._masks[rows] = after

    def set(self, rows: I64, masks: U64) -> None:
        """Make the masks of ``rows`` (distinct) ``masks`` (restoring a checkpoint)."""
        if not rows.size:
            return
        self._reach(int(rows.max()) + 1)
        self._tally(self.masks_of(rows), -1)
        self._tally(masks, 1)
        self._masks[rows] = masks

    def _reach(self, needed: int) -> None:
        self._masks = grown(self._masks, self._size, needed, 0)
        self._size = max(self._size, needed)

    def _tally(self, masks: U64, sign: int) -> None:
        values, devices = np.unique(masks[masks != 0], return_counts=True)
        for value, count in zip(values.tolist(), devices.tolist(), strict=True):
            self.by_mask[value] += sign * count
            if not self.by_mask[value]:
                del self.by_mask[value]

    def spent(self, costs: FloatArray) -> FloatArray:
        """Epsilon each device that reported spent: the costs of the rounds it reported in."""
        masks = self._masks[: self._size]
        return mask_costs(masks[masks != 0], costs)


def mask_costs(masks: U64, costs: FloatArray) -> FloatArray:
    """The epsilon of each mask of rounds reported: the sum of those rounds' costs."""
    bits = (masks[:, None] >> np.arange(len(costs), dtype=np.uint64)[None, :]) & np.uint64(1)
    return np.asarray(bits.astype(np.float64) @ np.asarray(costs, dtype=np.float64), dtype=np.float64)
