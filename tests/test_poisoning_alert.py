"""The deploy stack's poisoning alerts: promtool accepts the rules, its rule unit tests
fire them at the alert score and not below, the threshold is
:data:`kvldp.common.untrusted.poisoning.ALERT_SCORE`, and Prometheus of the compose stack loads the
rules file from where it is mounted."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

from kvldp.common.untrusted.poisoning import ALERT_SCORE

from support.deploy import COMPOSE, DEPLOY
from support.promtool import check_rules

RULES = DEPLOY / "prometheus" / "rules" / "kvldp-poisoning.yml"


def test_threshold_is_the_alert_score() -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {"KvldpKeyPoisoningSuspected", "KvldpPopulationPoisoningSuspected"}
    for rule in rules:
        threshold = re.fullmatch(r".*>= *([0-9.]+)", rule["expr"])
        assert threshold and float(threshold.group(1)) == ALERT_SCORE, rule["expr"]


def test_promtool_accepts_the_rules(promtool: str) -> None:
    check_rules(promtool, RULES)


def test_alerts_fire_at_the_alert_score_and_not_below(promtool: str, tmp_path: Path) -> None:
    """Two keys, one at ALERT_SCORE from minute 2 on, one just below; a population score
    crossing it: promtool's rule unit test says which alerts fire when."""
    key = 'kvldp_poisoning_score{collection="c",key="%s",estimator="unbiased",window="1m"}'
    pop = 'kvldp_poisoning_population_score{collection="c",estimator="unbiased",window="all"}'
    below = ALERT_SCORE - 0.01
    tests = {
        "rule_files": [str(RULES.resolve())],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": key % "bad", "values": f"0 0 {ALERT_SCORE} {ALERT_SCORE}"},
                    {"series": key % "fine", "values": f"{below} {below} {below} {below}"},
                    {"series": pop, "values": f"0 1 2 {ALERT_SCORE + 5}"},
                ],
                "alert_rule_test": [
                    {"eval_time": "1m", "alertname": "KvldpKeyPoisoningSuspected", "exp_alerts": []},
                    {
                        "eval_time": "2m",
                        "alertname": "KvldpKeyPoisoningSuspected",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "collection": "c",
                                    "window": "1m",
                                    "key": "bad",
                                },
                                "exp_annotations": {
                                    "summary": "c: key bad looks poisoned in window 1m",
                                    "description": (
                                        f"Poisoning score {ALERT_SCORE:.1f} (alert at 3): the statistics of key "
                                        "bad are inconsistent with every genuine population (a state count "
                                        "significantly below 0) or jumped in the newest window. A genuine "
                                        "population does this in at most 1 refit in 1000. See docs/detection.md."
                                    ),
                                },
                            }
                        ],
                    },
                    {"eval_time": "2m", "alertname": "KvldpPopulationPoisoningSuspected", "exp_alerts": []},
                    {
                        "eval_time": "3m",
                        "alertname": "KvldpPopulationPoisoningSuspected",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "collection": "c", "window": "all"},
                                "exp_annotations": {
                                    "summary": "c: population counts look poisoned in window all",
                                    "description": (
                                        f"Population poisoning score {ALERT_SCORE + 5:.1f} (alert at 3): a "
                                        "count that every genuine population keeps >= 0 (PCKV's padded share "
                                        "or its complement) is significantly below 0, as reports with more or "
                                        "fewer set bits than genuine ones make it. See docs/detection.md."
                                    ),
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "poisoning-test.yml"
    path.write_text(json.dumps(tests))  # JSON is YAML
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_compose_prometheus_loads_the_rules() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    volumes = COMPOSE["services"]["prometheus"]["volumes"]
    mounts = dict(v.rsplit(":", 2)[:2] for v in volumes if v.count(":") >= 1)
    inside = mounts["./prometheus/rules"]
    assert config["rule_files"] == [f"{inside}/*.yml"]
    assert RULES.parent == DEPLOY / "prometheus" / "rules"
