"""Prometheus metrics and the estimates as JSON, over one small asyncio HTTP server.

Metric names and labels are a contract (issue 3):

* ``kvldp_reports_total{collection}`` — reports folded (from the live state);
* ``kvldp_reports_rejected_total{collection,reason}``;
* ``kvldp_frequency{collection,key,estimator,window}`` and ``kvldp_frequency_stderr``;
* ``kvldp_mean{collection,key,estimator,window}`` and ``kvldp_mean_stderr`` (in the
  collection's units);
* ``kvldp_conditional_frequency{collection,key,condition,estimator,window}`` and
  ``kvldp_conditional_mean{...}`` with ``_stderr`` companions: f(key | condition) and
  m(key | condition), ``condition`` like ``hamburger=1,fries=0``;
* ``kvldp_refit_duration_seconds{collection}`` (histogram),
  ``kvldp_last_refit_timestamp_seconds{collection}``, ``kvldp_em_iterations{collection,window}``.

Estimates come from a custom collector reading one immutable :class:`Snapshot` that
the refit task swaps by reference (no stale label sets, no torn reads). Undefined
estimates (NaN) are not exported, so every series that exists is finite.

The server answers ``GET /metrics`` (Prometheus text format) and ``GET /estimates``
(the snapshot as JSON) and binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from aggregator.refit import Snapshot, condition_label
from common.collection import Collection

LABELS = ["collection", "key", "estimator", "window"]
CONDITIONAL_LABELS = ["collection", "key", "condition", "estimator", "window"]


class SnapshotCollector(PromCollector):
    """Exports the latest snapshot and live counters of one collection."""

    def __init__(
        self,
        collection: Collection,
        reports_total: Callable[[], int],
        rejected: Callable[[], Counter[str]],
    ) -> None:
        self.collection = collection
        self.reports_total = reports_total
        self.rejected = rejected
        self.snapshot: Snapshot | None = None

    def collect(self) -> Iterator[Metric]:
        name = self.collection.name
        folded = CounterMetricFamily(
            "kvldp_reports", "Reports folded into the statistics.", labels=["collection"]
        )
        folded.add_metric([name], float(self.reports_total()))
        yield folded
        rejected = CounterMetricFamily(
            "kvldp_reports_rejected",
            "Messages sent to the dead-letter topic, by reason.",
            labels=["collection", "reason"],
        )
        for reason, count in sorted(self.rejected().items()):
            rejected.add_metric([name, reason], float(count))
        yield rejected
        snap = self.snapshot
        if snap is None:
            return
        families = {
            key: GaugeMetricFamily(f"kvldp_{key}", doc, labels=LABELS)
            for key, doc in (
                ("frequency", "Estimated fraction of devices holding the key."),
                ("frequency_stderr", "Standard error of kvldp_frequency."),
                ("mean", "Estimated mean value of the key among its holders (collection units)."),
                ("mean_stderr", "Standard error of kvldp_mean."),
            )
        }
        conditional = {
            key: GaugeMetricFamily(f"kvldp_conditional_{key}", doc, labels=CONDITIONAL_LABELS)
            for key, doc in (
                ("frequency", "Estimated fraction of the devices meeting the condition that hold the key."),
                ("frequency_stderr", "Standard error of kvldp_conditional_frequency."),
                (
                    "mean",
                    "Estimated mean of the key among the devices meeting the condition (collection units).",
                ),
                ("mean_stderr", "Standard error of kvldp_conditional_mean."),
            )
        }
        iterations = GaugeMetricFamily(
            "kvldp_em_iterations", "EM iterations of the last refit.", labels=["collection", "window"]
        )
        c = self.collection
        for window, fit in snap.fits.items():
            for est, e in fit.estimates.items():
                columns = {
                    "frequency": e.frequency,
                    "frequency_stderr": e.frequency_stderr,
                    "mean": c.raw_mean(e.mean),
                    "mean_stderr": c.raw_scale(e.mean_stderr),
                }
                for key, values in columns.items():
                    for k, v in zip(c.keys, values, strict=True):
                        if np.isfinite(v):
                            families[key].add_metric([name, k, est, window], float(v))
            for est, answers in fit.conditionals.items():
                for a in answers:
                    labels = [name, c.keys[a.query.target], condition_label(a.query, c.keys), est, window]
                    mean = c.raw_mean(np.array([a.mean]))[0]
                    mean_se = c.raw_scale(np.array([a.mean_stderr]))[0]
                    for key, value in (
                        ("frequency", a.frequency),
                        ("frequency_stderr", a.frequency_stderr),
                        ("mean", mean),
                        ("mean_stderr", mean_se),
                    ):
                        if np.isfinite(value):
                            conditional[key].add_metric(labels, float(value))
            its = snap.em_iterations(window)
            if its is not None:
                iterations.add_metric([name, window], float(its))
        yield from families.values()
        yield from conditional.values()
        yield iterations
        last = GaugeMetricFamily(
            "kvldp_last_refit_timestamp_seconds", "Unix time of the last refit.", labels=["collection"]
        )
        last.add_metric([name], snap.created)
        yield last


class Exporter:
    """The registry, the refit-duration histogram and the HTTP server of one aggregator."""

    def __init__(
        self, collection: Collection, reports_total: Callable[[], int], rejected: Callable[[], Counter[str]]
    ) -> None:
        self.registry = CollectorRegistry()
        self.collector = SnapshotCollector(collection, reports_total, rejected)
        self.registry.register(self.collector)
        self.refit_duration = Histogram(
            "kvldp_refit_duration_seconds",
            "Seconds spent refitting all windows and estimators.",
            ["collection"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.collection = collection
        self._server: asyncio.base_events.Server | None = None

    def publish(self, snapshot: Snapshot) -> None:
        """Swap in a new snapshot (atomic: one reference assignment)."""
        self.collector.snapshot = snapshot
        self.refit_duration.labels(self.collection.name).observe(snapshot.duration)

    @property
    def snapshot(self) -> Snapshot | None:
        return self.collector.snapshot

    async def serve(self, host: str, port: int) -> int:
        """Start listening; returns the bound port (useful with port 0)."""
        self._server = await asyncio.start_server(self._handle, host, port)
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def _body(self, path: str) -> tuple[str, str, bytes]:
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/estimates":
            snap = self.snapshot
            payload = (
                snap.to_json() if snap is not None else {"collection": self.collection.name, "windows": {}}
            )
            return "200 OK", "application/json", json.dumps(payload).encode()
        if path == "/":
            return "200 OK", "text/plain; charset=utf-8", b"kvldp aggregator: /metrics, /estimates\n"
        return "404 Not Found", "text/plain; charset=utf-8", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=10)
            while True:  # drain headers
                line = await asyncio.wait_for(reader.readline(), timeout=10)
                if line in (b"\r\n", b"\n", b""):
                    break
            parts = request.decode("latin-1").split()
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET\n"
            else:
                status, ctype, body = self._body(parts[1].split("?", 1)[0])
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(head + (body if parts and parts[0] == "GET" else b""))
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
