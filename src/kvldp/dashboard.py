"""The Grafana dashboard, as code: ``python -m kvldp.dashboard --out FILE`` writes it
(to standard output without ``--out``); ``make dashboard`` writes the repository's
``deploy/grafana/dashboards/kvldp.json``. The test suite checks the committed file is
what this module builds, and runs every PromQL expression in it against a real
Prometheus scraping real aggregators.

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
from typing import Any

from kvldp.common.poisoning import ALERT_SCORE

DATASOURCE = {"type": "prometheus", "uid": "kvldp-prometheus"}
SEL = 'collection=~"$collection"'
EST = f'{SEL}, window="$window", estimator="$estimator"'


def _target(expr: str, legend: str, ref: str, instant: bool = False, table: bool = False) -> dict[str, Any]:
    target: dict[str, Any] = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}
    if instant:
        target["instant"] = True
        target["range"] = False
    if table:
        target["format"] = "table"
    return target


def _panel(
    pid: int,
    title: str,
    kind: str,
    grid: tuple[int, int, int, int],
    targets: list[dict[str, Any]],
    description: str,
    unit: str = "short",
    options: dict[str, Any] | None = None,
    transformations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    x, y, w, h = grid
    panel: dict[str, Any] = {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": options or {},
    }
    if transformations:
        panel["transformations"] = transformations
    return panel


#: the legend of the spent-epsilon panel's series read from the upper-bound histogram
UPPER_BOUND_LEGEND = "upper bound (instantaneous randomization)"


def _spent_upper_bound_targets() -> list[dict[str, Any]]:
    """The spent-epsilon panel's mean, median and max of
    ``kvldp_device_privacy_spent_epsilon_upper_bound``, the histogram collections with
    ``instantaneous_epsilon`` export in place of ``kvldp_device_privacy_spent_epsilon``."""
    name = "kvldp_device_privacy_spent_epsilon_upper_bound"
    return [
        _target(
            f"sum by (collection) ({name}_sum{{{SEL}}}) / sum by (collection) ({name}_count{{{SEL}}})",
            f"mean, {UPPER_BOUND_LEGEND} {{{{collection}}}}",
            "D",
        ),
        _target(
            f"histogram_quantile(0.5, sum by (collection, le) ({name}_bucket{{{SEL}}}))",
            f"median, {UPPER_BOUND_LEGEND} {{{{collection}}}}",
            "E",
        ),
        _target(
            f"histogram_quantile(1, sum by (collection, le) ({name}_bucket{{{SEL}}}))",
            f"max (bucket bound), {UPPER_BOUND_LEGEND} {{{{collection}}}}",
            "F",
        ),
    ]


def _alert_line(panel: dict[str, Any]) -> dict[str, Any]:
    """Colour ``panel``'s values red from the poisoning alert's threshold on (a time series
    draws it as a line)."""
    defaults = panel["fieldConfig"]["defaults"]
    defaults["thresholds"] = {
        "mode": "absolute",
        "steps": [{"color": "green", "value": None}, {"color": "red", "value": ALERT_SCORE}],
    }
    if panel["type"] == "timeseries":
        defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
    return panel


def _variable(name: str, query: str, multi: bool) -> dict[str, Any]:
    variable: dict[str, Any] = {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"var-{name}"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
    }
    if multi:
        variable["allValue"] = ".*"
    return variable


def _gateway_panels(y: int) -> list[dict[str, Any]]:
    """The ingestion gateway's row (``kvldp gateway``, docs/gateway.md): requests, latency,
    bytes and produce errors per collection; then every service's view of Kafka."""
    return [
        _panel(
            22,
            "Gateway requests per second, by collection and status",
            "timeseries",
            (0, y, 12, 8),
            [
                _target(
                    f"sum by (collection, status) (rate(kvldp_gateway_requests_total{{{SEL}}}[1m]))",
                    "{{collection}} {{status}}",
                    "A",
                )
            ],
            "HTTP requests the gateways answered (kvldp_gateway_requests_total): 202 accepted, 4xx "
            "refused for good (docs/gateway.md lists the codes), 429 rate-limited devices, 503 Kafka "
            "not acknowledging. Requests outside a known collection have an empty collection.",
            "reqps",
        ),
        _panel(
            23,
            "Gateway latency (p50, p99)",
            "timeseries",
            (12, y, 12, 8),
            [
                _target(
                    f"histogram_quantile({q}, sum by (collection, le) "
                    f"(rate(kvldp_gateway_request_seconds_bucket{{{SEL}}}[5m])))",
                    f"p{round(q * 100)} {{{{collection}}}}",
                    ref,
                )
                for q, ref in ((0.5, "A"), (0.99, "B"))
            ],
            "Seconds from a complete request head to the answer (kvldp_gateway_request_seconds), "
            "which for a 202 includes Kafka's acknowledgement (acks=all).",
            "s",
        ),
        _panel(
            24,
            "Gateway report bytes received per second",
            "timeseries",
            (0, y + 8, 12, 7),
            [
                _target(
                    f"sum by (collection) (rate(kvldp_gateway_request_bytes_total{{{SEL}}}[1m]))",
                    "{{collection}}",
                    "A",
                )
            ],
            "Report body bytes the gateways received (kvldp_gateway_request_bytes_total).",
            "Bps",
        ),
        _panel(
            25,
            "Gateway produce errors per second",
            "timeseries",
            (12, y + 8, 12, 7),
            [
                _target(
                    f"sum by (collection) (rate(kvldp_gateway_produce_errors_total{{{SEL}}}[5m]))",
                    "{{collection}}",
                    "A",
                )
            ],
            "Report bodies Kafka did not acknowledge within the produce timeout, answered 503 "
            "(kvldp_gateway_produce_errors_total); the alert KvldpGatewayProduceErrors fires when "
            "they last.",
            "reqps",
        ),
        _panel(
            26,
            "Kafka reachable, by service",
            "timeseries",
            (0, y + 15, 24, 6),
            [_target("min by (job, instance) (kvldp_kafka_reachable)", "{{job}} {{instance}}", "A")],
            "1 while a broker of the Kafka cluster answers the service (aggregator, worker, exporter, "
            "gateway), 0 once none has for 3 s (kvldp_kafka_reachable; docs/reliability.md, When "
            "Kafka goes away); the alert KvldpKafkaUnreachable fires after a minute at 0.",
            "short",
        ),
    ]


