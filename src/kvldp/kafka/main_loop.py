"""The asyncio main of a command that talks to Kafka: stopped by Ctrl-C or SIGTERM, its
Kafka and socket failures said in one line.

:func:`run_async` runs a coroutine whose stop event (:class:`Stop`, which remembers the
signal) Ctrl-C and SIGTERM set, and turns
what a user can fix (no broker at the address, a refused TLS handshake, a port in use,
a request the cluster's ACLs refuse) into a :class:`~kvldp.common.errors.KvldpError`
naming the cluster; :func:`until_stopped`
runs one piece of work unless the stop event comes first. The command line and the demo
run all their Kafka work through them.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import ssl
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    TopicAuthorizationFailedError,
)

from kvldp.common.errors import KvldpError
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.client_start import unreachable_message

T = TypeVar("T")

#: the refusals of a cluster's authorizer, by what they name
REFUSED: dict[type[KafkaError], str] = {
    TopicAuthorizationFailedError: "topic",
    GroupAuthorizationFailedError: "consumer group",
    ClusterAuthorizationFailedError: "cluster",
}


def refused_message(where: str, exc: KafkaError) -> str:
    """One line for a request the cluster's ACLs refused, naming the topic or group."""
    what = next(name for kind, name in REFUSED.items() if isinstance(exc, kind))
    named = ", ".join(str(arg) for arg in exc.args if arg)
    return (
        f"Kafka at {where} refused: not authorized for {what}{' ' + named if named else ''} "
        "(the cluster's ACLs give this principal no such right)"
    )


class Stop(asyncio.Event):
    """The stop event of :func:`run_async`, remembering the signal that set it."""

    def __init__(self) -> None:
        super().__init__()
        #: SIGINT or SIGTERM once one of them asked to stop
        self.signal: signal.Signals | None = None

    def by(self, sig: signal.Signals) -> None:
        """Stop because of ``sig`` (the first signal is the one remembered)."""
        self.signal = self.signal or sig
        self.set()


def run_async(make: Callable[[Stop], Awaitable[T]], kafka: KafkaConfig | str | None = None) -> T:
    """Run a coroutine with Ctrl-C/SIGTERM setting its stop event; map Kafka and socket
    failures to one-line errors."""

    async def main() -> T:
        stop = Stop()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.by, sig)
        try:
            return await make(stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    where = kafka.describe() if isinstance(kafka, KafkaConfig) else kafka
    try:
        return asyncio.run(main())
    except KafkaConnectionError as exc:
        raise KvldpError(unreachable_message(str(where), exc)) from None
    except tuple(REFUSED) as exc:
        raise KvldpError(refused_message(str(where), exc)) from None
    except KafkaError as exc:
        raise KvldpError(f"Kafka error at {where}: {exc}") from None
    except ssl.SSLError as exc:
        raise KvldpError(f"TLS error with Kafka at {where}: {exc.reason or exc}") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise KvldpError(f"address already in use: {exc.strerror}") from None
        raise


async def until_stopped(stop: asyncio.Event, work: Awaitable[object]) -> None:
    """Run ``work`` unless Ctrl-C comes first (then cancel it)."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
