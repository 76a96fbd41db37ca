"""Closing a service's Kafka clients within a bounded time, whether or not Kafka answers.

aiokafka's ``stop()`` flushes a producer's queue and leaves a consumer group by asking
the cluster; with the cluster gone it waits for its request timeouts, and a consumer's
``stop()`` can re-raise the cancellation of its own fetch task. :func:`close_within`
closes the clients in order against one shared deadline (a service's grace period,
:data:`STOP_GRACE_S` from the stop signal), giving a client that comes after the deadline
:data:`LAST_CHANCE_S` (it closes at once when it has nothing to wait for), takes aiokafka's
leaked cancellation for the end of the client that it is, and returns what could not be
closed cleanly, for one log line.

aiokafka closes a client's connections at the very end of its ``stop()``: one cut off
before then (a consumer still waiting for its group to form, a cluster that does not
answer) would leave them open for the rest of the process. The connections of an
aiokafka consumer or producer cut off so are closed without asking the cluster anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

from aiokafka.client import AIOKafkaClient

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
            await _close_connections(client)
    return unclean


async def _close_connections(client: object) -> None:
    """Close the connections of an aiokafka consumer (``_client``: aiokafka offers no public
    name for it) or producer (``client``) whose ``stop()`` was cut off."""
    inner = getattr(client, "_client", None) or getattr(client, "client", None)
    if isinstance(inner, AIOKafkaClient):
        with contextlib.suppress(Exception):
            async with asyncio.timeout(LAST_CHANCE_S):
                await inner.close()
