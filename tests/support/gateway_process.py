"""``kvldp gateway`` as a child process, to be SIGKILLed and started again on its port.

The end-to-end tests run the real command line, so a SIGKILL loses exactly what a crash
loses: the requests in flight, their answers, the records its producer still held.
The first start takes a free port (``--port 0``, read from the first line it prints);
:meth:`GatewayProcess.start` again serves the same address, as a restarted gateway
behind a load balancer does.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from kvldp.reliability.processes import end_child


class GatewayProcess:
    """One ``kvldp gateway`` child; its stderr goes to ``<log_dir>/gateway.log``."""

    def __init__(
        self,
        collection_files: Sequence[Path],
        jwks: Path,
        audience: str,
        bootstrap: str,
        log_dir: Path,
        extra: Sequence[str] = (),
    ) -> None:
        self.args = [sys.executable, "-P", "-m", "kvldp", "gateway"]
        for path in collection_files:
            self.args += ["--collection", str(path)]
        self.args += ["--jwks", str(jwks), "--audience", audience, "--bootstrap-servers", bootstrap, *extra]
        self.log_path = log_dir / "gateway.log"
        self.port = 0
        self.url = ""
        self.starts = 0
        self.proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None

    async def start(self, timeout: float = 60.0) -> str:
        """Start it (on the port of the previous start, if any) and wait for its address
        line; returns its base URL."""
        assert self.proc is None, "the gateway is running"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*self.args, "--port", str(self.port)], stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), timeout)
        except TimeoutError:
            line = ""
        if not line.startswith("gateway=http://"):
            self.kill()
            raise AssertionError(f"the gateway did not start ({line.strip()!r}): {self.log_tail()}")
        self.url = line.strip().split("=", 1)[1]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.starts += 1
        return self.url

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing in flight is answered or delivered."""
        self._end(signal.SIGKILL)

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status (0: a clean stop)."""
        return self._end(signal.SIGTERM)

    def _end(self, sig: int) -> int:
        proc, self.proc = self.proc, None
        log, self._log = self._log, None
        return end_child(proc, sig, 30.0, log)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
