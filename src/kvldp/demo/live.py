"""What both demos run on: the cluster, the aggregator and the live table.

:func:`demo_broker` yields the cluster (named on the command line, else an embedded
broker), :func:`start_aggregator` and :func:`stop_aggregator` bracket the aggregator, and
:func:`watch` redraws a demo's table until every report is accounted for. The periods
demo (:mod:`kvldp.demo.periodic`) and the rounds demo (:mod:`kvldp.demo.interactive`) differ
in their fleet and their table only; :func:`spent_line` is the last line of both tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from kvldp.aggregator.service import Aggregator
from kvldp.broker.child_process import port_in_use
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.kafka.client_config import KafkaConfig
from kvldp.producer.collector import Collector


def spent_line(device: np.ndarray, server: np.ndarray, collection: Collection) -> str:
    """Median and maximum epsilon spent per device, by the devices' and the server's count.
    With ``instantaneous_epsilon`` the server's figure is only an upper bound (reports x the
    per-send bound, :mod:`kvldp.aggregator.devices`), and says so."""
    if not device.size:
        return "epsilon spent per device: -"
    text = f"epsilon spent per device: median {np.median(device):g}, max {device.max():g}"
    if server.size:
        if collection.instantaneous_randomizer is None:
            figure = "server's count"
        else:
            figure = "server's upper bound (instantaneous randomization)"
        text += f"   ({figure}: median {np.median(server):g}, max {server.max():g})"
    return text


@contextlib.contextmanager
def demo_broker(external: KafkaConfig | None, metrics_port: int) -> Iterator[KafkaConfig]:
    """The cluster the demo runs on: the one the command line names, else an embedded
    broker for the demo's lifetime. Entered once the demo's flags are checked: it first
    refuses a ``metrics_port`` that is taken (0: any free one), before anything starts."""
    if metrics_port and port_in_use(metrics_port):
        raise KvldpError(f"metrics port {metrics_port} on 127.0.0.1 is in use (pass --metrics-port)")
    if external is not None:
        print(f"broker: {external.describe()} (external)")
        yield external
        return
    with EmbeddedBroker(0) as broker:
        print(f"broker: {broker.bootstrap_servers} (embedded, in memory)")
        yield KafkaConfig.plaintext(broker.bootstrap_servers)


async def start_aggregator(
    collection: Collection, kafka: KafkaConfig, metrics_port: int
) -> tuple[Aggregator, asyncio.Event, asyncio.Task[None]]:
    """The aggregator running (its metrics address printed), its stop event and its task."""
    aggregator = Aggregator(collection, kafka, metrics_port=metrics_port, log=lambda _: None)
    agg_stop = asyncio.Event()
    agg_task = asyncio.create_task(aggregator.run(agg_stop))
    while aggregator.bound_port is None and not agg_task.done():
        await asyncio.sleep(0.05)
    if agg_task.done():
        await agg_task  # raises the start-up error
    print(f"metrics: http://127.0.0.1:{aggregator.bound_port}/metrics   estimates: /estimates")
    return aggregator, agg_stop, agg_task


async def stop_aggregator(
    agg_stop: asyncio.Event, agg_task: asyncio.Task[None], failure: BaseException | None
) -> None:
    """Stop the aggregator (it leaves its final state), then raise what stopped the demo."""
    agg_stop.set()
    await agg_task
    if failure is not None:
        raise failure


async def watch(
    stop: asyncio.Event,
    publish: asyncio.Task[Any],
    aggregator: Aggregator,
    agg_task: asyncio.Task[None],
    sdk: Collector,
    accounted: Callable[[], int],
    table: Callable[[], str],
    live: bool,
) -> BaseException | None:
    """Redraw ``table`` every half second (on a terminal) until the fleet is done, the
    aggregator has ``accounted`` for every report sent and a refit came after that, or
    Ctrl-C; then print the table once if it was not drawn live. Returns the fleet's failure,
    if any."""
    drawn = 0
    all_folded_at: float | None = None
    while not stop.is_set():
        await asyncio.sleep(0.5)
        if live:
            text = table()  # each line is cleared to its end: lines shrink and move
            sys.stdout.write(("\x1b[F" * drawn) + text.replace("\n", "\x1b[K\n") + "\x1b[K\n")
            sys.stdout.flush()
            drawn = text.count("\n") + 1
        if publish.done():
            if publish.exception() is not None:
                break
            if all_folded_at is None and accounted() >= sdk.sent_reports:
                all_folded_at = time.time()
            snap = aggregator.exporter.snapshot
            if all_folded_at is not None and snap is not None and snap.created > all_folded_at:
                break  # the estimates include every report
        if agg_task.done():
            break
    publish.cancel()
    outcome: Any = (await asyncio.gather(publish, return_exceptions=True))[0]
    if not live:
        print(table())
    failed = isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError)
    return outcome if failed else None
