"""A simulated fleet reporting once per period, to see what devices spend over time.

One report per device says nothing about a lifetime budget; a fleet that reports period
after period does. :class:`FleetSimulation` draws a population from a dataset, lets every
device report at period 0, and before each later period lets a fraction ``churn`` of the
devices redraw their pairs (their rows of a fresh draw of the dataset, with a seed of its
own per period). Each device keeps its own secret and state across periods in the
collector's fleet, so memoized devices whose state did not change re-send for free.

Period ``p`` of ``P`` reports at ``t - (P - 1 - p) * period_s``, ``t`` the clock time at
construction (or the time given), through a simulated clock the collector must be built
with; ``period_s`` is the collection's ``report_period``, or an hour without one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.errors import KvldpError
from kvldp.common.primitives import FloatArray
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import FleetSummary
from kvldp.sim.simulate import device_ids, simulate

#: the period of a collection without ``report_period``
DEFAULT_PERIOD_S = 3600


class InvalidSimulation(KvldpError):
    """Fleet simulation settings out of range."""


def redraw(current: KVData, fresh: KVData, churned: np.ndarray) -> KVData:
    """``current`` with the rows where ``churned`` is set taken from ``fresh`` instead."""
    n = current.n_users
    both = KVData(
        current.d,
        np.concatenate([current.indptr, fresh.indptr[1:] + current.indptr[-1]]),
        np.concatenate([current.keys, fresh.keys]),
        np.concatenate([current.values, fresh.values]),
    )
    return both.take(np.where(churned, np.arange(n) + n, np.arange(n)))


class SimulatedClock:
    """A clock that reads what the simulation set (seconds since the epoch)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class PeriodReport:
    """What happened in one period: its report time, how many devices redrew their pairs,
    and the outcome counts."""

    period: int
    time_s: float
    redrawn: int
    summary: FleetSummary

    def __str__(self) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.time_s))
        return f"period {self.period} at {stamp}: {self.redrawn} devices redrew their pairs; {self.summary}"


class FleetSimulation:
    """``users`` devices of ``dataset`` reporting over ``periods`` periods (see the module)."""

    def __init__(
        self,
        collection: Collection,
        dataset: str,
        users: int,
        periods: int,
        churn: float = 0.1,
        seed: int = 0,
        now: float | None = None,
    ) -> None:
        if periods < 1:
            raise InvalidSimulation(f"periods must be at least 1, got {periods}")
        if not 0.0 <= churn <= 1.0:
            raise InvalidSimulation(f"churn must be a fraction in [0, 1], got {churn}")
        self.collection = collection
        self.dataset = dataset
        self.users = users
        self.churn = churn
        self.seed = seed
        self.period_s = collection.privacy.report_period_s or DEFAULT_PERIOD_S
        start = time.time() if now is None else now
        #: report time of each period
        self.times = [start - (periods - 1 - p) * self.period_s for p in range(periods)]
        #: the clock to build the collector with
        self.clock = SimulatedClock(self.times[0])
        self.device_ids = device_ids(users)
        #: the population of the last period simulated
        self.population = self._draw(0)

    def _draw(self, period: int) -> KVData:
        try:
            return simulate(self.collection, self.dataset, self.users, self.seed + period)
        except ValueError as exc:
            raise InvalidSimulation(str(exc)) from None

    async def run(
        self,
        sdk: Collector,
        batch_size: int = 1,
        rate: float | None = None,
        on_progress: Callable[[int], None] | None = None,
        on_period: Callable[[PeriodReport], None] | None = None,
    ) -> list[PeriodReport]:
        """Report every period through ``sdk`` (built with ``clock=self.clock``)."""
        if sdk.clock is not self.clock:
            raise InvalidSimulation("build the Collector with clock=simulation.clock")
        choose = np.random.default_rng([self.seed, 1])
        reports = []
        for period, when in enumerate(self.times):
            redrawn = 0
            if period:
                churned = np.zeros(self.users, dtype=bool)
                redrawn = round(self.churn * self.users)
                churned[choose.choice(self.users, size=redrawn, replace=False)] = True
                self.population = redraw(self.population, self._draw(period), churned)
            self.clock.now = when
            summary = await sdk.publish_users(
                self.population, self.device_ids, batch_size=batch_size, rate=rate, on_progress=on_progress
            )
            report = PeriodReport(period, when, redrawn, summary)
            reports.append(report)
            if on_period is not None:
                on_period(report)
        return reports

    def spent(self, sdk: Collector) -> FloatArray:
        """Epsilon spent by each simulated device."""
        return np.array([sdk.privacy_spent(device) for device in self.device_ids])
