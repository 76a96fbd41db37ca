"""When the SDK sends a report to the gateway again: exponential backoff with jitter.

A gateway that answers 429 (this device sends too fast) or 503 (Kafka does not
acknowledge), a load balancer that answers 502 or 504, a refused connection or a timeout
are passing conditions: :class:`RetryPolicy` says how long to wait before the next
attempt. The wait doubles from ``initial_backoff`` up to ``max_backoff`` and is drawn
uniformly from its upper half, so that a fleet refused at once does not come back at
once. After a ``Retry-After`` the wait is that many seconds plus a draw from the lower
half of the step: never sooner than the server asked, and spread out, since a gateway
tells every device the same number. A message is given up once its next attempt would
start more than ``deadline`` seconds after its first.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
from dataclasses import dataclass

from kvldp.common.errors import KvldpError


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between attempts at one message, and the time after which it is given up
    (seconds)."""

    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    deadline: float = 120.0

    def __post_init__(self) -> None:
        for name in ("initial_backoff", "max_backoff", "deadline"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise KvldpError(f"RetryPolicy.{name} must be a positive number of seconds, got {value!r}")
        if self.initial_backoff > self.max_backoff:
            raise KvldpError(
                f"RetryPolicy.initial_backoff ({self.initial_backoff:g} s) exceeds max_backoff "
                f"({self.max_backoff:g} s)"
            )

    def delay(self, retry: int, retry_after: float | None, jitter: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first), at least the
        server's ``retry_after``."""
        ceiling = min(self.max_backoff, self.initial_backoff * 2.0 ** min(retry - 1, 64))
        if retry_after is None:
            return jitter.uniform(ceiling / 2, ceiling)
        return retry_after + jitter.uniform(0.0, ceiling / 2)


def parse_retry_after(value: str | None, now: datetime.datetime | None = None) -> float | None:
    """The seconds a ``Retry-After`` header asks for: a non-negative integer, or an HTTP
    date (RFC 9110); None when absent or unreadable (the backoff alone then decides)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    current = now or datetime.datetime.now(datetime.UTC)
    return max(0.0, (when - current).total_seconds())
