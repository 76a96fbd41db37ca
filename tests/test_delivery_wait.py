"""A collector's wait for acknowledgements says what it waits for once it lasts."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kvldp.producer import delivery
from kvldp.producer.delivery import InFlight


@pytest.mark.asyncio
async def test_a_slow_wait_for_acknowledgements_says_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(delivery, "SLOW_SETTLE_S", 0.05)
    loop = asyncio.get_running_loop()
    quick, slow = InFlight("c"), InFlight("c")
    for flight, after in ((quick, 0.0), (slow, 0.3)):
        outcome: asyncio.Future[object] = loop.create_future()
        loop.call_later(after, outcome.set_result, None)
        flight.add(outcome, 3)
    with caplog.at_level(logging.WARNING, logger="kvldp.producer"):
        await quick.settle()
        assert caplog.messages == []
        await slow.settle()
    assert caplog.messages == [
        "collection c: still waiting after 0.05 s for 1 message(s) to be acknowledged "
        "(each gives up at its delivery timeout)"
    ]
    assert slow.deliveries.acknowledged == 3
