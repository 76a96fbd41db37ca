"""Prometheus metrics and the estimates as JSON, served by kvldp's web server (:mod:`kvldp.web`).

Metric names and labels are a contract:

* ``kvldp_reports_total{collection}`` — reports folded (from the live state);
* ``kvldp_reports_rejected_total{collection,reason}`` (every reason, from 0);
* ``kvldp_consumer_lag_messages{collection,partition}``;
* ``kvldp_offsets_lost_to_retention_total{collection,partition}``: offsets deleted
  (retention, delete-records) before the aggregator read them;
* ``kvldp_duplicates_total``, ``kvldp_topic_resets_total``, ``kvldp_privacy_budget_epsilon``
  (with a budget), ``kvldp_checkpoint_duration_seconds`` (histogram) and
  ``kvldp_last_checkpoint_timestamp_seconds``;
* ``kvldp_implausible_devices{collection}``: devices with at least one report refused as
  ``implausible_report`` (docs/plausibility.md; an upper bound past a bounded list);
* ``kvldp_device_privacy_spent_epsilon{collection}`` (histogram over devices; collections
  with a ``[privacy]`` table): the epsilon each device has spent, as the server counts it;
  with ``instantaneous_epsilon`` instead ``kvldp_device_privacy_spent_epsilon_upper_bound``,
  an upper bound of it (reports x the per-send bound, :mod:`kvldp.aggregator.devices`);
* ``kvldp_frequency{collection,key,estimator,window}`` and ``kvldp_frequency_stderr``;
* ``kvldp_mean{collection,key,estimator,window}`` and ``kvldp_mean_stderr`` (in the
  collection's units);
* ``kvldp_frequency_low``, ``kvldp_frequency_high``, ``kvldp_mean_low`` and
  ``kvldp_mean_high`` (same labels): the
  95% interval of each estimate, which covers the truth even where the point estimate is
  clipped, projected or shrunk (docs/mechanisms.md, *Calibration of standard errors*);
  an estimator that exports no standard error by design (``eb``, PrivKV's ``paper`` mean)
  still exports its interval where it has one;
* ``kvldp_means_not_estimable{collection,estimator,window}``: keys with reports whose
  mean is not estimable (no ``kvldp_mean`` series for them);
* ``kvldp_conditional_frequency{collection,key,condition,estimator,window}`` and
  ``kvldp_conditional_mean{...}`` with ``_stderr`` companions: f(key | condition) and
  m(key | condition), ``condition`` like ``hamburger=1,fries=0``; their 95% intervals as
  ``kvldp_conditional_frequency_low``, ``kvldp_conditional_frequency_high``,
  ``kvldp_conditional_mean_low`` and ``kvldp_conditional_mean_high``;
* interactive collections (PrivKVM's rounds): ``kvldp_round{collection}`` (the open
  round, 1-based; once complete, the rounds run), ``kvldp_rounds_complete{collection}``
  (0 or 1), ``kvldp_round_reports{collection,round}`` (reports folded per round) and
  ``kvldp_round_mean{collection,key,round}`` (the means m^(r) published when round r
  closed, in the collection's units); their estimates use the closed rounds only (round 1
  while it is the open one), and their devices' spent epsilon sums the rounds' costs;
* PCKV collections: ``kvldp_pckv_padded_share{collection,window}`` and
  ``kvldp_pckv_padded_share_stderr`` — the share of reports whose device sampled a
  padding slot (unbiased, may leave [0, 1]) — and ``kvldp_pckv_unpadded_share_upper``,
  a 95% upper bound on the share of devices holding ``ell`` pairs or more, which PCKV
  under-counts when they hold more (1: padding not detected, every device may);
  :mod:`kvldp.common.mechanisms.pckv_padded`;
* key-value collections: ``kvldp_poisoning_score{collection,key,estimator,window}``, each
  key's poisoning score after the last refit (0: nothing unusual; s: a genuine
  population gives any key of the window a score >= s in at most 10^-s of refits), and
  ``kvldp_poisoning_population_score{collection,estimator,window}`` for the
  population-level tests (PCKV's padded share); ``estimator`` is ``unbiased``, the basis
  the tests use whatever estimators the collection configures;
  :mod:`kvldp.common.untrusted.poisoning`, docs/detection.md;
* ``kvldp_refit_duration_seconds{collection}`` (histogram),
  ``kvldp_last_refit_timestamp_seconds{collection}``, ``kvldp_em_iterations{collection,window}``;
* the service's view of its Kafka cluster, registered here by the aggregator and the
  exporter (:mod:`kvldp.kafka.reachability`): ``kvldp_kafka_reachable`` (1 or 0),
  ``kvldp_kafka_outages_total``, ``kvldp_kafka_last_contact_timestamp_seconds``;
* scale-out (registered by the worker and the exporter roles,
  :mod:`kvldp.aggregator.snapshot_wait`): ``kvldp_partitions_awaiting_snapshot{collection}``,
  the input partitions the process holds no state of yet: a worker's assigned partitions
  whose snapshots it is waiting for or loading, an exporter's partitions of which no
  worker has published a snapshot.

Estimates come from a custom collector reading one immutable :class:`Snapshot` that
the refit task swaps by reference (no stale label sets, no torn reads). Undefined
estimates (NaN) are not exported, so every series that exists is finite.

The endpoint answers ``GET /metrics`` (Prometheus text format) and ``GET /estimates``
(the snapshot as JSON), ``HEAD`` too, and 405 to other methods, on the server of
:mod:`kvldp.web` with its limits (request sizes, no request body, deadlines, bounded
connections: :class:`kvldp.web.limits.Limits`). It binds 127.0.0.1 unless told
otherwise, and can require TLS and HTTP basic auth
(:class:`kvldp.web.security.HttpSecurity`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator

import numpy as np
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from kvldp.aggregator.devices import epsilon_per_charge
from kvldp.aggregator.refit import Snapshot, condition_label, refit
from kvldp.aggregator.round_state import mask_costs
from kvldp.aggregator.state import AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.common.mechanisms.pckv import PCKV
from kvldp.common.messages.control_record import interactive_mechanism
from kvldp.common.messages.wire import REASONS
from kvldp.web.limits import Limits
from kvldp.web.security import HttpSecurity
from kvldp.web.server import WebServer

LABELS = ["collection", "key", "estimator", "window"]
#: the ``estimator`` label of the poisoning scores: the basis their tests use
POISONING_BASIS = "unbiased"
CONDITIONAL_LABELS = ["collection", "key", "condition", "estimator", "window"]
INTERVAL_HELP = (
    " (estimate ± 1.96 stderr, or, where the estimator clips, projects or shrinks its point "
    "estimate, the interval of its unbiased basis: clipped into the range, Fieller's for a mean)."
)
#: buckets of ``kvldp_device_privacy_spent_epsilon``, in units of the per-report epsilon (of
#: the ``_upper_bound`` histogram: of the per-send bound, so in reports)
SPENT_BUCKETS = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000)


class SnapshotCollector(PromCollector):
    """Exports the latest snapshot, and the counters of the state it came from."""

    def __init__(
        self,
        collection: Collection,
        state: Callable[[], AggregatorState],
        lag: Callable[[], dict[int, int]] | None = None,
    ) -> None:
        self.collection = collection
        self.state = state
        self.lag = lag
        self.snapshot: Snapshot | None = None
        self.last_checkpoint: float | None = None

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["collection"])
        family.add_metric([self.collection.name], value)
        return family

    def _spent_histogram(self, state: AggregatorState) -> HistogramMetricFamily:
        """Epsilon each device has spent on the collection, as the server can count it; with
        instantaneous randomization only an upper bound of it, under its own name."""
        per_charge = epsilon_per_charge(self.collection)
        bounds = per_charge * np.asarray(SPENT_BUCKETS, dtype=np.float64)
        if state.rounds is not None:  # what a device has spent after 1, 2, ... c rounds
            costs = state.round_costs()
            bounds = np.cumsum(costs) * (1 + 1e-12)
            tally = state.devices_by_rounds()  # devices per mask of rounds: no pass over them
            masks = np.array(sorted(tally), dtype=np.uint64)
            held = np.array([tally[m] for m in masks.tolist()], dtype=np.int64)
            spent = mask_costs(masks, costs)
            order = np.argsort(spent, kind="stable")
            running = np.cumsum(np.r_[0, held[order]])
            cumulative = running[np.searchsorted(spent[order], bounds, side="right")]
            devices, total = int(held.sum()), float(np.dot(spent, held))
        else:  # from the count of devices per number of charges: no pass over the devices
            tally = state.devices_by_charges()
            charges = np.array(sorted(tally), dtype=np.int64)
            held = np.array([tally[k] for k in charges.tolist()], dtype=np.int64)
            cumulative = np.cumsum(np.r_[0, held])[np.searchsorted(charges, SPENT_BUCKETS, side="right")]
            devices, total = int(held.sum()), per_charge * float(np.dot(charges, held))
        if self.collection.instantaneous_randomizer is None:
            family = HistogramMetricFamily(
                "kvldp_device_privacy_spent_epsilon",
                "Epsilon spent per device on this collection: per-report epsilon x reports sent "
                "(memoized collections: x distinct reports; interactive ones: the costs of their rounds).",
                labels=["collection"],
            )
        else:
            family = HistogramMetricFamily(
                "kvldp_device_privacy_spent_epsilon_upper_bound",
                "An upper bound of the epsilon each device revealed on this collection, whose sends "
                "are randomized again: reports sent x the per-send bound (the device's ledger keeps "
                "the true spend and its cap; a bound above the cap is no overspending).",
                labels=["collection"],
            )
        family.add_metric(
            [self.collection.name],
            [(f"{b:g}", float(c)) for b, c in zip(bounds, cumulative, strict=True)]
            + [("+Inf", float(devices))],
            sum_value=total,
        )
        return family

    def _round_metrics(self, state: AggregatorState) -> Iterator[Metric]:
        rounds = state.rounds
        assert rounds is not None
        name = self.collection.name
        current = GaugeMetricFamily(
            "kvldp_round", "The open round (1-based); once complete, the rounds run.", labels=["collection"]
        )
        current.add_metric([name], float(rounds.open_round if rounds.complete else rounds.open_round + 1))
        yield current
        complete = GaugeMetricFamily(
            "kvldp_rounds_complete", "1 once the last round closed.", labels=["collection"]
        )
        complete.add_metric([name], float(rounds.complete))
        yield complete
        per_round = state.all_stats().arrays["counts"].sum(axis=(1, 2))
        reports = GaugeMetricFamily(
            "kvldp_round_reports", "Reports folded in each round.", labels=["collection", "round"]
        )
        last = rounds.open_round if rounds.complete else rounds.open_round + 1
        for r in range(last):
            reports.add_metric([name, str(r + 1)], float(per_round[r]))
        yield reports
        means = GaugeMetricFamily(
            "kvldp_round_mean",
            "Mean published when the round closed (collection units).",
            labels=["collection", "key", "round"],
        )
        for r, published in enumerate(rounds.published[1:], start=1):
            for key, value in zip(self.collection.keys, self.collection.raw_mean(published), strict=True):
                means.add_metric([name, key, str(r)], float(value))
        yield means

    def collect(self) -> Iterator[Metric]:
        state = self.state()
        yield from self._intake_metrics(state)
        yield from self._device_metrics(state)
        if self.last_checkpoint is not None:
            last = GaugeMetricFamily(
                "kvldp_last_checkpoint_timestamp_seconds",
                "Unix time of the last completed checkpoint.",
                labels=["collection"],
            )
            last.add_metric([self.collection.name], self.last_checkpoint)
            yield last
        snap = self.snapshot
        if snap is not None:
            yield from _snapshot_metrics(self.collection, snap)

    def _intake_metrics(self, state: AggregatorState) -> Iterator[Metric]:
        """What the reports topic brought: reports folded, duplicates, resets, offsets
        lost, messages rejected by reason, and the consumer's lag."""
        name = self.collection.name
        yield self._counter(
            "kvldp_reports", "Reports folded into the statistics.", float(state.reports_total)
        )
        yield self._counter(
            "kvldp_duplicates", "Reports dropped as duplicates of a report id.", float(state.duplicates_total)
        )
        yield self._counter(
            "kvldp_topic_resets",
            "Input partitions found reset (a new epoch began).",
            float(state.resets_total),
        )
        lost = CounterMetricFamily(
            "kvldp_offsets_lost_to_retention",
            "Offsets of the reports topic deleted (retention, delete-records) before they were read.",
            labels=["collection", "partition"],
        )
        for partition, partition_state in sorted(state.partitions.items()):
            lost.add_metric([name, str(partition)], float(partition_state.lost))
        yield lost
        rejected = CounterMetricFamily(
            "kvldp_reports_rejected",
            "Messages sent to the dead-letter topic, by reason.",
            labels=["collection", "reason"],
        )
        counts = state.rejected_totals()
        # every reason from the start, at 0: rate() panels need a series before the first reject
        for reason in sorted(set(REASONS) | set(counts)):
            rejected.add_metric([name, reason], float(counts.get(reason, 0)))
        yield rejected
        lag = GaugeMetricFamily(
            "kvldp_consumer_lag_messages",
            "Records in the reports topic not yet folded (high watermark - next offset).",
            labels=["collection", "partition"],
        )
        for partition, behind in sorted((self.lag() if self.lag is not None else state.lag()).items()):
            lag.add_metric([name, str(partition)], float(behind))
        yield lag

    def _device_metrics(self, state: AggregatorState) -> Iterator[Metric]:
        """What the devices may spend and did: the budget per window, the devices flagged
        implausible, the epsilon each spent, and an interactive collection's rounds."""
        name = self.collection.name
        limit = self.collection.aggregate.max_reports_per_device
        if limit:
            budget = GaugeMetricFamily(
                "kvldp_privacy_budget_epsilon",
                "Total epsilon one device can spend per budget window (epsilon x max_reports_per_device).",
                labels=["collection"],
            )
            budget.add_metric([name], self.collection.epsilon * limit)
            yield budget
        flagged = GaugeMetricFamily(
            "kvldp_implausible_devices",
            "Devices with at least one report refused as implausible (docs/plausibility.md).",
            labels=["collection"],
        )
        flagged.add_metric([name], float(state.implausible_devices))
        yield flagged
        if state.tracks_devices or state.rounds is not None:
            yield self._spent_histogram(state)
        if state.rounds is not None:
            yield from self._round_metrics(state)


