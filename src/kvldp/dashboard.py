"""The Grafana dashboard, as code: ``python -m kvldp.dashboard --out FILE`` writes it
(to standard output without ``--out``); ``make dashboard`` writes the repository's
``deploy/grafana/dashboards/kvldp.json``. The test suite checks the committed file is
what this module builds, checks it against Grafana's own schema for the Grafana of
``deploy/docker-compose.yml``, and runs every PromQL expression in it against a real
Prometheus scraping real aggregators.

The dashboard is put together with Grafana's Foundation SDK (``grafana-foundation-sdk``,
the release generated from the schemas of Grafana 11.3): typed builders for the
dashboard, its panels, Prometheus queries and template variables, so that a field
Grafana does not know, or a value of the wrong kind, is a type error for mypy rather
than a panel Grafana silently ignores. One function builds each group of panels.

Template variables: ``collection`` (multi-value, regex), ``window`` and ``estimator``.
The PrivKVM panels (round, reports per round, means published per round) show data for
interactive collections only; the poisoning panels for key-value collections only; the
panel of devices with implausible reports for collections whose reports are bit vectors; the
gateway panels for collections served by ``kvldp gateway``; the other panels for every
collection.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig, ReduceDataOptions
from grafana_foundation_sdk.builders.dashboard import Dashboard, QueryVariable, ThresholdsConfig
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BarGaugeDisplayMode,
    BigValueTextMode,
    GraphThresholdsStyleMode,
    TimeZoneBrowser,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    GridPos,
    Panel,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from kvldp.common.untrusted.poisoning import ALERT_SCORE

DATASOURCE = {"type": "prometheus", "uid": "kvldp-prometheus"}
SEL = 'collection=~"$collection"'
EST = f'{SEL}, window="$window", estimator="$estimator"'

#: the legend of the spent-epsilon panel's series read from the upper-bound histogram
UPPER_BOUND_LEGEND = "upper bound (instantaneous randomization)"

_SOURCE = DataSourceRef(type_val=DATASOURCE["type"], uid=DATASOURCE["uid"])
_MERGE = DataTransformerConfig(id_val="merge", options={})

#: (x, y, w, h) of a panel on Grafana's 24-column grid
Grid = tuple[int, int, int, int]


class _PanelBuilder(Protocol):
    """What every panel builder of the SDK offers (timeseries, stat, bar gauge, table):
    the fields this dashboard sets on all its panels."""

    def id(self, id_val: int) -> Self: ...
    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: DataSourceRef) -> Self: ...
    def grid_pos(self, grid_pos: GridPos) -> Self: ...
    def unit(self, unit: str) -> Self: ...
    def with_target(self, target: Builder[variants.Dataquery]) -> Self: ...


P = TypeVar("P", bound=_PanelBuilder)


def _query(expr: str, legend: str, ref: str, instant: bool = False, as_table: bool = False) -> Dataquery:
    """A Prometheus query of a panel: a range query unless ``instant``, one series per
    label set unless ``as_table`` (one row per label set)."""
    query = Dataquery().datasource(_SOURCE).expr(expr).legend_format(legend).ref_id(ref)
    if instant:
        query = query.instant()
    if as_table:
        query = query.format(PromQueryFormat.TABLE)
    return query


def _panel(
    panel: P,
    pid: int,
    title: str,
    grid: Grid,
    description: str,
    queries: list[Dataquery],
    unit: str = "short",
) -> P:
    """``panel`` with what every panel of the dashboard has: its id, title, description,
    data source, place on the grid, unit and queries."""
    x, y, w, h = grid
    panel = panel.id(pid).title(title).description(description).datasource(_SOURCE)
    panel = panel.grid_pos(GridPos(x=x, y=y, w=w, h=h)).unit(unit)
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _last_value() -> ReduceDataOptions:
    """Show a series' last value that is not null (stat and bar gauge panels)."""
    return ReduceDataOptions().calcs(["lastNotNull"])


