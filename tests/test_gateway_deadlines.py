"""The gateway's waits for Kafka's acknowledgements share one timer.

:class:`kvldp.gateway.forwarder.Deadlines` must fail a future still pending ``timeout``
seconds after it was added (never sooner), leave settled futures alone, keep only about
the futures in flight, and need no timer when nothing waits.
"""

from __future__ import annotations

import asyncio

import pytest

from kvldp.gateway.forwarder import Deadlines, Unavailable

pytestmark = pytest.mark.asyncio
TIMEOUT = 0.05


async def test_a_pending_future_fails_once_its_time_is_up_and_not_before() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(TIMEOUT)
    stuck: asyncio.Future[int] = loop.create_future()
    answered: asyncio.Future[int] = loop.create_future()
    added = loop.time()
    deadlines.add(stuck)
    deadlines.add(answered)
    answered.set_result(7)
    with pytest.raises(Unavailable, match=r"did not acknowledge within 0\.05 s"):
        await stuck
    assert loop.time() - added >= TIMEOUT
    assert answered.result() == 7  # settled in time: left as it was
    assert len(deadlines) == 0 and deadlines._timer is None


async def test_later_futures_get_their_own_full_time() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(TIMEOUT)
    first: asyncio.Future[int] = loop.create_future()
    deadlines.add(first)
    with pytest.raises(Unavailable):
        await first
    second: asyncio.Future[int] = loop.create_future()
    added = loop.time()
    deadlines.add(second)
    with pytest.raises(Unavailable):
        await second
    assert loop.time() - added >= TIMEOUT


async def test_settled_futures_do_not_accumulate() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(3600.0)
    for n in range(10_000):
        future: asyncio.Future[int] = loop.create_future()
        deadlines.add(future)
        future.set_result(n)
    assert len(deadlines) == 1  # the last one, until the next add
    deadlines.cancel()
    assert deadlines._timer is None and len(deadlines) == 0
