"""``kvldp aggregate`` in child processes, to be killed for real.

The reliability scenarios run the real command line (not an in-process object), so a
SIGKILL loses exactly what a crash loses: buffers, in-flight fetches, unacknowledged
dead-letter writes, a checkpoint half written.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import IO

from prometheus_client.parser import text_string_to_metric_families

from kvldp.common.errors import KvldpError

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class ProcessFailed(KvldpError):
    """An aggregator process did not start or exited with an error."""


def scrape(port: int, timeout: float = 5.0) -> Samples:
    """Every sample of a /metrics endpoint, keyed by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        text = response.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(samples: Samples, name: str) -> float:
    """Sum of a metric over all its label sets (0 if absent)."""
    return sum(v for (n, _), v in samples.items() if n == name)


def end_child(
    proc: subprocess.Popen[str] | subprocess.Popen[bytes] | None,
    sig: int,
    timeout: float,
    log: IO[bytes] | None,
) -> int:
    """Send ``sig`` to a child (SIGKILL after ``timeout`` seconds if it is still there),
    close its stdout pipe and the file its stderr went to; returns its exit status (0 when
    there is no child)."""
    if proc is None:
        if log is not None:
            log.close()
        return 0
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    if log is not None:
        log.close()
    return code


class AggregatorProcess:
    """One ``kvldp aggregate`` child process; its log goes to ``<log_dir>/<name>.log``."""

    def __init__(
        self,
        collection_file: Path,
        bootstrap: str,
        log_dir: Path,
        name: str = "aggregator",
        role: str = "all",
        state_dir: Path | None = None,
        refit_interval: float = 1.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.collection_file = collection_file
        self.bootstrap = bootstrap
        self.log_path = log_dir / f"{name}.log"
        self.name = name
        self.role = role
        self.state_dir = state_dir
        self.refit_interval = refit_interval
        self.env = env or {}
        self.port: int | None = None
        self.proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> AggregatorProcess:
        args = [
            sys.executable,
            "-P",  # the interpreter's working directory stays off sys.path
            "-m",
            "kvldp",
            "aggregate",
            "--collection",
            str(self.collection_file),
            "--bootstrap-servers",
            self.bootstrap,
            "--metrics-port",
            "0",
            "--role",
            self.role,
            "--refit-interval",
            str(self.refit_interval),
        ]
        if self.state_dir is not None:
            args += ["--state-dir", str(self.state_dir)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.port = None
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self._log, text=True, env={**os.environ, **self.env}
        )
        return self

    async def ready(self, timeout: float = 60.0) -> int:
        """Wait for the metrics line; returns the metrics port."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)
        except TimeoutError:
            line = ""
        if not line.startswith("metrics="):
            raise ProcessFailed(f"{self.name} did not start: {self.log_tail()}")
        self.port = int(line.rsplit(":", 1)[1].split("/")[0])
        return self.port

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed."""
        self._end(signal.SIGKILL, 30.0)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; returns the exit status (0: a clean shutdown)."""
        return self._end(signal.SIGTERM, timeout)

    def _end(self, sig: int, timeout: float) -> int:
        proc, self.proc = self.proc, None
        return end_child(proc, sig, timeout, self._log)

    def rss_bytes(self) -> int:
        """Resident set size of the process now (Linux)."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise ProcessFailed("no VmRSS in /proc status")

    def samples(self) -> Samples:
        """Current metrics ({} if the process is not serving)."""
        if self.port is None:
            return {}
        try:
            return scrape(self.port)
        except OSError:
            return {}

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
