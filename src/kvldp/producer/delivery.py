"""What became of the reports a collector handed to its transport.

:class:`Deliveries` counts, in reports (not messages), what the collector handed over,
what was delivered (acknowledged by Kafka with the collector's ``acks``, or accepted by
the gateway) and what failed for good. It is updated as each message's outcome settles,
so it stays true whatever ends the work: its normal end, a cancellation, or a broker
that stops answering. ``kvldp produce`` prints its summary from it on every exit path.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial


@dataclass
class Deliveries:
    """Reports handed to the transport, and how many of them were delivered or failed."""

    #: reports in messages the transport took
    handed: int = 0
    #: reports in messages the transport delivered
    acknowledged: int = 0
    #: reports in messages the transport gave up on (refused, timed out, broker gone)
    failed: int = 0

    def track(self, outcome: asyncio.Future[object], reports: int) -> None:
        """Count a message of ``reports`` reports just handed over, settled with ``outcome``."""
        self.handed += reports
        outcome.add_done_callback(partial(self._settled, reports))

    def _settled(self, reports: int, outcome: asyncio.Future[object]) -> None:
        if outcome.cancelled() or outcome.exception() is not None:
            self.failed += reports
        else:
            self.acknowledged += reports

    @property
    def unacknowledged(self) -> int:
        """Reports handed over and not (or not yet) delivered: failed or still in flight.
        Kafka may hold some of them (a broker can store a message whose acknowledgement
        never arrived)."""
        return self.handed - self.acknowledged