def _snapshot_metrics(c: Collection, snap: Snapshot) -> Iterator[Metric]:
    """The families of one refit's snapshot, in their export order."""
    yield from _estimate_families(c, snap)
    yield from _conditional_families(c, snap).values()
    iterations = GaugeMetricFamily(
        "kvldp_em_iterations", "EM iterations of the last refit.", labels=["collection", "window"]
    )
    for window in snap.fits:
        its = snap.em_iterations(window)
        if its is not None:
            iterations.add_metric([c.name, window], float(its))
    yield iterations
    if any(fit.poisoning is not None for fit in snap.fits.values()):
        yield from _poisoning_families(c, snap)
    if isinstance(c.mechanism, PCKV):
        yield from _padded_families(c, snap).values()
    last = GaugeMetricFamily(
        "kvldp_last_refit_timestamp_seconds", "Unix time of the last refit.", labels=["collection"]
    )
    last.add_metric([c.name], snap.created)
    yield last


def _estimate_families(c: Collection, snap: Snapshot) -> Iterator[Metric]:
    """Every key's frequency and mean per estimator and window, with their standard errors
    and 95% intervals, and the count of keys whose mean is not estimable."""
    families = {
        key: GaugeMetricFamily(f"kvldp_{key}", doc, labels=LABELS)
        for key, doc in (
            ("frequency", "Estimated fraction of devices holding the key."),
            ("frequency_stderr", "Standard error of kvldp_frequency."),
            ("mean", "Estimated mean value of the key among its holders (collection units)."),
            ("mean_stderr", "Standard error of kvldp_mean."),
            ("frequency_low", "Lower end of the 95% interval of kvldp_frequency" + INTERVAL_HELP),
            ("frequency_high", "Upper end of the 95% interval of kvldp_frequency" + INTERVAL_HELP),
            ("mean_low", "Lower end of the 95% interval of kvldp_mean" + INTERVAL_HELP),
            ("mean_high", "Upper end of the 95% interval of kvldp_mean" + INTERVAL_HELP),
        )
    }
    not_estimable = GaugeMetricFamily(
        "kvldp_means_not_estimable",
        "Keys with reports whose mean is not estimable: their holders cannot be told from "
        "nobody at 95% (no kvldp_mean series for them).",
        labels=["collection", "estimator", "window"],
    )
    for window, fit in snap.fits.items():
        for est, e in fit.estimates.items():
            f_lo, f_hi = e.frequency_interval
            m_lo, m_hi = e.mean_interval
            columns = {
                "frequency": e.frequency,
                "frequency_stderr": e.frequency_stderr,
                "mean": c.raw_mean(e.mean),
                "mean_stderr": c.raw_scale(e.mean_stderr),
                "frequency_low": f_lo,
                "frequency_high": f_hi,
                "mean_low": c.raw_mean(m_lo),
                "mean_high": c.raw_mean(m_hi),
            }
            if c.mechanism.collects_values:
                count = e.diagnostics.get("not_estimable_means", 0)
                not_estimable.add_metric([c.name, est, window], float(count))
            for key, values in columns.items():
                for k, v in zip(c.keys, values, strict=True):
                    if np.isfinite(v):
                        families[key].add_metric([c.name, k, est, window], float(v))
    yield from families.values()
    yield not_estimable


