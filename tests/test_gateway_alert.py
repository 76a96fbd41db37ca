"""The deploy stack's gateway alerts: promtool accepts the rules, and its rule unit tests
fire the produce-error alert once errors last 3 minutes and the 5xx alert once more than
5% of answers are 5xx for 5 minutes, not for a blip or for 4xx answers. The compose
Prometheus loads the file (its rules directory is checked by test_poisoning_alert)."""

from __future__ import annotations

from pathlib import Path

import yaml

from support.deploy import DEPLOY
from support.promtool import check_rules, run_rule_tests

RULES = DEPLOY / "prometheus" / "rules" / "kvldp-gateway.yml"
REQUESTS = 'kvldp_gateway_requests_total{collection="%s",status="%s"}'
ERRORS = 'kvldp_gateway_produce_errors_total{collection="%s"}'


def test_promtool_accepts_the_rules(promtool: str) -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {"KvldpGatewayProduceErrors", "KvldpGatewayServerErrors"}
    check_rules(promtool, RULES)


def test_produce_errors_alert_once_they_last(promtool: str, tmp_path: Path) -> None:
    """Collection a: 60 errors a minute from minute 5 on; b: one error at minute 2, then
    none. The alert is pending for 3 minutes, then fires for a only."""
    a = " ".join(["0"] * 6 + [str(60 * i) for i in range(1, 10)])
    b = " ".join(["0", "0", *["1"] * 13])
    firing = {
        "exp_labels": {"severity": "critical", "collection": "a"},
        "exp_annotations": {
            "summary": "a: Kafka is not acknowledging the gateway's reports",
            "description": (
                "1.00 report bodies per second were not acknowledged by Kafka within the produce "
                "timeout, for 3 minutes now, and were answered 503. Devices retry with the same "
                "bytes; check the brokers and the gateway's /readyz. See docs/gateway.md."
            ),
        },
    }
    checks = [
        {"eval_time": "3m", "alertname": "KvldpGatewayProduceErrors", "exp_alerts": []},  # b's blip: pending
        {"eval_time": "5m", "alertname": "KvldpGatewayProduceErrors", "exp_alerts": []},  # ... and gone
        {"eval_time": "8m", "alertname": "KvldpGatewayProduceErrors", "exp_alerts": []},  # a: pending
        {"eval_time": "11m", "alertname": "KvldpGatewayProduceErrors", "exp_alerts": [firing]},
    ]
    run_rule_tests(promtool, RULES, tmp_path, "1m", {ERRORS % "a": a, ERRORS % "b": b}, checks)


def test_server_errors_alert_above_five_percent_and_not_for_4xx(promtool: str, tmp_path: Path) -> None:
    """Every collection answers 100 requests a minute with 202. a: 10 a minute with 503
    (9%) from minute 1; b: 4 a minute with 503 (under 5%); c: 50 a minute with 401."""
    ramp = lambda per_minute, start=0: " ".join(str(per_minute * max(0, i - start)) for i in range(16))  # noqa: E731
    series = {REQUESTS % (name, "202"): ramp(100) for name in ("a", "b", "c")} | {
        REQUESTS % ("a", "503"): ramp(10, 1),
        REQUESTS % ("b", "503"): ramp(4, 1),
        REQUESTS % ("c", "401"): ramp(50, 1),
    }
    checks = [
        {"eval_time": "5m", "alertname": "KvldpGatewayServerErrors", "exp_alerts": []},  # pending
        {
            "eval_time": "12m",
            "alertname": "KvldpGatewayServerErrors",
            "exp_alerts": [
                {
                    "exp_labels": {"severity": "warning", "collection": "a"},
                    "exp_annotations": {
                        "summary": "a: the gateway answers 5xx to 9.091% of requests",
                        "description": (
                            "More than 5% of the gateway's answers were 5xx for the last 5 minutes "
                            "(503: Kafka not acknowledging; 500: a fault of the gateway itself, logged "
                            "on its stderr). See docs/gateway.md."
                        ),
                    },
                }
            ],
        },
    ]
    run_rule_tests(promtool, RULES, tmp_path, "1m", series, checks)
