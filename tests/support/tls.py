"""Throw-away certificates for the TLS tests (trustme): a CA, a server certificate for
127.0.0.1 and localhost, a client certificate from the same CA, and an unrelated CA; and
the running TLS brokers the fixtures of ``conftest.py`` hand out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import trustme

from kvldp.broker.tansu import EmbeddedBroker


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: ``ca_pem`` signed the server's and the client's certificates;
    ``other_ca_pem`` signed neither (a client trusting only it must refuse the server)."""

    ca_pem: Path
    server_cert_pem: Path
    server_key_pem: Path
    client_cert_pem: Path
    client_key_pem: Path
    other_ca_pem: Path


def make_tls_files(directory: Path) -> TlsFiles:
    """Writes a fresh set of certificates into ``directory`` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("kvldp-test-client")
    files = TlsFiles(
        ca_pem=directory / "ca.pem",
        server_cert_pem=directory / "server.pem",
        server_key_pem=directory / "server.key",
        client_cert_pem=directory / "client.pem",
        client_key_pem=directory / "client.key",
        other_ca_pem=directory / "other-ca.pem",
    )
    ca.cert_pem.write_to_path(str(files.ca_pem))
    server.cert_chain_pems[0].write_to_path(str(files.server_cert_pem))
    server.private_key_pem.write_to_path(str(files.server_key_pem))
    client.cert_chain_pems[0].write_to_path(str(files.client_cert_pem))
    client.private_key_pem.write_to_path(str(files.client_key_pem))
    trustme.CA().cert_pem.write_to_path(str(files.other_ca_pem))
    for key in (files.server_key_pem, files.client_key_pem):
        key.chmod(0o600)
    return files


class TlsBroker(NamedTuple):
    """A running TLS broker and the certificates it serves (``certs.ca_pem`` signed them)."""

    broker: EmbeddedBroker
    certs: TlsFiles


class TlsEndpoint(NamedTuple):
    """A running broker's TLS address and the certificates it serves (``certs.ca_pem``
    signed them)."""

    bootstrap_servers: str
    certs: TlsFiles
