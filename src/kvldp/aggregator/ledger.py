"""The privacy-budget ledger, kept with the statistics of each partition (so a crash
cannot reset it) and vectorised over a fetch. (Its sibling filter, de-duplication by
report id, is :mod:`kvldp.aggregator.dedup`.)

**Budget ledger.** With ``max_reports_per_device`` set, each message is charged to its
Kafka key — the device id — in the budget window of its record timestamp. A message
whose reports would take its device past the limit goes to the dead-letter topic as
``budget_exceeded`` (a gateway batch is charged whole to its key); see
:meth:`Ledger.charge` for the exact rule. The ledger stores only
``HMAC-SHA256(ledger key, device id)[:8]``, never device ids, and keeps the current and
the previous window.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvldp.aggregator.tag_index import RowCounts, TagIndex

U64 = NDArray[np.uint64]
I64 = NDArray[np.int64]


#: SHA-256's block size and the HMAC pads (RFC 2104) as byte translation tables
_BLOCK = 64
_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))


def device_hashes(key: bytes, devices: Sequence[bytes | None]) -> U64:
    """Keyed 64-bit hashes of device ids (``None``, an unkeyed record, hashes the empty id):
    the first 8 bytes, little-endian, of HMAC-SHA256(key, id).

    The HMAC is RFC 2104's: the two SHA-256 states keyed by the padded key are set up once
    and copied for each id, which costs a third of :func:`hmac.digest` per id (that sets up
    the key every call) — this runs once per fetched record."""
    padded = (hashlib.sha256(key).digest() if len(key) > _BLOCK else key).ljust(_BLOCK, b"\0")
    inner, outer = hashlib.sha256(padded.translate(_IPAD)), hashlib.sha256(padded.translate(_OPAD))

    def digest(device: bytes | None) -> bytes:
        h = inner.copy()
        h.update(device or b"")
        o = outer.copy()
        o.update(h.digest())
        return o.digest()[:8]

    return np.frombuffer(b"".join(map(digest, devices)), dtype="<u8").astype(np.uint64)


#: outcomes of :meth:`Ledger.charge`
ADMITTED, OVER_BUDGET, WINDOW_CLOSED = 0, 1, 2


@dataclass(frozen=True)
class Charges:
    """What a fetch charges, by budget window: the devices (distinct) and what each spent,
    admitted or not (:meth:`Ledger.commit` records it)."""

    windows: dict[int, tuple[U64, I64]]


@dataclass
class Ledger:
    """Reports charged per device (a row of the partition's
    :class:`~kvldp.aggregator.tag_index.TagIndex`), per budget window (the latest two)."""

    windows: dict[int, RowCounts] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(counts.nbytes for counts in self.windows.values())

    def assess(
        self, windows: I64, devices: U64, rows: I64, reports: I64, limit: int
    ) -> tuple[NDArray[np.int8], Charges]:
        """Each message's outcome (``ADMITTED``, ...) and what charging them all, in order,
        adds to the ledger (``devices``: each message's device, ``rows``: its row, -1 for
        a device not seen before); the ledger itself is unchanged until :meth:`commit`.

        The rule is sequential, so it gives the same answer however the stream is cut
        into fetches (the live run, a restart, the replay oracle agree exactly):

        * every message is charged to its device and window, admitted or not; a message
          is admitted when the device's charged total, this message included, stays
          within ``limit`` (so a device that tried to overspend stays refused for the
          rest of the window, and never more than ``limit`` reports are folded);
        * a message whose window is older than the one before the latest window seen
          so far in the partition is refused (``WINDOW_CLOSED``): the ledger only keeps
          two windows, and a forged old timestamp must not buy a fresh budget.

        Its cost is the fetch's, whatever the number of devices held.
        """
        outcome = np.full(devices.shape[0], OVER_BUDGET, dtype=np.int8)
        latest = max(self.windows, default=int(windows.min()) if windows.size else 0)
        seen_before = np.maximum.accumulate(np.r_[latest, windows])[:-1]
        is_open = windows >= seen_before - 1
        outcome[~is_open] = WINDOW_CLOSED
        charges: dict[int, tuple[U64, I64]] = {}
        for window in np.unique(windows[is_open]):
            chosen = np.flatnonzero((windows == window) & is_open)
            uniq, first, inverse = np.unique(devices[chosen], return_index=True, return_inverse=True)
            before = np.zeros(uniq.shape[0], np.int64)
            held = self.windows.get(int(window))
            if held is not None:
                known = rows[chosen[first]]
                before[known >= 0] = held.get(known[known >= 0])
            # running total per device, in message order
            order = np.argsort(inverse, kind="stable")
            sizes = reports[chosen][order]
            group = inverse[order]
            ok = before[group] + _group_cumsum(sizes, group) <= limit
            outcome[chosen[order[ok]]] = ADMITTED
            charges[int(window)] = (
                uniq.astype(np.uint64),
                np.bincount(group, weights=sizes, minlength=uniq.size).astype(np.int64),
            )
        return outcome, Charges(charges)

    def commit(self, charges: Charges, index: TagIndex) -> I64:
        """Record what :meth:`assess` found (its devices get rows of ``index`` if they had
        none), and keep the latest two windows; returns the rows charged."""
        charged = [np.zeros(0, np.int64)]
        for window, (devices, spent) in charges.windows.items():
            rows = index.add(devices)
            self.windows.setdefault(window, RowCounts()).add(rows, spent)
            charged.append(rows)
        newest = max(self.windows, default=0)
        for window in [w for w in self.windows if w < newest - 1]:
            del self.windows[window]
        return np.concatenate(charged)


def _group_cumsum(values: I64, groups: I64) -> I64:
    """Running sum of ``values`` within each group, for values sorted by group."""
    total = np.cumsum(values)
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    offsets = np.repeat(np.r_[0, total[starts[1:] - 1]], np.diff(np.r_[starts, values.shape[0]]))
    return np.asarray(total - offsets, dtype=np.int64)
