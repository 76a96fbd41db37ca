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
The series of each collection and status number at most the collections served times the
statuses answered.

Every request updates four of these series, so they are plain counts kept by
:class:`GatewayMetrics` itself and turned into metric families when ``/metrics`` is
scraped (:meth:`GatewayMetrics.collect`): prometheus_client's own counters and histograms
take a lock on every update, which cost a request more than its rate limit and token
checks together. The process has one thread, the event loop's, which updates and scrapes
them alike. Counters carry their ``_created`` time as prometheus_client's do; the
histogram has none.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Counts:
    """One counter's series: label values -> (value, created)."""

    def __init__(self, name: str, documentation: str, labels: list[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.values: dict[tuple[str, ...], float] = {}
        self.created: dict[tuple[str, ...], float] = {}

    def add(self, key: tuple[str, ...], amount: float) -> None:
        try:
            self.values[key] += amount
        except KeyError:
            self.start(key)
            self.values[key] += amount

    def start(self, key: tuple[str, ...]) -> None:
        """Show ``key``'s series (at 0 until counted)."""
        if key not in self.values:
            self.values[key] = 0.0
            self.created[key] = time.time()

    def family(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for key, value in self.values.items():
            family.add_metric(list(key), value, created=self.created[key])
        return family


class Latency:
    """One histogram's series by collection: counts per bucket and the sum."""

    def __init__(self, name: str, documentation: str, bounds: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = bounds
        #: collection -> [count per bucket (the last one +Inf), sum]
        self.series: dict[str, tuple[list[int], list[float]]] = {}

    def observe(self, collection: str, seconds: float) -> None:
        series = self.series.get(collection)
        if series is None:
            series = self.series[collection] = ([0] * (len(self.bounds) + 1), [0.0])
        series[0][bisect.bisect_left(self.bounds, seconds)] += 1
        series[1][0] += seconds

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["collection"])
        edges = [*(repr(float(b)) for b in self.bounds), "+Inf"]  # as prometheus_client writes them
        for collection, (counts, total) in self.series.items():
            cumulative, buckets = 0, []
            for edge, count in zip(edges, counts, strict=True):
                cumulative += count
                buckets.append((edge, float(cumulative)))
            family.add_metric([collection], buckets, total[0])
        return family


class GatewayMetrics(Collector):
    """The counters and histogram of one gateway process."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, collections: Iterable[str] = ()) -> None:
        self.requests = Counts(
            "kvldp_gateway_requests",
            "HTTP requests answered, by collection and status",
            ["collection", "status"],
        )
        self.seconds = Latency(
            "kvldp_gateway_request_seconds",
            "seconds from a complete request head to its answer",
            LATENCY_BUCKETS,
        )
        self.bytes = Counts("kvldp_gateway_request_bytes", "report body bytes received", ["collection"])
        self.produce_errors = Counts(
            "kvldp_gateway_produce_errors", "report bodies Kafka did not acknowledge in time", ["collection"]
        )
        self.reports = Counts(
            "kvldp_gateway_reports", "reports accepted and acknowledged by Kafka", ["collection"]
        )
        for name in collections:
            self.seconds.series.setdefault(name, ([0] * (len(LATENCY_BUCKETS) + 1), [0.0]))
            for counts in (self.bytes, self.produce_errors, self.reports):
                counts.start((name,))
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        """The metric families, as they stand (called by the registry on each scrape)."""
        yield self.requests.family()
        yield self.seconds.family()
        for counts in (self.bytes, self.produce_errors, self.reports):
            yield counts.family()

    def answered(self, collection: str, status: int, seconds: float) -> None:
        """One request answered with ``status`` after ``seconds``."""
        self.requests.add((collection, str(status)), 1)
        self.seconds.observe(collection, seconds)

    def received(self, collection: str, size: int) -> None:
        """A report body of ``size`` bytes read."""
        self.bytes.add((collection,), size)

    def accepted(self, collection: str, reports: int) -> None:
        """``reports`` reports acknowledged by Kafka."""
        self.reports.add((collection,), reports)

    def unavailable(self, collection: str) -> None:
        """A body Kafka did not acknowledge in time."""
        self.produce_errors.add((collection,), 1)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
