"""Local servers kvldp runs as child processes (the embedded broker, its TLS proxy):
loopback ports, and stopping a child with the file its output went to.

Shared by :mod:`kvldp.broker.tansu` and :mod:`kvldp.broker.stunnel`, which both start one.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from typing import IO

from kvldp.common.errors import KvldpError

HOST = "127.0.0.1"


class BrokerError(KvldpError):
    """The embedded broker cannot be found or does not start."""


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


def stop_child(proc: subprocess.Popen[bytes] | None, log: IO[bytes] | None) -> None:
    """Stop a child process (SIGTERM, then SIGKILL if it is still there after 5 seconds)
    and close the file its output went to."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    if log is not None:
        log.close()