def _horizontal_bars(panel: bargauge.Panel) -> bargauge.Panel:
    """A bar gauge of horizontal gradient bars, one per series, at its last value."""
    return (
        panel.orientation(VizOrientation.HORIZONTAL)
        .display_mode(BarGaugeDisplayMode.GRADIENT)
        .reduce_options(_last_value())
    )


def _alert_thresholds() -> ThresholdsConfig:
    """Green below the poisoning alert's threshold, red from it on."""
    return (
        ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(value=None, color="green"), Threshold(value=ALERT_SCORE, color="red")])
    )


def _ingestion_panels() -> list[Builder[Panel]]:
    """The top rows: what the aggregators fold, refuse and lag behind, and their refits."""
    return [
        _panel(
            timeseries.Panel(),
            1,
            "Reports folded per second",
            (0, 0, 8, 7),
            "Reports folded into the statistics (kvldp_reports_total).",
            [_query(f"sum by (collection) (rate(kvldp_reports_total{{{SEL}}}[1m]))", "{{collection}}", "A")],
            "reqps",
        ),
        _panel(
            timeseries.Panel(),
            2,
            "Rejected per second, by reason",
            (8, 0, 8, 7),
            "Messages sent to the dead-letter topic (kvldp_reports_rejected_total).",
            [
                _query(
                    f"sum by (collection, reason) (rate(kvldp_reports_rejected_total{{{SEL}}}[5m]))",
                    "{{collection}} {{reason}}",
                    "A",
                )
            ],
            "reqps",
        ),
        _panel(
            timeseries.Panel(),
            3,
            "Consumer lag",
            (16, 0, 8, 7),
            "Records in the reports topic not yet folded.",
            [_query(f"sum by (collection) (kvldp_consumer_lag_messages{{{SEL}}})", "{{collection}}", "A")],
        ),
        _panel(
            timeseries.Panel(),
            4,
            "Refit duration",
            (0, 7, 8, 7),
            "Seconds per refit of all windows and estimators.",
            [
                _query(
                    "histogram_quantile(0.9, sum by (collection, le) "
                    f"(rate(kvldp_refit_duration_seconds_bucket{{{SEL}}}[5m])))",
                    "p90 {{collection}}",
                    "A",
                ),
                _query(
                    f"sum by (collection) (rate(kvldp_refit_duration_seconds_sum{{{SEL}}}[5m])) / "
                    f"sum by (collection) (rate(kvldp_refit_duration_seconds_count{{{SEL}}}[5m]))",
                    "mean {{collection}}",
                    "B",
                ),
            ],
            "s",
        ),
        _panel(
            stat.Panel(),
            5,
            "Seconds since the last refit",
            (8, 7, 8, 7),
            "Age of the estimates on display.",
            [_query(f"time() - kvldp_last_refit_timestamp_seconds{{{SEL}}}", "{{collection}}", "A")],
            "s",
        ).reduce_options(_last_value()),
        _panel(
            timeseries.Panel(),
            6,
            "EM iterations",
            (16, 7, 8, 7),
            "Iterations of the last EM refit (warm-started).",
            [_query(f'kvldp_em_iterations{{{SEL}, window="$window"}}', "{{collection}}", "A")],
        ),
    ]


