"""Processes racing on one device state file (tests/test_state_races.py).

:class:`Racers` starts worker processes once (the ``forkserver`` context: the server
imports kvldp once and forks each worker from it) and runs many short races on them:
every race is on a fresh file, the workers taking part are handed it, and all of them
wait at one barrier so that they start the race at the same moment. What each process
does in a race is one of :data:`RACES`; it answers with what it saw (statuses, payloads,
the secret), which the test checks against the file.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path
from types import TracebackType
from typing import Any

import msgpack
import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import DeviceState

NOW = 1_800_000_000.0  # a period boundary of "1h"
HOUR = 3600.0
#: the [privacy] table of each kind of race
PRIVACY: dict[str, dict[str, Any]] = {
    "open": {"memoize": True},
    "period": {"report_period": "1h"},
    "cap": {"lifetime_epsilon": 4.5},  # 1.5 a report: three in a lifetime
    "memoized": {"memoize": True},
}
#: seconds a worker waits for the others at the barrier, and the test for an answer
DEADLINE_S = 60.0


def collection(kind: str) -> Collection:
    return parse_collection(
        {
            "name": f"race-{kind}",
            "mechanism": "pckv_grr",
            "epsilon": 1.5,
            "keys": ["a", "b", "c", "d"],
            "value_range": [0.0, 10.0],
            "privacy": PRIVACY[kind],
        }
    )


class KeptSends:
    """Stands in for AIOKafkaProducer: keeps the values sent."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, topic: str, value: bytes, key: bytes, timestamp_ms: int) -> asyncio.Future[None]:
        self.sent.append(value)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def first_open(path: Path, c: Collection) -> tuple[bytes, str]:
    """Open the state (the file may not exist yet): its secret and device id."""
    state = DeviceState.open(path, c)
    return state.secret, state.device_id


def period_reports(path: Path, c: Collection) -> list[tuple[int, str]]:
    """A collector reports in the period at NOW, then in the next one: (period, status) of each."""
    clock = [NOW]
    collector = Collector(
        c,
        "unused:9092",
        producer=KeptSends(),  # type: ignore[arg-type]
        state_path=path,
        clock=lambda: clock[0],
        warn_unsaved=False,
    )
    seen = []
    for period in (0, 1):
        clock[0] = NOW + period * HOUR
        seen.append((period, asyncio.run(collector.report({"a": 2.0})).value))
    return seen


def capped_reports(path: Path, c: Collection) -> list[str]:
    """Three reports perturbed afresh: the status of each."""
    state = DeviceState.open(path, c)
    return [state.fresh(c, None).value for _ in range(3)]


def memoized_reports(path: Path, c: Collection) -> list[tuple[str, bytes | None]]:
    """The same pairs reported twice: (status, payload as msgpack bytes) of each."""
    state = DeviceState.open(path, c)
    keys, values = np.array([0, 2]), np.array([0.3, -0.5])
    seen = []
    for _ in range(2):
        status, report = state.memoized(c, keys, values, None)
        seen.append(
            (status.value, None if report is None else bytes(msgpack.packb(report, use_bin_type=True)))
        )
    return seen


#: what one process does in a race of each kind
RACES: dict[str, Callable[[Path, Collection], Any]] = {
    "open": first_open,
    "period": period_reports,
    "cap": capped_reports,
    "memoized": memoized_reports,
}


def work(tasks: Connection, start: Barrier) -> None:
    """A worker: for each task (kind, path, whether to take part), wait at the barrier with
    the others, run the race if taking part and answer (True, result) or (False, traceback);
    until told to stop (None) or the test is gone."""
    collections = {kind: collection(kind) for kind in RACES}
    while True:
        try:
            task = tasks.recv()
        except EOFError:  # the test is gone
            return
        if task is None:
            return
        kind, path, takes_part = task
        start.wait(DEADLINE_S)
        if not takes_part:
            continue
        try:
            tasks.send((True, RACES[kind](Path(path), collections[kind])))
        except Exception:
            tasks.send((False, traceback.format_exc()))


class Racers:
    """``n`` worker processes ready to race (a context manager: they stop at its end)."""

    def __init__(self, n: int) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        # kept for the workers' life: the barrier's semaphores go with the last reference
        self._start = start = context.Barrier(n)
        self._pipes: list[Connection] = []
        self._processes = []
        for _ in range(n):
            mine, theirs = context.Pipe()
            process = context.Process(target=work, args=(theirs, start), daemon=True)
            process.start()
            theirs.close()
            self._pipes.append(mine)
            self._processes.append(process)

    def race(self, kind: str, path: Path, racers: list[int]) -> list[Any]:
        """What each of the workers ``racers`` saw in one race of ``kind`` on ``path``, all of
        them released at once (the others pass the barrier and wait for the next race)."""
        for i, pipe in enumerate(self._pipes):
            pipe.send((kind, str(path), i in racers))
        results = []
        for i in racers:
            if not self._pipes[i].poll(DEADLINE_S):
                raise TimeoutError(f"worker {i} did not answer a {kind} race on {path}")
            ok, result = self._pipes[i].recv()
            if not ok:
                raise AssertionError(f"worker {i} failed a {kind} race on {path}:\n{result}")
            results.append(result)
        return results

    def __enter__(self) -> Racers:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for pipe, process in zip(self._pipes, self._processes, strict=True):
            if exc is None:
                pipe.send(None)  # a worker left waiting at the barrier by a failed race is killed
                process.join(DEADLINE_S)
            pipe.close()
            if process.is_alive():
                process.kill()
            process.join()
