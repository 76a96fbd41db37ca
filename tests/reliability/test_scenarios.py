"""The reliability scenarios against their oracles, at the fast scale in ``make test``
and at the full scale with ``pytest -m full tests/reliability`` (the same as
``kvldp bench reliability``). Each drives real ``kvldp aggregate`` processes against a
real broker; a scenario's checks are listed in :mod:`kvldp.reliability.scenarios`."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvldp.broker.tansu import EmbeddedBroker
from kvldp.reliability.scenarios import SCALES, run
from kvldp.reliability.scenarios.outcome import Outcome

pytestmark = pytest.mark.asyncio


async def scenario(name: str, scale: str, broker: EmbeddedBroker, workdir: Path) -> Outcome:
    outcome = await run(name, scale, workdir, broker.bootstrap_servers)
    print(outcome)  # the figures, with -s
    assert outcome.failures == [], (outcome.failures, outcome.figures)
    return outcome


async def test_sigkills_at_random_moments_lose_and_double_count_nothing(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    out = await scenario("crash_recovery", "fast", broker, tmp_path)
    assert out.figures["reports_folded"] == out.figures["oracle_reports"] == 100_000
    assert len(out.figures["folded_at_each_kill"]) == 5


async def test_workers_come_and_go_and_every_canary_counts_once(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    out = await scenario("scale_out", "fast", broker, tmp_path)
    assert {"sigkill", "sigterm", "add"} <= set(out.figures["actions"])


async def test_resent_reports_count_once_with_ids_and_twice_without(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    out = await scenario("duplicates", "fast", broker, tmp_path)
    assert out.figures["duplicates_dropped"] > 0.09 * out.figures["reports"]
    assert out.figures["late_resends_folded"] > 0  # beyond the horizon: documented as folded


async def test_ten_thousand_hostile_messages_all_dead_lettered(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    out = await scenario("hostile_input", "fast", broker, tmp_path)
    assert out.figures["hostile"] == 10_000 and out.figures["rss_growth_mb"] < 50


async def test_a_broker_that_forgets_everything_is_survived(broker: EmbeddedBroker, tmp_path: Path) -> None:
    out = await scenario("broker_restart", "fast", broker, tmp_path)  # on a broker of its own
    assert out.figures["partitions_reset"] >= 1


async def test_the_budget_ledger_survives_a_sigkill(broker: EmbeddedBroker, tmp_path: Path) -> None:
    out = await scenario("budget_ledger", "fast", broker, tmp_path)
    assert out.figures["refused"] > 0


@pytest.mark.full
@pytest.mark.parametrize("name", sorted(SCALES["full"]))
async def test_full_scale(name: str, broker: EmbeddedBroker, tmp_path: Path) -> None:
    await scenario(name, "full", broker, tmp_path)
