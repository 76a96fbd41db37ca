"""The privacy accounts of the devices one collector reports for.

A collector reports under its own device id, whose state (:class:`DeviceState`) lives in
a ``state_path`` file or in memory, and, for a gateway or a simulator, under the device
ids its caller gives, whose states live in a :class:`Fleet` (in memory, or one file each
under ``state_dir``). :class:`DeviceAccounts` says which state a device id spends from,
what each has spent and has left, and warns (logger ``kvldp.producer``) the first time a
state kept in memory only is used where a restart would matter: this device's spending
under a ``[privacy]`` table (a restart forgets it), or the report counts of the other
devices where the aggregator limits reports per device (what is sent again for them
after a restart may be refused as ``budget_exceeded``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

from kvldp.common.config.collection import Collection
from kvldp.common.spec.privacy import format_duration
from kvldp.producer.device_state import DeviceState, Fleet, tracks_privacy
from kvldp.producer.pairs import device_key

logger = logging.getLogger("kvldp.producer")


class DeviceAccounts:
    """This device's privacy state and the states of the other device ids a collector
    reports for, with the warnings when they are kept in memory only (``warn_unsaved``)."""

    def __init__(
        self,
        collection: Collection,
        device_id: str | None,
        state_path: str | Path | None,
        state_dir: str | Path | None,
        lock_timeout: float,
        warn_unsaved: bool,
    ) -> None:
        self.collection = collection
        #: this device's state: ``device_id``, else the id stored in ``state_path``, else random
        self.own = (
            DeviceState.new(collection, device_id)
            if state_path is None
            else DeviceState.open(state_path, collection, device_id, lock_timeout)
        )
        self._own_key = device_key(self.own.device_id)
        #: the states of the other device ids
        self.fleet = Fleet(collection, state_dir, lock_timeout)
        self._warn_unsaved = warn_unsaved and tracks_privacy(collection) and state_path is None
        #: warn once that other devices' states live in memory (when the aggregator limits devices)
        self._warn_fleet = (
            warn_unsaved and collection.aggregate.max_reports_per_device > 0 and state_dir is None
        )

    def state_of(self, device_id: str | bytes | int) -> DeviceState:
        """The state ``device_id`` spends from (opened or created on first use)."""
        key = device_key(device_id)
        if key != self._own_key:
            if self._warn_fleet:
                self._warn_fleet = False
                logger.warning(
                    "collection %s: the devices this process reports for keep their report counts in "
                    "memory, for this collector's life only; %s",
                    self.collection.name,
                    self._refusal_after_restart(),
                )
            return self.fleet.state(key)
        if self._warn_unsaved:
            self._warn_unsaved = False
            limited = self.collection.aggregate.max_reports_per_device > 0
            refusal = self._refusal_after_restart() if limited else "a restart forgets it"
            logger.warning(
                "collection %s: no state_path, so device %s keeps its privacy spending in memory only; %s",
                self.collection.name,
                self.own.device_id,
                refusal,
            )
        return self.own

    def _refusal_after_restart(self) -> str:
        """What the aggregator does with reports sent again after a restart forgot them."""
        aggregate, period = self.collection.aggregate, self.collection.privacy.report_period_s
        rule = (
            f"one report per device per report_period ({format_duration(period)})"
            if period is not None
            else f"{aggregate.max_reports_per_device} report(s) per device per budget_window "
            f"({format_duration(aggregate.budget_window_s)})"
        )
        return (
            f"the aggregator takes {rule}, so what is sent again for the same devices within that "
            "time, by another process or after a restart, is refused as budget_exceeded and never folded"
        )

    def _known(self, device_id: str | bytes | int | None) -> DeviceState | None:
        """The state of ``device_id`` (default this device's), read again from its file, if
        there is one."""
        if device_id is None or device_key(device_id) == self._own_key:
            self.own.refresh()
            return self.own
        return self.fleet.known(device_key(device_id))

    def spent(self, device_id: str | bytes | int | None = None) -> float:
        """Epsilon ``device_id`` (default this device) spent on the collection."""
        state = self._known(device_id)
        return 0.0 if state is None else state.spent(self.collection)

    def remaining(self, device_id: str | bytes | int | None = None) -> float:
        """Epsilon ``device_id`` (default this device) has left under ``lifetime_epsilon``
        (``math.inf`` without one)."""
        state = self._known(device_id)
        if state is None:
            cap = self.collection.privacy.lifetime_epsilon
            return math.inf if cap is None else cap
        return state.remaining(self.collection)

    def charge_own(self, device_ids: Sequence[str | bytes | int]) -> None:
        """Without a ``[privacy]`` table nothing is enforced, but this device's reports still
        cost epsilon each: count the ones among ``device_ids`` (before sending) so that
        what it spent is true."""
        mine = sum(1 for device in device_ids if device_key(device) == self._own_key)
        if mine:
            self.own.charge(mine)
