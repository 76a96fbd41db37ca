"""How ``kvldp produce`` ends: what Kafka (or the gateway) acknowledged, said truthfully
on every exit path.

:class:`Publishing` runs the command's publishing coroutine through
:func:`~kvldp.kafka.main_loop.run_async` and reads the outcome from the
:attr:`~kvldp.producer.collector.Collector.deliveries` of the collector it follows:

- at the normal end the collector's stop waited for every message, so every report
  handed over was acknowledged; the command prints its summary from :attr:`acknowledged`;
- Ctrl-C or SIGTERM stops the work; the collector still waits (up to its request
  timeout) for the messages in flight, then :meth:`Publishing.interrupted` prints
  ``interrupted: N reports acknowledged by Kafka, M sent but not acknowledged, K not sent``
  and gives the exit status 128 + the signal's number (130, 143);
- a transport that fails (a broker gone or not answering within the request timeout, a
  gateway refusing) ends the command with one error line carrying the same counts.

N is exact: those reports are stored by Kafka with the collector's acknowledgements
(every in-sync replica). Through the gateway, the reports it refused (or that TLS stopped
before any request went out) are counted apart as refused: not stored. M reports were handed to Kafka without an acknowledgement: Kafka
may hold some of them (a broker can store a message and fail to answer), so the topic
holds between N and N + M of the command's reports. K of the reports the command meant
to send were never handed over.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from kvldp.common.errors import KvldpError
from kvldp.kafka.main_loop import Stop, run_async
from kvldp.producer.delivery import Deliveries
from kvldp.producer.device_state import FleetSummary

if TYPE_CHECKING:
    from kvldp.kafka.client_config import KafkaConfig
    from kvldp.producer.collector import Collector

T = TypeVar("T")


class Publishing:
    """One publishing run of ``kvldp produce``: to ``who`` (Kafka or the gateway),
    ``planned`` reports when known in advance."""

    def __init__(self, who: str, planned: int | None = None) -> None:
        self.who = who
        self.planned = planned
        self.deliveries = Deliveries()
        #: the device-side outcomes of the reports (sent, or held back by a rule)
        self.outcomes = FleetSummary()
        self._stop: Stop | None = None

    def follow(self, collector: Collector) -> Collector:
        """Count what ``collector`` delivers (returns it, for ``async with``)."""
        self.deliveries = collector.deliveries
        self.outcomes = collector.outcomes
        return collector

    @property
    def acknowledged(self) -> int:
        return self.deliveries.acknowledged

    def run(self, make: Callable[[Stop], Awaitable[T]], where: KafkaConfig | str) -> T:
        """``run_async(make, where)``; a failure after reports were handed over says what
        became of them."""

        async def main(stop: Stop) -> T:
            self._stop = stop
            return await make(stop)

        try:
            return run_async(main, where)
        except KvldpError as exc:
            if not self.deliveries.handed:
                raise
            raise KvldpError(f"{str(exc).rstrip('.')}; {self.counts()}") from None

    def counts(self) -> str:
        """What was acknowledged, sent and not acknowledged, not sent."""
        d = self.deliveries
        rest = "the rest" if self.planned is None else str(max(self.planned - d.handed, 0))
        refused = f", {d.refused} refused by it (not stored)" if d.refused else ""
        return (
            f"{reports(d.acknowledged)} acknowledged by {self.who}{refused}, {d.unacknowledged} sent "
            f"but not acknowledged, {rest} not sent"
        )

    def finish(self, destination: Callable[[], str]) -> int:
        """The command's last line and exit status: the counts when Ctrl-C or SIGTERM
        stopped the run (:meth:`interrupted`), else ``published N reports to`` and
        ``destination()`` (the topic or gateway, and what else the command reports), 0."""
        stopped = self.interrupted()
        if stopped is not None:
            return stopped
        print(f"published {reports(self.acknowledged)} to {destination()}", file=sys.stderr)
        return 0

    def interrupted(self) -> int | None:
        """When Ctrl-C or SIGTERM stopped the run: print the counts and return the exit
        status (128 + the signal's number); None when the run ended by itself."""
        sig = None if self._stop is None else self._stop.signal
        if sig is None:
            return None
        print(f"interrupted: {self.counts()}", file=sys.stderr)
        return 128 + int(sig)


def reports(count: int) -> str:
    """``1 report``, ``2 reports``."""
    return f"{count} report" if count == 1 else f"{count} reports"