def _estimate_panels() -> list[Builder[Panel]]:
    """The estimates of the selected window and estimator: frequencies, means and
    conditional statistics, with their standard errors and intervals."""
    return [
        _horizontal_bars(
            _panel(
                bargauge.Panel(),
                7,
                "Top keys by estimated frequency",
                (0, 14, 12, 10),
                "Fraction of devices holding each key (kvldp_frequency).",
                [_query(f"topk(20, kvldp_frequency{{{EST}}})", "{{key}}", "A", instant=True)],
                "percentunit",
            )
        ),
        _panel(
            table.Panel(),
            8,
            "Frequency, standard error and 95% interval",
            (12, 14, 12, 10),
            "Value #A is the estimate, Value #B its standard error (none for eb), "
            "Value #C and #D the ends of its 95% interval.",
            [
                _query(f"kvldp_frequency{{{EST}}}", "", "A", instant=True, as_table=True),
                _query(f"kvldp_frequency_stderr{{{EST}}}", "", "B", instant=True, as_table=True),
                _query(f"kvldp_frequency_low{{{EST}}}", "", "C", instant=True, as_table=True),
                _query(f"kvldp_frequency_high{{{EST}}}", "", "D", instant=True, as_table=True),
            ],
            "percentunit",
        ).with_transformation(_MERGE),
        _panel(
            timeseries.Panel(),
            9,
            "Mean per key with its 95% interval",
            (0, 24, 24, 9),
            "Mean value among the key's holders, in the collection's units, with its 95% interval "
            "(which covers the truth even where the estimate is clipped or shrunk). A key whose mean "
            "is not estimable has no line: see kvldp_means_not_estimable.",
            [
                _query(f"kvldp_mean{{{EST}}}", "{{key}}", "A"),
                _query(f"kvldp_mean_high{{{EST}}}", "{{key}} high", "B"),
                _query(f"kvldp_mean_low{{{EST}}}", "{{key}} low", "C"),
            ],
        ),
        _panel(
            table.Panel(),
            10,
            "Conditional frequency f(key | condition)",
            (0, 33, 12, 10),
            "Rows: target key and condition (joint-state collections); A estimate, B standard error.",
            [
                _query(f"kvldp_conditional_frequency{{{EST}}}", "", "A", instant=True, as_table=True),
                _query(f"kvldp_conditional_frequency_stderr{{{EST}}}", "", "B", instant=True, as_table=True),
            ],
            "percentunit",
        ).with_transformation(_MERGE),
        _panel(
            table.Panel(),
            11,
            "Conditional mean m(key | condition)",
            (12, 33, 12, 10),
            "Mean of the key among devices meeting the condition; A estimate, B standard error.",
            [
                _query(f"kvldp_conditional_mean{{{EST}}}", "", "A", instant=True, as_table=True),
                _query(f"kvldp_conditional_mean_stderr{{{EST}}}", "", "B", instant=True, as_table=True),
            ],
        ).with_transformation(_MERGE),
    ]


def _spent_queries() -> list[Dataquery]:
    """The spent-epsilon panel's mean, median and max of
    ``kvldp_device_privacy_spent_epsilon`` (A, B, C), and the same of
    ``kvldp_device_privacy_spent_epsilon_upper_bound`` (D, E, F), the histogram
    collections with ``instantaneous_epsilon`` export in its place, each of its series
    labelled as an upper bound."""
    queries = []
    for name, label, (mean, median, top) in (
        ("kvldp_device_privacy_spent_epsilon", " ", "ABC"),
        ("kvldp_device_privacy_spent_epsilon_upper_bound", f", {UPPER_BOUND_LEGEND} ", "DEF"),
    ):
        queries += [
            _query(
                f"sum by (collection) ({name}_sum{{{SEL}}}) / sum by (collection) ({name}_count{{{SEL}}})",
                f"mean{label}{{{{collection}}}}",
                mean,
            ),
            _query(
                f"histogram_quantile(0.5, sum by (collection, le) ({name}_bucket{{{SEL}}}))",
                f"median{label}{{{{collection}}}}",
                median,
            ),
            _query(
                f"histogram_quantile(1, sum by (collection, le) ({name}_bucket{{{SEL}}}))",
                f"max (bucket bound){label}{{{{collection}}}}",
                top,
            ),
        ]
    return queries


