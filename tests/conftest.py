"""Fixtures: one embedded Tansu broker per test session, on an ephemeral loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvldp.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(0) as running:
        yield running
