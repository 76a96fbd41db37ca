"""The device SDK behaves as the README's SDK sections say: a Kafka that does not answer
is one kvldp error naming its address, and the collector's ``clock`` steps a device
through report periods without waiting for them."""

from __future__ import annotations

import pytest

from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.errors import KvldpError
from kvldp.producer import Collector, KafkaUnreachable, ReportStatus

pytestmark = pytest.mark.asyncio


async def test_an_unreachable_kafka_is_one_error_naming_its_address() -> None:
    collection = parse_collection(
        {"name": "phones", "mechanism": "kvue", "epsilon": 1.0, "keys": ["a"], "value_range": [0.0, 1.0]}
    )
    collector = Collector(collection, bootstrap_servers="127.0.0.1:1")
    with pytest.raises(KafkaUnreachable) as caught:
        await collector.start()
    assert isinstance(caught.value, KvldpError)
    assert str(caught.value) == (
        "cannot reach Kafka at 127.0.0.1:1 (PLAINTEXT): no broker answered (is it running, is the "
        "address right?)"
    )


async def test_a_clock_of_ones_own_steps_through_report_periods(broker: EmbeddedBroker) -> None:
    collection = parse_collection(
        {
            "name": "memo-clock",
            "mechanism": "kvue",
            "epsilon": 1.0,
            "keys": ["a", "b"],
            "value_range": [0.0, 10.0],
            "privacy": {"memoize": True, "report_period": "1h"},
        }
    )
    now = 1_700_000_000.0
    collector = Collector(collection, bootstrap_servers=broker.bootstrap_servers, clock=lambda: now)
    async with collector:
        assert await collector.report({"a": 4.0}) is ReportStatus.SENT
        assert await collector.report({"a": 4.0}) is ReportStatus.SKIPPED_PERIOD
        now += 3600
        assert await collector.report({"a": 4.0}) is ReportStatus.RESENT
    assert collector.privacy_spent() == 1.0
    assert collector.deliveries.acknowledged == collector.deliveries.handed == 2
