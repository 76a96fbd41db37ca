"""A simulated fleet that follows an interactive collection's rounds to the end.

PrivKVM's rounds advance when the aggregator closes them, so a fleet cannot report
"period after period" on its own clock: :class:`RoundFleet` waits for each round the
control topic opens, lets every device that has joined by then report once in it, and
stops when the control record says the rounds are complete. A device's ``join_round``
(0 for everyone by default) is the first round it takes part in: late joiners report
only in the rounds that remain.

With every device joining at round 0 and the collector's generator seeded, the reports
of round r are exactly those of ``mechanism.collect`` with the same generator, as long
as the aggregator closes each round on all of them (``round_min_reports`` = the fleet).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.messages.control_record import Control
from kvldp.common.primitives import IntArray
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import FleetSummary


@dataclass(frozen=True)
class RoundReport:
    """What the fleet did in one round: its index (0-based), the outcome counts, when the
    fleet saw the round open (``time.monotonic()``) and the seconds from then to the last
    acknowledgement of its reports."""

    round: int
    summary: FleetSummary
    opened: float
    seconds: float

    def __str__(self) -> str:
        s = self.summary
        return (
            f"round {self.round + 1}: sent {s.sent}, skipped (already in this round) {s.skipped_round}, "
            f"exhausted {s.exhausted} in {self.seconds:.1f} s"
        )


def _after(done: int, control: Control) -> bool:
    return control.complete or control.round > done


class RoundFleet:
    """Devices with fixed pairs reporting once in every round they have joined."""

    def __init__(
        self, users: KVData, device_ids: Sequence[str | bytes | int], join_round: IntArray | None = None
    ) -> None:
        if len(device_ids) != users.n_users:
            raise ValueError("one device id per device is required")
        self.users = users
        self.device_ids = list(device_ids)
        self.join_round = np.zeros(users.n_users, dtype=np.int64) if join_round is None else join_round

    async def run(
        self,
        sdk: Collector,
        on_round: Callable[[RoundReport], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
        also: Callable[[Control], Awaitable[None]] | None = None,
    ) -> list[RoundReport]:
        """Report in every round until the rounds are complete; one report per round.
        ``also`` runs in each round after the fleet's reports are sent (other devices of
        the round, e.g. the fake ones of ``kvldp produce --fake-fraction``)."""
        if sdk.control is None:
            raise ValueError(f"collection {sdk.collection.name} is not interactive")
        reports: list[RoundReport] = []
        done = -1
        while True:
            control = await sdk.control.wait(functools.partial(_after, done))
            if control.complete:
                return reports
            started = time.monotonic()
            members = np.flatnonzero(self.join_round <= control.round)
            users = self.users if members.size == self.users.n_users else self.users.take(members)
            summary = await sdk.publish_round(users, [self.device_ids[i] for i in members], control)
            if also is not None:
                await also(control)
            await sdk.flush()
            done = control.round
            report = RoundReport(control.round, summary, started, time.monotonic() - started)
            reports.append(report)
            if on_progress is not None:
                on_progress(members.size)
            if on_round is not None:
                on_round(report)
