"""Fixtures: one embedded Tansu broker per test session, on an ephemeral loopback port
(and, for the tests of Tansu's SASL refusals, one requiring SASL in plain TCP and one
behind TLS), one Apache Kafka node per test session with a plaintext and a TLS
listener, started only when a test asks for it (the jars of `make kafka`), the time
limit of the full-scale runs, and a garbage collection after each module."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from kvldp.broker.apache_kafka import ApacheKafka, KafkaTls
from kvldp.broker.tansu import EmbeddedBroker

from support.promtool import promtool_path
from support.tls import TlsBroker, TlsEndpoint, TlsFiles, make_tls_files

#: the time limit of a test marked ``full`` (full-scale runs take minutes; the default
#: limit of pyproject.toml, ``timeout``, is for the tests of make test)
FULL_TIMEOUT_S = 3600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("full") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(FULL_TIMEOUT_S))


@pytest.fixture(autouse=True, scope="module")
def _garbage_of_the_module() -> Iterator[None]:
    """Collect garbage after each module: a socket or transport its tests left open is
    then reported (an unraisable ResourceWarning, an error) on the module's last test,
    not on whichever test happens to run when the collector would otherwise find it."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus's promtool, for the deploy stack's alert rules."""
    return promtool_path()


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """Tansu, the broker of ``make demo``. Tests that ask for it check what kvldp does on
    top of any broker (estimates, privacy accounting, rounds, the gateway's answers,
    dashboards, the device SDK); where the broker's own behaviour is what a test checks
    (failures, restarts, rebalances, retention, compaction, TLS, ACLs, the gateway end to
    end, produce's exits), the test runs on Apache Kafka (``apache_kafka``) or on both
    (``bootstrap``), and one that stays on Tansu says why (a broker that forgets
    everything on restart, Tansu's TLS front, its SASL refusals)."""
    with EmbeddedBroker(0) as running:
        yield running


@pytest.fixture(scope="session")
def apache_kafka(tls_files: TlsFiles) -> Iterator[ApacheKafka]:
    """Apache Kafka, one KRaft node (broker and controller), accepting writes: at most one
    per xdist worker, and none in a worker whose tests never ask for it. Besides its
    plaintext listener it serves TLS with the session's server certificate
    (:func:`apache_kafka_tls`). A test leaves it accepting writes (the restart test of
    tests/test_apache_kafka.py kills it and waits until it is back); one that pauses a
    broker, or keeps one down while clients work, starts an :class:`ApacheKafka` of its own."""
    with ApacheKafka(1, tls=KafkaTls(tls_files.server_cert_pem, tls_files.server_key_pem)) as running:
        yield running


@pytest.fixture
def apache_kafka_tls(apache_kafka: ApacheKafka, tls_files: TlsFiles) -> TlsEndpoint:
    """The session's Apache Kafka over TLS: its SSL listener and the certificates (the
    server's signed by ``certs.ca_pem``)."""
    return TlsEndpoint(apache_kafka.tls_bootstrap_servers, tls_files)


@pytest.fixture
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The address of the session's broker fixture that the test's parameter names
    (``broker``: Tansu, ``apache_kafka``: Apache Kafka), for tests run on both
    (``indirect=["bootstrap"]``)."""
    running: EmbeddedBroker | ApacheKafka = request.getfixturevalue(request.param)
    return running.bootstrap_servers


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


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