def _conditional_families(c: Collection, snap: Snapshot) -> dict[str, GaugeMetricFamily]:
    """f(key | condition) and m(key | condition) per estimator and window, with their
    standard errors and 95% intervals."""
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
            ("frequency_low", "Lower end of the 95% interval of kvldp_conditional_frequency."),
            ("frequency_high", "Upper end of the 95% interval of kvldp_conditional_frequency."),
            ("mean_low", "Lower end of the 95% interval of kvldp_conditional_mean (collection units)."),
            ("mean_high", "Upper end of the 95% interval of kvldp_conditional_mean (collection units)."),
        )
    }
    for window, fit in snap.fits.items():
        for est, answers in fit.conditionals.items():
            for a in answers:
                labels = [c.name, c.keys[a.query.target], condition_label(a.query, c.keys), est, window]
                mean = c.raw_mean(np.array([a.mean]))[0]
                mean_se = c.raw_scale(np.array([a.mean_stderr]))[0]
                mean_lo, mean_hi = c.raw_mean(np.array(a.mean_interval))
                for key, value in (
                    ("frequency", a.frequency),
                    ("frequency_stderr", a.frequency_stderr),
                    ("mean", mean),
                    ("mean_stderr", mean_se),
                    ("frequency_low", a.frequency_interval[0]),
                    ("frequency_high", a.frequency_interval[1]),
                    ("mean_low", mean_lo),
                    ("mean_high", mean_hi),
                ):
                    if np.isfinite(value):
                        conditional[key].add_metric(labels, float(value))
    return conditional


