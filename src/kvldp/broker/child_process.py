"""Local servers kvldp runs as child processes (the embedded broker, its TLS proxy):
loopback ports, waiting until a child listens on its own port, and stopping a child with
the file its output went to.

A port is trusted only once the child's own process holds a listening socket on it, as
the operating system reports it (psutil). A port found free and handed to a child can be
taken by another process before the child binds it; "something accepts connections on
the port" would then be that other process, never the child.

Shared by :mod:`kvldp.broker.tansu` and :mod:`kvldp.broker.stunnel`, which both start one.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Callable
from typing import IO

from kvldp.common.errors import KvldpError

HOST = "127.0.0.1"
#: how a child says that it could not bind its port (Tansu: "AddrInUse", "Address in
#: use"; stunnel: "Address already in use")
ADDRESS_IN_USE = re.compile(r"addr(?:ess)?\s*(?:already\s*)?in\s*use", re.I)


#: what a user without the embedded broker's dependencies is told
NEEDS_BROKER_EXTRA = (
    "the embedded broker needs the 'broker' extra: pip install 'kvldp[broker]' (make demo/test install it)"
)


class BrokerError(KvldpError):
    """The embedded broker cannot be found or does not start."""


class PortTaken(BrokerError):
    """A child could not listen on its port: another process holds it."""

    def __init__(self, port: int, host: str = HOST) -> None:
        super().__init__(f"port {port} on {host} is already in use")
        self.port = port


def free_port(host: str = HOST) -> int:
    """A port nothing is bound to at this moment: only a candidate, since another process
    may take it before a child binds it (:func:`wait_listening` tells)."""
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


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` itself listens on (at any address); none once it has
    exited."""
    try:
        import psutil  # the broker extra's, like the broker itself
    except ImportError:
        raise BrokerError(NEEDS_BROKER_EXTRA) from None
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return set()
    except psutil.AccessDenied:
        raise BrokerError(
            f"cannot read which ports process {pid} listens on (the system denies it; "
            "a /proc mounted with hidepid does)"
        ) from None
    return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}


def wait_listening(
    proc: subprocess.Popen[bytes],
    log: IO[bytes],
    port: int,
    timeout: float,
    what: str,
    summary: Callable[[], str],
) -> int:
    """Wait until the child ``proc`` itself listens on ``port`` (0: on the one port it
    chose) and return that port.

    ``log`` is the file its output goes to and ``summary`` says what it wrote, for the
    errors, which name the child as ``what``: :class:`PortTaken` when it exited because
    another process holds ``port``, :class:`BrokerError` when it exited for another
    reason, did not listen within ``timeout`` seconds, or (asked for port 0) listens on
    several ports.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            if port and (port_in_use(port) or ADDRESS_IN_USE.search(file_tail(log, 2000))):
                raise PortTaken(port)
            raise BrokerError(f"{what} exited at start (status {proc.returncode}): {summary()}")
        ports = listening_ports(proc.pid)
        if port in ports:
            return port
        if not port and ports:
            if len(ports) > 1:
                raise BrokerError(f"{what} listens on several ports ({', '.join(map(str, sorted(ports)))})")
            return ports.pop()
        if time.monotonic() >= deadline:
            where = f"{HOST}:{port}" if port else "any port"
            message = f"{what} did not listen on {where} within {timeout:.3g}s"
            raise BrokerError(f"{message}: {tail}" if (tail := summary()) else message)
        time.sleep(0.05)


def file_tail(log: IO[bytes] | None, size: int = 500) -> str:
    """The last ``size`` bytes of a child's output file, decoded."""
    if log is None:
        return ""
    log.seek(0, os.SEEK_END)
    end = log.tell()
    log.seek(max(0, end - size))
    return log.read().decode(errors="replace")


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
