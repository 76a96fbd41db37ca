"""Per-device request rate: a token bucket per device id, in a table of bounded size.

Each device may make ``rate`` requests per second on average and ``burst`` at once. A
device's bucket lives in an LRU table of at most ``max_devices`` entries: a device not
seen for a while is evicted when the table is full, which is harmless (a full bucket is
what a new device gets, and an evicted device's bucket had refilled unless it was seen
within the last ``burst / rate`` seconds by at least ``max_devices`` other devices). The
table's memory is bounded whatever ids clients present; the ids it sees are
authenticated ones (token subjects). The limit is per gateway process: behind a load
balancer that spreads one device's requests over N gateways, the device gets N times it.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimiter:
    """Token buckets by device id; :meth:`take` says how long a refused device should wait."""

    def __init__(
        self,
        rate: float,
        burst: float,
        max_devices: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (rate > 0 and burst >= 1 and max_devices >= 1):
            raise ValueError("rate > 0, burst >= 1 and max_devices >= 1 are required")
        self.rate = rate
        self.burst = burst
        self.max_devices = max_devices
        self.clock = clock
        #: device -> (tokens, time of the last update), least recently seen first
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, device: str) -> float:
        """Spend one token of ``device``'s bucket: 0 when it had one, else the seconds
        until it will have one (nothing is spent)."""
        now = self.clock()
        tokens, then = self._buckets.pop(device, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        self._buckets[device] = (tokens, now)
        if len(self._buckets) > self.max_devices:
            self._buckets.popitem(last=False)
        return wait


def retry_after(wait_s: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))