def _operations_panels() -> list[Builder[Panel]]:
    """Duplicates, topic resets and checkpoints; the privacy budget and what devices
    have spent of it."""
    return [
        _panel(
            timeseries.Panel(),
            12,
            "Duplicates dropped and topic resets",
            (0, 43, 8, 7),
            "Resent reports counted once thanks to their report ids; input partitions found reset "
            "(a broker that lost its data, a recreated topic) — see docs/reliability.md.",
            [
                _query(
                    f"sum by (collection) (increase(kvldp_duplicates_total{{{SEL}}}[5m]))",
                    "duplicates/5m {{collection}}",
                    "A",
                ),
                _query(
                    f"sum by (collection) (kvldp_topic_resets_total{{{SEL}}})", "resets {{collection}}", "B"
                ),
            ],
        ),
        _panel(
            timeseries.Panel(),
            13,
            "Checkpoints",
            (8, 43, 8, 7),
            "Seconds per checkpoint (file or state-topic snapshot), and since the last one: what a "
            "crash would make the aggregator re-read.",
            [
                _query(
                    "histogram_quantile(0.9, sum by (collection, le) "
                    f"(rate(kvldp_checkpoint_duration_seconds_bucket{{{SEL}}}[5m])))",
                    "p90 duration {{collection}}",
                    "A",
                ),
                _query(
                    f"time() - max by (collection) (kvldp_last_checkpoint_timestamp_seconds{{{SEL}}})",
                    "age {{collection}}",
                    "B",
                ),
            ],
            "s",
        ),
        _panel(
            stat.Panel(),
            14,
            "Privacy budget per device and window (ε)",
            (16, 43, 8, 7),
            "ε x max_reports_per_device: the most a device can spend per budget window "
            "(collections with a budget ledger).",
            [_query(f"kvldp_privacy_budget_epsilon{{{SEL}}}", "{{collection}}", "A")],
        ).reduce_options(_last_value()),
        _panel(
            timeseries.Panel(),
            15,
            "Privacy spent per device (ε)",
            (0, 50, 24, 8),
            "Epsilon each device has spent on the collection, as the server counts it: per-report ε "
            "x reports (memoized collections: x distinct reports; PrivKVM: the costs of the rounds it "
            "reported in). Collections with a [privacy] table, and interactive ones. The buckets are whole "
            "multiples of ε (PrivKVM: the cumulative costs of rounds 1, 2, ..., c); the median is "
            "interpolated inside them and the max is the upper bound of the highest occupied one. "
            "Collections with instantaneous_epsilon (every send randomized again) show only the series "
            f'labelled "{UPPER_BOUND_LEGEND}": the server cannot tell the states of a device apart there, '
            "so it counts reports x the per-send bound c, never below what the device revealed and "
            "often far above it (the device's own ledger keeps the true spend; see docs/privacy.md).",
            _spent_queries(),
        ),
    ]


def _round_panels() -> list[Builder[Panel]]:
    """PrivKVM's rounds (interactive collections): the open round, the reports of each
    round and the means each closed round published."""
    return [
        _panel(
            stat.Panel(),
            16,
            "PrivKVM round (open round; once complete, the rounds run)",
            (0, 58, 6, 9),
            "Interactive collections: the round the aggregator has open (1-based) and whether the last "
            "round closed. A round closes once it holds round_min_reports reports and round_period "
            "has passed; the means it yields are published on kvldp.<name>.control.",
            [
                _query(f"kvldp_round{{{SEL}}}", "{{collection}} round", "A", instant=True),
                _query(
                    f"kvldp_rounds_complete{{{SEL}}}", "{{collection}} complete (1 = yes)", "B", instant=True
                ),
            ],
        )
        .reduce_options(_last_value())
        .text_mode(BigValueTextMode.VALUE_AND_NAME),
        _horizontal_bars(
            _panel(
                bargauge.Panel(),
                17,
                "PrivKVM reports per round",
                (6, 58, 18, 9),
                "Reports folded in each round so far (kvldp_round_reports); each device reports at most "
                "once per round.",
                [
                    _query(
                        f"kvldp_round_reports{{{SEL}}}", "{{collection}} round {{round}}", "A", instant=True
                    )
                ],
            )
        ),
        _panel(
            table.Panel(),
            18,
            "PrivKVM means published per round",
            (0, 67, 24, 10),
            "Rows: collection and key; columns: rounds. The mean m(r) published when round r closed, "
            "in the collection's units (kvldp_round_mean): non-holders perturb it in the next round, "
            "so the means converge round by round.",
            [
                _query(
                    f'label_join(kvldp_round_mean{{{SEL}}}, "series", " ", "collection", "key")',
                    "",
                    "A",
                    instant=True,
                    as_table=True,
                )
            ],
        ).with_transformation(
            DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"rowField": "series", "columnField": "round", "valueField": "Value"},
            )
        ),
    ]


