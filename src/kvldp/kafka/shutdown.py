"""Closing a service's Kafka clients within a bounded time, whether or not Kafka answers.

aiokafka's ``stop()`` flushes a producer's queue and leaves a consumer group by asking
the cluster; with the cluster gone it waits for its request timeouts, and a consumer's
``stop()`` can re-raise the cancellation of its own fetch task. :func:`close_within`
closes the clients in order against one shared deadline (a service's grace period,
:data:`STOP_GRACE_S` from the stop signal), giving a client that comes after the deadline
:data:`LAST_CHANCE_S` (it closes at once when it has nothing to wait for), takes aiokafka's
leaked cancellation for the end of the client that it is, and returns what could not be
closed cleanly, for one log line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

#: seconds a service's Kafka work may take once it is asked to stop (final snapshots,
#: leaving the group, flushing producers); a local checkpoint is written whatever they take
STOP_GRACE_S = 5.0
#: seconds a client still gets once the deadline has passed
LAST_CHANCE_S = 0.25


async def close_within(clients: Iterable[object | None], deadline: float) -> list[str]:
    """Stop or close each client (``None`` skipped) before the event loop's time
    ``deadline``; the names of those that failed or were cut off."""
    unclean = []
    loop = asyncio.get_running_loop()
    for client in clients:
        if client is None:
            continue
        closer: Any = getattr(client, "stop", None) or client.close  # type: ignore[attr-defined]
        try:
            async with asyncio.timeout_at(max(deadline, loop.time() + LAST_CHANCE_S)):
                await closer()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # aiokafka re-raised the cancellation of one of its own tasks: it has stopped
        except Exception:  # a client that cannot close cleanly is reported, not raised
            unclean.append(type(client).__name__)
    return unclean