def _poisoning_families(c: Collection, snap: Snapshot) -> Iterator[Metric]:
    """The poisoning scores of every key and of the population-level tests, per window."""
    poisoning = GaugeMetricFamily(
        "kvldp_poisoning_score",
        "Poisoning score of the key (docs/detection.md): -log10 of the Bonferroni-corrected "
        "p-value of its most violated consistency test; a genuine population reaches s on "
        "any key of the window in at most 10^-s of refits.",
        labels=LABELS,
    )
    population = GaugeMetricFamily(
        "kvldp_poisoning_population_score",
        "Poisoning score of the population-level tests (docs/detection.md), same scale as "
        "kvldp_poisoning_score.",
        labels=["collection", "estimator", "window"],
    )
    for window, fit in snap.fits.items():
        report = fit.poisoning
        if report is not None:
            for k, value in zip(c.keys, report.key_score, strict=True):
                if np.isfinite(value):
                    poisoning.add_metric([c.name, k, POISONING_BASIS, window], float(value))
            if report.population_test:
                population.add_metric([c.name, POISONING_BASIS, window], report.population_score)
    yield poisoning
    yield population


def _padded_families(c: Collection, snap: Snapshot) -> dict[str, GaugeMetricFamily]:
    """PCKV's padded share per window, its standard error and the upper bound on the
    share of devices holding ``ell`` pairs or more."""
    padded = {
        key: GaugeMetricFamily(f"kvldp_pckv_{key}", doc, labels=["collection", "window"])
        for key, doc in (
            ("padded_share", "Estimated share of reports whose device sampled a padding (dummy) slot."),
            ("padded_share_stderr", "Standard error of kvldp_pckv_padded_share."),
            (
                "unpadded_share_upper",
                "95% upper bound on the share of devices holding ell pairs or more "
                "(1: padding not detected; PCKV under-counts devices holding more than ell).",
            ),
        )
    }
    for window, fit in snap.fits.items():
        share = fit.padded
        if share is not None and np.isfinite(share.estimate):
            for key, value in (
                ("padded_share", share.estimate),
                ("padded_share_stderr", share.stderr),
                ("unpadded_share_upper", share.unpadded_upper),
            ):
                padded[key].add_metric([c.name, window], value)
    return padded