def _untrusted_panels() -> list[Builder[Panel]]:
    """What untrusted devices can do to the estimates: poisoning scores, red from the
    alert's threshold on (docs/detection.md), and devices with implausible reports."""
    return [
        _panel(
            timeseries.Panel(),
            19,
            "Poisoning score per window (keys and population)",
            (0, 77, 12, 9),
            "The largest poisoning score of each window after each refit (docs/detection.md): "
            "-log10 of the Bonferroni-corrected p-value of the most violated test (a state count "
            "below 0, a population count below 0, the newest window's jump). A genuine population "
            f"reaches s in at most 10^-s of a window's refits; the alert fires at {ALERT_SCORE:g}. "
            "Key-value collections only.",
            [
                _query(
                    "max by (collection, window) "
                    f'({{__name__=~"kvldp_poisoning_score|kvldp_poisoning_population_score", {SEL}}})',
                    "{{collection}} {{window}}",
                    "A",
                )
            ],
        )
        .thresholds(_alert_thresholds())
        .thresholds_style(GraphThresholdsStyleConfig().mode(GraphThresholdsStyleMode.LINE)),
        _horizontal_bars(
            _panel(
                bargauge.Panel(),
                20,
                "Poisoning score per key",
                (12, 77, 12, 9),
                "Each key's poisoning score in the selected window (kvldp_poisoning_score; the tests "
                "use the unbiased basis whatever the estimator): red keys have statistics no genuine "
                "population gives them, or jumped in the newest window. Key-value collections only.",
                [
                    _query(
                        f'kvldp_poisoning_score{{{SEL}, window="$window"}}',
                        "{{collection}} {{key}}",
                        "A",
                        instant=True,
                    )
                ],
            )
        ).thresholds(_alert_thresholds()),
        _panel(
            timeseries.Panel(),
            21,
            "Devices with implausible reports",
            (0, 86, 24, 7),
            "Devices that sent at least one report no input makes plausible (kvldp_implausible_devices; "
            "docs/plausibility.md) and the rate of such reports. A genuine client's report is refused "
            "with probability at most 1e-6, so any sustained count means reports are written by hand.",
            [
                _query(f"kvldp_implausible_devices{{{SEL}}}", "{{collection}} devices", "A"),
                _query(
                    f'sum by (collection) (rate(kvldp_reports_rejected_total{{{SEL}, reason="implausible_report"}}[5m]))',
                    "{{collection}} refused reports/s",
                    "B",
                ),
            ],
        ),
    ]


