"""The TLS front of the embedded broker: Debian's stunnel, in front of Tansu.

Tansu 0.6 accepts ``--cert``/``--key`` but its listener stays plain TCP, so a TLS broker
on one machine (for the TLS tests, and for users trying a secured setup) is Tansu on an
internal loopback port behind stunnel, which terminates TLS on the public port and
forwards each connection, unencrypted, to Tansu. The internal port stays plain TCP on
127.0.0.1: this protects nothing from other users of the machine, and is not meant to.

stunnel runs in the foreground as a child process (in a process group of its own, like Tansu), with
its configuration in a temporary directory and its output in a temporary file, both
removed by :meth:`TlsProxy.stop`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import IO

from kvldp.broker.child_process import HOST, BrokerError, file_tail, stop_child, wait_listening

STUNNEL_HINT = "install Debian's stunnel4 (make stunnel)"
# "[!] message" before stunnel reads its logging settings, "date time LOG3[ui]: message" after
_LOG_PREFIX = re.compile(r"^(?:\[.\]|\S+ \S+ LOG\d\[[^\]]*\]:)\s*")
_ERROR_LINE = re.compile(r"^(?:\[!\]|\S+ \S+ LOG[0-3]\[)")
# logged at error level at every start: no CA to check client certificates with, none asked for
_NOISE = "No trusted certificates found"


def stunnel_binary() -> str:
    """Path of stunnel (Debian installs it as ``stunnel4``, with ``stunnel`` as an alias)."""
    for name in ("stunnel4", "stunnel"):
        path = shutil.which(name)
        if path:
            return path
    raise BrokerError(f"--tls-cert needs stunnel: {STUNNEL_HINT}")


def check_pem_file(path: Path, what: str) -> Path:
    """``path`` made absolute, once it is known to be a readable file stunnel can be told about."""
    if not path.is_file():
        raise BrokerError(f"the TLS {what} {path} does not exist (or is not a file)")
    if not os.access(path, os.R_OK):
        raise BrokerError(f"the TLS {what} {path} is not readable")
    resolved = path.resolve()
    if any(c in str(resolved) for c in "\r\n"):
        raise BrokerError(f"the TLS {what} path {str(path)!r} has a line break, which stunnel cannot read")
    return resolved


class TlsProxy:
    """stunnel on 127.0.0.1:``port``: TLS with ``cert``/``key`` (PEM files), each connection
    forwarded as plain TCP to 127.0.0.1:``target_port``."""

    def __init__(self, port: int, target_port: int, cert: Path, key: Path) -> None:
        self.port = port
        self.target_port = target_port
        self.cert = cert
        self.key = key
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._log: IO[bytes] | None = None

    def config(self) -> str:
        return "\n".join(
            [
                "foreground = yes",  # a child process kvldp stops, logging to its stderr
                "pid =",  # no pid file
                "syslog = no",
                "debug = warning",  # no line per connection
                "[kafka]",
                f"accept = {HOST}:{self.port}",
                f"connect = {HOST}:{self.target_port}",
                f"cert = {self.cert}",
                f"key = {self.key}",
                "",
            ]
        )

    def start(self, timeout: float = 20.0) -> TlsProxy:
        """Starts stunnel and waits (at most ``timeout`` seconds) until its own process
        listens on ``port`` (0: on the port it chose, then kept in ``port``); it has read
        the certificate and key by then. :class:`~kvldp.broker.child_process.PortTaken`
        when another process holds the port."""
        binary = stunnel_binary()
        self.cert = check_pem_file(self.cert, "certificate")
        self.key = check_pem_file(self.key, "key")
        self._dir = tempfile.TemporaryDirectory(prefix="kvldp-stunnel-")
        conf = Path(self._dir.name) / "stunnel.conf"
        conf.write_text(self.config())
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(
            [binary, str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )
        try:
            self.port = wait_listening(
                self.process, self._log, self.port, timeout, "stunnel (the TLS proxy)", self.summary
            )
        except BrokerError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_child(self.process, self._log)
        self.process, self._log = None, None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, size: int = 500) -> str:
        """The end of stunnel's output."""
        return file_tail(self._log, size)

    def summary(self, lines: int = 3, *, errors_only: bool = False) -> str:
        """stunnel's last errors (else, unless ``errors_only``, its last lines) on one line,
        without dates and levels."""
        size = 4000
        tail = self.log_tail(size).splitlines()
        if self._log is not None and self._log.tell() > size:
            tail = tail[1:]  # cut in the middle
        tail = [line for line in tail if line.strip() and _NOISE not in line]
        errors = [line for line in tail if _ERROR_LINE.match(line)]
        chosen = (errors if errors or errors_only else tail)[-lines:]
        return "; ".join(_LOG_PREFIX.sub("", line).strip() for line in chosen)
