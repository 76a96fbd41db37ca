"""The gateway's Prometheus metrics, in a registry of its own (served on ``/metrics``).

* ``kvldp_gateway_requests_total{collection,status}`` — requests answered, by collection
  (empty for paths outside a known collection, so clients cannot grow the label set) and
  HTTP status;
* ``kvldp_gateway_request_seconds{collection}`` — time from a complete request head to
  the answer;
* ``kvldp_gateway_request_bytes_total{collection}`` — report body bytes received;
* ``kvldp_gateway_produce_errors_total{collection}`` — bodies Kafka did not acknowledge
  in time (answered 503);
* ``kvldp_gateway_reports_total{collection}`` — reports accepted (answered 202);
* ``kvldp_kafka_reachable``, ``kvldp_kafka_outages_total`` and
  ``kvldp_kafka_last_contact_timestamp_seconds`` — the gateway's view of its Kafka
  cluster, registered here by :class:`kvldp.kafka.reachability.Reachability`.

No label ever carries a device id, a token or a key. Each collection's series start at 0
when the gateway starts, so a rate of produce errors is 0, not missing, until one occurs.
The labelled series of each collection and status are looked up once and kept
(prometheus_client takes a lock and builds a key on every ``labels`` call, a measurable
share of a request's cost); their number is bounded by the collections served times the
statuses answered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics:
    """The counters and histogram of one gateway process."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, collections: Iterable[str] = ()) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "kvldp_gateway_requests_total",
            "HTTP requests answered, by collection and status",
            ["collection", "status"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "kvldp_gateway_request_seconds",
            "seconds from a complete request head to its answer",
            ["collection"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.bytes = Counter(
            "kvldp_gateway_request_bytes",
            "report body bytes received",
            ["collection"],
            registry=self.registry,
        )
        self.produce_errors = Counter(
            "kvldp_gateway_produce_errors",
            "report bodies Kafka did not acknowledge in time",
            ["collection"],
            registry=self.registry,
        )
        self.reports = Counter(
            "kvldp_gateway_reports",
            "reports accepted and acknowledged by Kafka",
            ["collection"],
            registry=self.registry,
        )
        for name in collections:
            for family in (self.seconds, self.bytes, self.produce_errors, self.reports):
                family.labels(name)

        self._series: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Counter | Histogram, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._series.get(key)
        if child is None:
            child = self._series[key] = metric.labels(*labels)
        return child

    def answered(self, collection: str, status: int, seconds: float) -> None:
        """One request answered with ``status`` after ``seconds``."""
        self._child(self.requests, collection, str(status)).inc()
        self._child(self.seconds, collection).observe(seconds)

    def received(self, collection: str, size: int) -> None:
        """A report body of ``size`` bytes read."""
        self._child(self.bytes, collection).inc(size)

    def accepted(self, collection: str, reports: int) -> None:
        """``reports`` reports acknowledged by Kafka."""
        self._child(self.reports, collection).inc(reports)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
