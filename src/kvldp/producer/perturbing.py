"""What a block of devices reports: the spending rule decided device by device, then the
reports of the devices that may send, perturbed at once.

A collection with a ``[privacy]`` table (:func:`~kvldp.producer.device_state.tracks_privacy`)
asks every device's state first (:class:`~kvldp.producer.accounts.DeviceAccounts`), which
writes the spend before anything is sent. Memoized devices need one keyed mechanism call
per state they never reported before (their randomness is their own), and a re-send is a
lookup; with ``privacy.instantaneous_epsilon`` every report going out, new or re-sent, is
the stored permanent report randomized again with fresh draws, the block's reports at
once, and the stored payload itself never goes out. Without memoization the block is
perturbed at once and the reports that may go are kept. Without a ``[privacy]`` table
nothing is enforced: the whole block is perturbed, and this device's reports are counted
as spent. An interactive collection's devices report once per round, perturbed with the
means its control record published. A device whose freshly perturbed report truncates
its pairs is warned about (:class:`~kvldp.producer.truncation.TruncationWarner`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import ReportBatch, from_rows
from kvldp.common.messages.control_record import Control, interactive_mechanism
from kvldp.common.messages.wire import WireFormat
from kvldp.producer.accounts import DeviceAccounts
from kvldp.producer.device_state import (
    DeviceState,
    FleetSummary,
    ReportStatus,
    budget_window_of,
    period_of,
    tracks_privacy,
)
from kvldp.producer.truncation import TruncationWarner


@dataclass
class Reports:
    """What a block of devices sends: the outcome counts, and the reports of the devices
    that send with their ids, in order (no batch when none does)."""

    summary: FleetSummary
    batch: ReportBatch | None = None
    device_ids: Sequence[str | bytes | int] = field(default_factory=list)


class Perturber:
    """Decides and perturbs the reports of blocks of devices of ``wire``'s collection,
    drawing from ``rng``."""

    def __init__(
        self,
        wire: WireFormat,
        accounts: DeviceAccounts,
        rng: np.random.Generator,
        truncation: TruncationWarner,
    ) -> None:
        self.collection = wire.collection
        self.wire = wire
        self.accounts = accounts
        self.rng = rng
        self.truncation = truncation
        #: whether every device follows the spending rule (a ``[privacy]`` table)
        self.tracked = tracks_privacy(self.collection)
        #: with ``privacy.instantaneous_epsilon``, what randomizes every send of a memoized report
        self._randomizer = self.collection.instantaneous_randomizer

    def block(self, users: KVData, device_ids: Sequence[str | bytes | int], ts_ms: int) -> Reports:
        """The reports of the devices of ``users`` (one id each) at report time ``ts_ms``."""
        if not self.tracked:
            self.accounts.charge_own(device_ids)
            self.truncation.check(users.sizes, device_ids)
            summary = FleetSummary(sent=users.n_users)
            return Reports(summary, self.collection.mechanism.perturb_many(users, self.rng), device_ids)
        period = period_of(self.collection, ts_ms)
        window = budget_window_of(self.collection, ts_ms)
        if self.collection.privacy.memoize:
            return self._memoized(users, device_ids, period, window)
        return self._fresh(users, device_ids, period, window)

    def _memoized(
        self, users: KVData, device_ids: Sequence[str | bytes | int], period: int | None, window: int | None
    ) -> Reports:
        """Each device's stored report of its state (derived on first use)."""
        summary = FleetSummary()
        reports = []
        keep: list[int] = []
        derived: list[int] = []  # new reports; a re-send is the stored one
        for u, device in enumerate(device_ids):
            lo, hi = int(users.indptr[u]), int(users.indptr[u + 1])
            status, report = self.accounts.state_of(device).memoized(
                self.collection, users.keys[lo:hi], users.values[lo:hi], period, window
            )
            summary.count(status)
            if report is not None:
                reports.append(report)
                keep.append(u)
            if status is ReportStatus.SENT:
                derived.append(u)
        self.truncation.check(users.sizes[derived], [device_ids[u] for u in derived])
        if not keep:
            return Reports(summary)
        batch = from_rows(reports, self.wire.fields)
        if self._randomizer is not None:
            batch = self._randomizer.randomize(batch, self.rng)
        return Reports(summary, batch, [device_ids[u] for u in keep])

    def _fresh(
        self, users: KVData, device_ids: Sequence[str | bytes | int], period: int | None, window: int | None
    ) -> Reports:
        """The whole block perturbed afresh, kept for the devices that may send."""
        summary = FleetSummary()
        keep = self._admitted(device_ids, lambda state: state.fresh(self.collection, period, window), summary)
        if not keep:
            return Reports(summary)
        self.truncation.check(users.sizes[keep], [device_ids[u] for u in keep])
        batch = self.collection.mechanism.perturb_many(users, self.rng)
        if len(keep) < users.n_users:
            rows = np.asarray(keep)
            batch = {name: column[rows] for name, column in batch.items()}
        return Reports(summary, batch, [device_ids[u] for u in keep])

    def round(self, users: KVData, device_ids: Sequence[str | bytes | int], control: Control) -> Reports:
        """The reports for the round ``control`` opens (interactive collections): the
        devices that may report (each records its spend first), perturbed at once with
        the published means."""
        summary = FleetSummary()
        if control.complete:
            summary.rounds_done = users.n_users
            return Reports(summary)
        keep = self._admitted(
            device_ids, lambda state: state.round_report(self.collection, control.round), summary
        )
        if not keep:
            return Reports(summary)
        members = users if len(keep) == users.n_users else users.take(np.asarray(keep, dtype=np.int64))
        mechanism = interactive_mechanism(self.collection)
        batch = mechanism.perturb_round_many(members, self.rng, control.round, control.means)
        return Reports(summary, batch, [device_ids[u] for u in keep])

    def _admitted(
        self,
        device_ids: Sequence[str | bytes | int],
        rule: Callable[[DeviceState], ReportStatus],
        summary: FleetSummary,
    ) -> list[int]:
        """The positions of the devices whose state lets them send (``rule`` says SENT, and
        has written the spend), every status counted in ``summary``."""
        keep: list[int] = []
        for u, device in enumerate(device_ids):
            status = rule(self.accounts.state_of(device))
            summary.count(status)
            if status is ReportStatus.SENT:
                keep.append(u)
        return keep