class Exporter:
    """The registry, the refit-duration histogram and the HTTP server of one aggregator."""

    def __init__(
        self,
        collection: Collection,
        state: Callable[[], AggregatorState],
        lag: Callable[[], dict[int, int]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.registry = CollectorRegistry()
        self.collector = SnapshotCollector(collection, state, lag)
        self.registry.register(self.collector)
        self.refit_duration = Histogram(
            "kvldp_refit_duration_seconds",
            "Seconds spent refitting all windows and estimators.",
            ["collection"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.checkpoint_duration = Histogram(
            "kvldp_checkpoint_duration_seconds",
            "Seconds to write one checkpoint (file or state topic).",
            ["collection"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.collection = collection
        self.queries = collection.conditional_queries()
        #: the endpoint's server, from :meth:`serve` to :meth:`close`
        self.server: WebServer | None = None

    async def refresh(self, state: AggregatorState) -> None:
        """Refit every window of ``state`` and publish the result. Buckets are compacted
        and the windows summed on the event loop (no fold can interleave); the estimation
        itself runs in a thread so the consumer keeps polling."""
        now_ms = int(self.clock() * 1000)
        state.compact(now_ms)
        windows = state.window_stats(now_ms)
        if state.rounds is not None:  # estimates after the latest closed round
            mechanism = interactive_mechanism(self.collection)
            through = max(1, state.rounds.closed)
            windows = {w: mechanism.through_round(stats, through) for w, stats in windows.items()}
        self.publish(await asyncio.to_thread(refit, self.collection, windows, self.snapshot, self.queries))

    def publish(self, snapshot: Snapshot) -> None:
        """Swap in a new snapshot (atomic: one reference assignment)."""
        self.collector.snapshot = snapshot
        self.refit_duration.labels(self.collection.name).observe(snapshot.duration)

    def checkpointed(self, seconds: float) -> None:
        self.checkpoint_duration.labels(self.collection.name).observe(seconds)
        self.collector.last_checkpoint = time.time()

    @property
    def snapshot(self) -> Snapshot | None:
        return self.collector.snapshot

    async def serve(
        self, host: str, port: int, security: HttpSecurity | None = None, limits: Limits | None = None
    ) -> int:
        """Start listening (TLS and basic auth if ``security`` says so, within ``limits``);
        returns the bound port."""
        routes = [
            web.get("/metrics", self._metrics),
            web.get("/estimates", self._estimates),
            web.get("/", self._index),
        ]
        self.server = WebServer(routes, ("GET", "HEAD"), limits, security)
        return await self.server.start(host, port)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
            self.server = None

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _estimates(self, _: web.Request) -> web.Response:
        snap = self.snapshot
        payload = snap.to_json() if snap is not None else {"collection": self.collection.name, "windows": {}}
        return web.Response(body=json.dumps(payload).encode(), content_type="application/json")

    async def _index(self, _: web.Request) -> web.Response:
        return web.Response(text="kvldp aggregator: /metrics, /estimates\n")
