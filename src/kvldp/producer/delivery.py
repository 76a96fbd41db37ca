"""What became of the reports a collector handed to its transport.

:class:`Deliveries` counts, in reports (not messages), what the collector handed over,
what was delivered (acknowledged by Kafka with the collector's ``acks``, or accepted by
the gateway) and what failed for good. It is updated as each message's outcome settles,
so it stays true whatever ends the work: its normal end, a cancellation, or a broker
that stops answering. ``kvldp produce`` prints its summary from it on every exit path.

:class:`InFlight` keeps the outcomes not yet waited for: a collector's ``flush`` waits
for them all, raises the first failure once every other message settled, and logs the
other distinct failures (logger ``kvldp.producer``), so that a refusal every message met
is one line; a wait that lasts longer than :data:`SLOW_SETTLE_S` says what it waits for.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from functools import partial

logger = logging.getLogger("kvldp.producer")
#: seconds a wait for acknowledgements takes before it says what it waits for
SLOW_SETTLE_S = 5.0


@dataclass
class Deliveries:
    """Reports handed to the transport, and how many of them were delivered or failed."""

    #: reports in messages the transport took
    handed: int = 0
    #: reports in messages the transport delivered
    acknowledged: int = 0
    #: reports in messages the transport gave up on without knowing whether they were
    #: stored (timed out, broker gone)
    failed: int = 0
    #: reports in messages known not to be stored: refused by the gateway, or stopped
    #: before it (an untrusted certificate)
    refused: int = 0

    def track(self, outcome: asyncio.Future[object], reports: int) -> None:
        """Count a message of ``reports`` reports just handed over, settled with ``outcome``."""
        self.handed += reports
        outcome.add_done_callback(partial(self._settled, reports))

    def _settled(self, reports: int, outcome: asyncio.Future[object]) -> None:
        if outcome.cancelled():
            self.failed += reports
        elif (error := outcome.exception()) is not None:
            if getattr(error, "not_stored", False):
                self.refused += reports
            else:
                self.failed += reports
        else:
            self.acknowledged += reports

    @property
    def unacknowledged(self) -> int:
        """Reports handed over and not (or not yet) delivered, and not known to be refused:
        failed or still in flight. Kafka may hold some of them (a broker can store a message
        whose acknowledgement never arrived)."""
        return self.handed - self.acknowledged - self.refused


class InFlight:
    """The outcomes of the messages of one collection handed over and not yet waited for,
    each counted in :attr:`deliveries` as it settles."""

    def __init__(self, collection: str) -> None:
        #: the collection's name, in the warnings of :meth:`settle`
        self.collection = collection
        self.deliveries = Deliveries()
        self._pending: list[asyncio.Future[object]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, outcome: asyncio.Future[object], reports: int) -> None:
        """A message of ``reports`` reports just handed over, settled with ``outcome``."""
        self.deliveries.track(outcome, reports)
        self._pending.append(outcome)

    async def settle(self) -> None:
        """Wait until every message added so far has settled; raise the first failure once
        all have (the others, where their error differs from it, are logged as warnings,
        one per distinct error). Cancelling it leaves its messages to the next call."""
        pending = list(self._pending)
        if not pending:
            return
        # a wait cancelled part way (its caller was) leaves the messages to the next one
        _, waiting = await asyncio.wait(pending, timeout=SLOW_SETTLE_S)
        if waiting:  # a slow cluster or gateway: say what this waits for
            logger.warning(
                "collection %s: still waiting after %g s for %d message(s) to be acknowledged "
                "(each gives up at its delivery timeout)",
                self.collection,
                SLOW_SETTLE_S,
                len(waiting),
            )
            await asyncio.wait(waiting)
        settled = set(pending)
        self._pending = [outcome for outcome in self._pending if outcome not in settled]
        failures = [
            error
            for outcome in pending
            if (error := asyncio.CancelledError() if outcome.cancelled() else outcome.exception()) is not None
        ]
        raised = str(failures[0]) if failures else ""
        for message, times in Counter(str(other) for other in failures[1:] if str(other) != raised).items():
            more = f" ({times} messages)" if times > 1 else ""
            logger.warning("collection %s: %s%s", self.collection, message, more)
        if failures:
            raise failures[0]
