"""Fixtures: one embedded Tansu broker per test session, on an ephemeral loopback port
(and, for the secured-broker tests, one behind TLS, one requiring SASL, one with both),
and the time limit of the full-scale runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvldp.broker.tansu import EmbeddedBroker

from support.tls import TlsBroker, TlsFiles, make_tls_files

#: the time limit of a test marked ``full`` (full-scale runs take minutes; the default
#: limit of pyproject.toml, ``timeout``, is for the tests of make test)
FULL_TIMEOUT_S = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("full") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(FULL_TIMEOUT_S))


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(0) as running:
        yield running


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def tls_broker(tls_files: TlsFiles) -> Iterator[TlsBroker]:
    """Tansu behind stunnel: TLS only, with a certificate for 127.0.0.1 and localhost."""
    with EmbeddedBroker(0, tls_cert=tls_files.server_cert_pem, tls_key=tls_files.server_key_pem) as running:
        yield TlsBroker(running, tls_files)


@pytest.fixture(scope="session")
def sasl_broker() -> Iterator[EmbeddedBroker]:
    """Tansu requiring SASL, plain TCP: no login succeeds on this build (see kvldp.broker.tansu)."""
    with EmbeddedBroker(0, authentication=True) as running:
        yield running


@pytest.fixture(scope="session")
def sasl_tls_broker(tls_files: TlsFiles) -> Iterator[TlsBroker]:
    """Tansu requiring SASL, behind TLS (SASL_SSL): no login succeeds on this build."""
    with EmbeddedBroker(
        0,
        tls_cert=tls_files.server_cert_pem,
        tls_key=tls_files.server_key_pem,
        authentication=True,
    ) as running:
        yield TlsBroker(running, tls_files)