def build() -> dict[str, Any]:
    merge = [{"id": "merge", "options": {}}]
    panels = [
        _panel(
            1,
            "Reports folded per second",
            "timeseries",
            (0, 0, 8, 7),
            [_target(f"sum by (collection) (rate(kvldp_reports_total{{{SEL}}}[1m]))", "{{collection}}", "A")],
            "Reports folded into the statistics (kvldp_reports_total).",
            "reqps",
        ),
        _panel(
            2,
            "Rejected per second, by reason",
            "timeseries",
            (8, 0, 8, 7),
            [
                _target(
                    f"sum by (collection, reason) (rate(kvldp_reports_rejected_total{{{SEL}}}[5m]))",
                    "{{collection}} {{reason}}",
                    "A",
                )
            ],
            "Messages sent to the dead-letter topic (kvldp_reports_rejected_total).",
            "reqps",
        ),
        _panel(
            3,
            "Consumer lag",
            "timeseries",
            (16, 0, 8, 7),
            [_target(f"sum by (collection) (kvldp_consumer_lag_messages{{{SEL}}})", "{{collection}}", "A")],
            "Records in the reports topic not yet folded.",
        ),
        _panel(
            4,
            "Refit duration",
            "timeseries",
            (0, 7, 8, 7),
            [
                _target(
                    "histogram_quantile(0.9, sum by (collection, le) "
                    f"(rate(kvldp_refit_duration_seconds_bucket{{{SEL}}}[5m])))",
                    "p90 {{collection}}",
                    "A",
                ),
                _target(
                    f"sum by (collection) (rate(kvldp_refit_duration_seconds_sum{{{SEL}}}[5m])) / "
                    f"sum by (collection) (rate(kvldp_refit_duration_seconds_count{{{SEL}}}[5m]))",
                    "mean {{collection}}",
                    "B",
                ),
            ],
            "Seconds per refit of all windows and estimators.",
            "s",
        ),
        _panel(
            5,
            "Seconds since the last refit",
            "stat",
            (8, 7, 8, 7),
            [_target(f"time() - kvldp_last_refit_timestamp_seconds{{{SEL}}}", "{{collection}}", "A")],
            "Age of the estimates on display.",
            "s",
            {"reduceOptions": {"calcs": ["lastNotNull"]}},
        ),
        _panel(
            6,
            "EM iterations",
            "timeseries",
            (16, 7, 8, 7),
            [_target(f'kvldp_em_iterations{{{SEL}, window="$window"}}', "{{collection}}", "A")],
            "Iterations of the last EM refit (warm-started).",
        ),
        _panel(
            7,
            "Top keys by estimated frequency",
            "bargauge",
            (0, 14, 12, 10),
            [_target(f"topk(20, kvldp_frequency{{{EST}}})", "{{key}}", "A", instant=True)],
            "Fraction of devices holding each key (kvldp_frequency).",
            "percentunit",
            {
                "orientation": "horizontal",
                "displayMode": "gradient",
                "reduceOptions": {"calcs": ["lastNotNull"]},
            },
        ),
        _panel(
            8,
            "Frequency, standard error and 95% interval",
            "table",
            (12, 14, 12, 10),
            [
                _target(f"kvldp_frequency{{{EST}}}", "", "A", instant=True, table=True),
                _target(f"kvldp_frequency_stderr{{{EST}}}", "", "B", instant=True, table=True),
                _target(f"kvldp_frequency_low{{{EST}}}", "", "C", instant=True, table=True),
                _target(f"kvldp_frequency_high{{{EST}}}", "", "D", instant=True, table=True),
            ],
            "Value #A is the estimate, Value #B its standard error (none for eb), "
            "Value #C and #D the ends of its 95% interval.",
            "percentunit",
            transformations=merge,
        ),
        _panel(
            9,
            "Mean per key with its 95% interval",
            "timeseries",
            (0, 24, 24, 9),
            [
                _target(f"kvldp_mean{{{EST}}}", "{{key}}", "A"),
                _target(f"kvldp_mean_high{{{EST}}}", "{{key}} high", "B"),
                _target(f"kvldp_mean_low{{{EST}}}", "{{key}} low", "C"),
            ],
            "Mean value among the key's holders, in the collection's units, with its 95% interval "
            "(which covers the truth even where the estimate is clipped or shrunk). A key whose mean "
            "is not estimable has no line: see kvldp_means_not_estimable.",
        ),
        _panel(
            10,
            "Conditional frequency f(key | condition)",
            "table",
            (0, 33, 12, 10),
            [
                _target(f"kvldp_conditional_frequency{{{EST}}}", "", "A", instant=True, table=True),
                _target(f"kvldp_conditional_frequency_stderr{{{EST}}}", "", "B", instant=True, table=True),
            ],
            "Rows: target key and condition (joint-state collections); A estimate, B standard error.",
            "percentunit",
            transformations=merge,
        ),
        _panel(
            11,
            "Conditional mean m(key | condition)",
            "table",
            (12, 33, 12, 10),
            [
                _target(f"kvldp_conditional_mean{{{EST}}}", "", "A", instant=True, table=True),
                _target(f"kvldp_conditional_mean_stderr{{{EST}}}", "", "B", instant=True, table=True),
            ],
            "Mean of the key among devices meeting the condition; A estimate, B standard error.",
            transformations=merge,
        ),
        _panel(
            12,
            "Duplicates dropped and topic resets",
            "timeseries",
            (0, 43, 8, 7),
            [
                _target(
                    f"sum by (collection) (increase(kvldp_duplicates_total{{{SEL}}}[5m]))",
                    "duplicates/5m {{collection}}",
                    "A",
                ),
                _target(
                    f"sum by (collection) (kvldp_topic_resets_total{{{SEL}}})", "resets {{collection}}", "B"
                ),
            ],
            "Resent reports counted once thanks to their report ids; input partitions found reset "
            "(a broker that lost its data, a recreated topic) — see docs/reliability.md.",
        ),
        _panel(
            13,
            "Checkpoints",
            "timeseries",
            (8, 43, 8, 7),
            [
                _target(
                    "histogram_quantile(0.9, sum by (collection, le) "
                    f"(rate(kvldp_checkpoint_duration_seconds_bucket{{{SEL}}}[5m])))",
                    "p90 duration {{collection}}",
                    "A",
                ),
                _target(
                    f"time() - max by (collection) (kvldp_last_checkpoint_timestamp_seconds{{{SEL}}})",
                    "age {{collection}}",
                    "B",
                ),
            ],
            "Seconds per checkpoint (file or state-topic snapshot), and since the last one: what a "
            "crash would make the aggregator re-read.",
            "s",
        ),
        _panel(
            14,
            "Privacy budget per device and window (ε)",
            "stat",
            (16, 43, 8, 7),
            [_target(f"kvldp_privacy_budget_epsilon{{{SEL}}}", "{{collection}}", "A")],
            "ε x max_reports_per_device: the most a device can spend per budget window "
            "(collections with a budget ledger).",
            "short",
            {"reduceOptions": {"calcs": ["lastNotNull"]}},
        ),
        _panel(
            15,
            "Privacy spent per device (ε)",
            "timeseries",
            (0, 50, 24, 8),
            [
                _target(
                    f"sum by (collection) (kvldp_device_privacy_spent_epsilon_sum{{{SEL}}}) / "
                    f"sum by (collection) (kvldp_device_privacy_spent_epsilon_count{{{SEL}}})",
                    "mean {{collection}}",
                    "A",
                ),
                _target(
                    "histogram_quantile(0.5, sum by (collection, le) "
                    f"(kvldp_device_privacy_spent_epsilon_bucket{{{SEL}}}))",
                    "median {{collection}}",
                    "B",
                ),
                _target(
                    "histogram_quantile(1, sum by (collection, le) "
                    f"(kvldp_device_privacy_spent_epsilon_bucket{{{SEL}}}))",
                    "max (bucket bound) {{collection}}",
                    "C",
                ),
                *_spent_upper_bound_targets(),
            ],
            "Epsilon each device has spent on the collection, as the server counts it: per-report ε "
            "x reports (memoized collections: x distinct reports; PrivKVM: the costs of the rounds it "
            "reported in). Collections with a [privacy] table, and interactive ones. The buckets are whole "
            "multiples of ε (PrivKVM: the cumulative costs of rounds 1, 2, ..., c); the median is "
            "interpolated inside them and the max is the upper bound of the highest occupied one. "
            "Collections with instantaneous_epsilon (every send randomized again) show only the series "
            f'labelled "{UPPER_BOUND_LEGEND}": the server cannot tell the states of a device apart there, '
            "so it counts reports x the per-send bound c, never below what the device revealed and "
            "often far above it (the device's own ledger keeps the true spend; see docs/privacy.md).",
            "short",
        ),
        _panel(
            16,
            "PrivKVM round (open round; once complete, the rounds run)",
            "stat",
            (0, 58, 6, 9),
            [
                _target(f"kvldp_round{{{SEL}}}", "{{collection}} round", "A", instant=True),
                _target(
                    f"kvldp_rounds_complete{{{SEL}}}", "{{collection}} complete (1 = yes)", "B", instant=True
                ),
            ],
            "Interactive collections: the round the aggregator has open (1-based) and whether the last "
            "round closed. A round closes once it holds round_min_reports reports and round_period "
            "has passed; the means it yields are published on kvldp.<name>.control.",
            "short",
            {"reduceOptions": {"calcs": ["lastNotNull"]}, "textMode": "value_and_name"},
        ),
        _panel(
            17,
            "PrivKVM reports per round",
            "bargauge",
            (6, 58, 18, 9),
            [_target(f"kvldp_round_reports{{{SEL}}}", "{{collection}} round {{round}}", "A", instant=True)],
            "Reports folded in each round so far (kvldp_round_reports); each device reports at most "
            "once per round.",
            "short",
            {
                "orientation": "horizontal",
                "displayMode": "gradient",
                "reduceOptions": {"calcs": ["lastNotNull"]},
            },
        ),
        _panel(
            18,
            "PrivKVM means published per round",
            "table",
            (0, 67, 24, 10),
            [
                _target(
                    f'label_join(kvldp_round_mean{{{SEL}}}, "series", " ", "collection", "key")',
                    "",
                    "A",
                    instant=True,
                    table=True,
                )
            ],
            "Rows: collection and key; columns: rounds. The mean m(r) published when round r closed, "
            "in the collection's units (kvldp_round_mean): non-holders perturb it in the next round, "
            "so the means converge round by round.",
            transformations=[
                {
                    "id": "groupingToMatrix",
                    "options": {"rowField": "series", "columnField": "round", "valueField": "Value"},
                }
            ],
        ),
        _alert_line(
            _panel(
                19,
                "Poisoning score per window (keys and population)",
                "timeseries",
                (0, 77, 12, 9),
                [
                    _target(
                        "max by (collection, window) "
                        f'({{__name__=~"kvldp_poisoning_score|kvldp_poisoning_population_score", {SEL}}})',
                        "{{collection}} {{window}}",
                        "A",
                    )
                ],
                "The largest poisoning score of each window after each refit (docs/detection.md): "
                "-log10 of the Bonferroni-corrected p-value of the most violated test (a state count "
                "below 0, a population count below 0, the newest window's jump). A genuine population "
                f"reaches s in at most 10^-s of a window's refits; the alert fires at {ALERT_SCORE:g}. "
                "Key-value collections only.",
            )
        ),
        _alert_line(
            _panel(
                20,
                "Poisoning score per key",
                "bargauge",
                (12, 77, 12, 9),
                [
                    _target(
                        f'kvldp_poisoning_score{{{SEL}, window="$window"}}',
                        "{{collection}} {{key}}",
                        "A",
                        instant=True,
                    )
                ],
                "Each key's poisoning score in the selected window (kvldp_poisoning_score; the tests "
                "use the unbiased basis whatever the estimator): red keys have statistics no genuine "
                "population gives them, or jumped in the newest window. Key-value collections only.",
                "short",
                {
                    "orientation": "horizontal",
                    "displayMode": "gradient",
                    "reduceOptions": {"calcs": ["lastNotNull"]},
                },
            )
        ),
        _panel(
            21,
            "Devices with implausible reports",
            "timeseries",
            (0, 86, 24, 7),
            [
                _target(f"kvldp_implausible_devices{{{SEL}}}", "{{collection}} devices", "A"),
                _target(
                    f'sum by (collection) (rate(kvldp_reports_rejected_total{{{SEL}, reason="implausible_report"}}[5m]))',
                    "{{collection}} refused reports/s",
                    "B",
                ),
            ],
            "Devices that sent at least one report no input makes plausible (kvldp_implausible_devices; "
            "docs/plausibility.md) and the rate of such reports. A genuine client's report is refused "
            "with probability at most 1e-6, so any sustained count means reports are written by hand.",
        ),
        *_gateway_panels(93),
    ]
    return {
        "uid": "kvldp",
        "title": "kvldp — key-value telemetry under local differential privacy",
        "tags": ["kvldp", "ldp"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "editable": True,
        "templating": {
            "list": [
                _variable("collection", "label_values(kvldp_reports_total, collection)", multi=True),
                _variable("window", f"label_values(kvldp_frequency{{{SEL}}}, window)", multi=False),
                _variable("estimator", f"label_values(kvldp_frequency{{{SEL}}}, estimator)", multi=False),
            ]
        },
        "panels": panels,
    }


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