def _gateway_panels(y: int) -> list[Builder[Panel]]:
    """The ingestion gateway's row (``kvldp gateway``, docs/gateway.md), from ``y`` down:
    requests, latency, bytes and produce errors per collection; then every service's
    view of Kafka."""
    return [
        _panel(
            timeseries.Panel(),
            22,
            "Gateway requests per second, by collection and status",
            (0, y, 12, 8),
            "HTTP requests the gateways answered (kvldp_gateway_requests_total): 202 accepted, 4xx "
            "refused for good (docs/gateway.md lists the codes), 429 rate-limited devices, 503 Kafka "
            "not acknowledging. Requests outside a known collection have an empty collection.",
            [
                _query(
                    f"sum by (collection, status) (rate(kvldp_gateway_requests_total{{{SEL}}}[1m]))",
                    "{{collection}} {{status}}",
                    "A",
                )
            ],
            "reqps",
        ),
        _panel(
            timeseries.Panel(),
            23,
            "Gateway latency (p50, p99)",
            (12, y, 12, 8),
            "Seconds from a complete request head to the answer (kvldp_gateway_request_seconds), "
            "which for a 202 includes Kafka's acknowledgement (acks=all).",
            [
                _query(
                    f"histogram_quantile({q}, sum by (collection, le) "
                    f"(rate(kvldp_gateway_request_seconds_bucket{{{SEL}}}[5m])))",
                    f"p{round(q * 100)} {{{{collection}}}}",
                    ref,
                )
                for q, ref in ((0.5, "A"), (0.99, "B"))
            ],
            "s",
        ),
        _panel(
            timeseries.Panel(),
            24,
            "Gateway report bytes received per second",
            (0, y + 8, 12, 7),
            "Report body bytes the gateways received (kvldp_gateway_request_bytes_total).",
            [
                _query(
                    f"sum by (collection) (rate(kvldp_gateway_request_bytes_total{{{SEL}}}[1m]))",
                    "{{collection}}",
                    "A",
                )
            ],
            "Bps",
        ),
        _panel(
            timeseries.Panel(),
            25,
            "Gateway produce errors per second",
            (12, y + 8, 12, 7),
            "Report bodies Kafka did not acknowledge within the produce timeout, answered 503 "
            "(kvldp_gateway_produce_errors_total); the alert KvldpGatewayProduceErrors fires when "
            "they last.",
            [
                _query(
                    f"sum by (collection) (rate(kvldp_gateway_produce_errors_total{{{SEL}}}[5m]))",
                    "{{collection}}",
                    "A",
                )
            ],
            "reqps",
        ),
        _panel(
            timeseries.Panel(),
            26,
            "Kafka reachable, by service",
            (0, y + 15, 24, 6),
            "1 while a broker of the Kafka cluster answers the service (aggregator, worker, exporter, "
            "gateway), 0 once none has for 3 s (kvldp_kafka_reachable; docs/reliability.md, When "
            "Kafka goes away); the alert KvldpKafkaUnreachable fires after a minute at 0.",
            [_query("min by (job, instance) (kvldp_kafka_reachable)", "{{job}} {{instance}}", "A")],
        ),
    ]


def _variable(name: str, query: str, multi: bool) -> QueryVariable:
    """A template variable whose values a Prometheus query lists (sorted, asked again
    when the time range changes); a multi-value one has "All", matching any value."""
    variable = (
        QueryVariable(name)
        .label(name)
        .datasource(_SOURCE)
        .query({"query": query, "refId": f"var-{name}"})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(multi)
    )
    return variable.all_value(".*") if multi else variable


def build() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model, in plain JSON types."""
    board = (
        Dashboard("kvldp — key-value telemetry under local differential privacy")
        .uid("kvldp")
        .tags(["kvldp", "ldp"])
        .timezone(TimeZoneBrowser)
        .version(1)
        .refresh("10s")
        .time("now-1h", "now")
        .editable()
        .variables(
            [
                _variable("collection", "label_values(kvldp_reports_total, collection)", multi=True),
                _variable("window", f"label_values(kvldp_frequency{{{SEL}}}, window)", multi=False),
                _variable("estimator", f"label_values(kvldp_frequency{{{SEL}}}, estimator)", multi=False),
            ]
        )
    )
    for panel in (
        *_ingestion_panels(),
        *_estimate_panels(),
        *_operations_panels(),
        *_round_panels(),
        *_untrusted_panels(),
        *_gateway_panels(93),
    ):
        board = board.with_panel(panel)
    model: dict[str, Any] = json.loads(JSONEncoder().encode(board.build()))
    # Grafana's variable editor lists a query variable by its ``definition``, which it
    # writes on save; the dashboard schema, and so the SDK's model, has no such field
    for variable in model["templating"]["list"]:
        variable["definition"] = variable["query"]["query"]
    return model


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvldp.dashboard", description="Write kvldp's Grafana dashboard (JSON)."
    )
    parser.add_argument("--out", metavar="FILE", type=Path, help="write here (default: standard output)")
    args = parser.parse_args(argv)
    if args.out is None:
        sys.stdout.write(render())
        return 0
    try:
        args.out.write_text(render(), encoding="utf-8")
    except OSError as exc:
        print(f"python -m kvldp.dashboard: error: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
