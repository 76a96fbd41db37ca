"""The deploy stack's Kafka alert: promtool accepts the rule, and its rule unit test fires
it for a service whose ``kvldp_kafka_reachable`` stays 0 for a minute, not for a shorter
outage. The compose Prometheus loads every file of the rules directory (checked by
test_poisoning_alert)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from support.deploy import DEPLOY
from support.promtool import run_rule_tests

RULES = DEPLOY / "prometheus" / "rules" / "kvldp-kafka.yml"
REACHABLE = 'kvldp_kafka_reachable{job="kvldp",instance="%s"}'


def test_promtool_accepts_the_rule(promtool: str) -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {"KvldpKafkaUnreachable"}
    done = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_unreachable_alerts_after_a_minute_not_for_a_blip(promtool: str, tmp_path: Path) -> None:
    """Sampled every 15 s. a: unreachable from minute 2 on; b: unreachable for 45 s at
    minute 2, then back. The alert is pending a minute, then fires for a only."""
    a = " ".join(["1"] * 8 + ["0"] * 12)
    b = " ".join(["1"] * 8 + ["0"] * 3 + ["1"] * 9)
    firing = {
        "exp_labels": {"severity": "critical", "job": "kvldp", "instance": "a"},
        "exp_annotations": {
            "summary": "a (kvldp) cannot reach Kafka",
            "description": (
                "No broker of the Kafka cluster has answered a for over a minute. Its /metrics serves "
                "the last estimates; folding, snapshots and the gateway's reports resume by themselves "
                "when the cluster answers. Check the brokers and the network between them and kvldp. "
                "See docs/reliability.md."
            ),
        },
    }
    checks = [
        {"eval_time": "2m30s", "alertname": "KvldpKafkaUnreachable", "exp_alerts": []},
        {"eval_time": "3m30s", "alertname": "KvldpKafkaUnreachable", "exp_alerts": [firing]},
    ]
    run_rule_tests(promtool, RULES, tmp_path, "15s", {REACHABLE % "a": a, REACHABLE % "b": b}, checks)
