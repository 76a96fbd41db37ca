"""The reliability scenarios against their oracles, at the fast scale in ``make test``
and at the full scale with ``pytest -m full tests/reliability`` (the same as
``kvldp bench reliability``). Each drives real ``kvldp aggregate`` processes against a
real broker, the session's Apache Kafka node; a scenario's checks are listed in
:mod:`kvldp.reliability.scenarios`.

``broker_restart`` stays on Tansu, on a broker of its own: it is the scenario of a broker
that forgets every topic when it restarts (the embedded broker of ``make demo`` and
``kvldp broker`` keeps its data in memory), which Apache Kafka never does. Apache
Kafka's own restart, which keeps the log, is tests/reliability/test_apache_restart.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.reliability.scenarios import SCALES, run
from kvldp.reliability.scenarios.outcome import Outcome

pytestmark = pytest.mark.asyncio


async def scenario(name: str, scale: str, bootstrap: str, workdir: Path) -> Outcome:
    outcome = await run(name, scale, workdir, bootstrap)
    print(outcome)  # the figures, with -s
    assert outcome.failures == [], (outcome.failures, outcome.figures)
    return outcome


async def test_sigkills_at_random_moments_lose_and_double_count_nothing(
    apache_kafka: ApacheKafka, tmp_path: Path
) -> None:
    out = await scenario("crash_recovery", "fast", apache_kafka.bootstrap_servers, tmp_path)
    assert out.figures["reports_folded"] == out.figures["oracle_reports"] == 50_000
    assert len(out.figures["folded_at_each_kill"]) == 4


async def test_workers_come_and_go_and_every_canary_counts_once(
    apache_kafka: ApacheKafka, tmp_path: Path
) -> None:
    out = await scenario("scale_out", "fast", apache_kafka.bootstrap_servers, tmp_path)
    assert {"sigkill", "sigterm", "add"} <= set(out.figures["actions"])


async def test_resent_reports_count_once_with_ids_and_twice_without(
    apache_kafka: ApacheKafka, tmp_path: Path
) -> None:
    out = await scenario("duplicates", "fast", apache_kafka.bootstrap_servers, tmp_path)
    assert out.figures["duplicates_dropped"] > 0.09 * out.figures["reports"]
    assert out.figures["late_resends_folded"] > 0  # beyond the horizon: documented as folded


async def test_ten_thousand_hostile_messages_all_dead_lettered(
    apache_kafka: ApacheKafka, tmp_path: Path
) -> None:
    out = await scenario("hostile_input", "fast", apache_kafka.bootstrap_servers, tmp_path)
    assert out.figures["hostile"] == 10_000 and out.figures["rss_growth_mb"] < 50


async def test_a_broker_that_forgets_everything_is_survived(tmp_path: Path) -> None:
    """On Tansu only (see the module's docstring): the scenario starts and restarts an
    embedded broker of its own."""
    out = await scenario("broker_restart", "fast", "", tmp_path)
    assert out.figures["partitions_reset"] >= 1


async def test_the_budget_ledger_survives_a_sigkill(apache_kafka: ApacheKafka, tmp_path: Path) -> None:
    out = await scenario("budget_ledger", "fast", apache_kafka.bootstrap_servers, tmp_path)
    assert out.figures["refused"] > 0


@pytest.mark.full
@pytest.mark.parametrize("name", sorted(SCALES["full"]))
async def test_full_scale(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """broker_restart brings its own (Tansu) broker; the others run on Apache Kafka."""
    bootstrap = "" if name == "broker_restart" else request.getfixturevalue("apache_kafka").bootstrap_servers
    await scenario(name, "full", bootstrap, tmp_path)
