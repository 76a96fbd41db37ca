"""A real Prometheus for the tests (Debian's package) on a port it chose, and what they
ask it: PromQL queries over its HTTP API, and waiting until queries return data."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvldp.broker.child_process import file_tail, stop_child, wait_listening


async def start_prometheus(
    binary: str, config: Path, tmp_path: Path, timeout: float = 60
) -> tuple[subprocess.Popen[bytes], int]:
    """A real Prometheus on ``config``, its database under ``tmp_path``, ready (it answers
    ``/-/ready``), and its port: one it chose on 127.0.0.1, read from the listening
    socket of its own process (a port chosen here could be taken by another process
    first). Fails, with the end of its output, when it exits first or is not ready within
    ``timeout`` seconds; the caller stops it once started."""
    deadline = time.monotonic() + timeout
    with (tmp_path / "prometheus.log").open("w+b") as log:
        prom = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                "--web.listen-address=127.0.0.1:0",
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )

        def output() -> str:
            return file_tail(log).strip()

        try:
            port = await asyncio.to_thread(wait_listening, prom, log, 0, timeout, "Prometheus", output)
            # it listens before it serves queries (503 until its database is open)
            while not await asyncio.to_thread(ready, port):
                assert prom.poll() is None, f"Prometheus exited (status {prom.returncode}): {output()}"
                assert time.monotonic() < deadline, f"Prometheus not ready within {timeout:g} s: {output()}"
                await asyncio.sleep(0.1)
        except BaseException:  # it did not start, or the test was cancelled meanwhile
            stop_child(prom, None)
            raise
    return prom, port


def ready(port: int) -> bool:
    """Whether the Prometheus on ``port`` says it is ready."""
    try:
        return get(f"http://127.0.0.1:{port}/-/ready")[0] == 200
    except OSError:
        return False


def get(
    url: str, context: ssl.SSLContext | None = None, auth: tuple[str, str] | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def promql(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body = get(url)
    payload = json.loads(body)
    assert status == 200 and payload["status"] == "success", (expr, payload)
    result: list[dict[str, Any]] = payload["data"]["result"]
    return result


def finite(series: list[dict[str, Any]]) -> bool:
    return bool(series) and all(math.isfinite(float(s["value"][1])) for s in series)


async def wait_for_data(
    prom: subprocess.Popen[bytes], port: int, expressions: Iterable[str], timeout: float = 60
) -> None:
    """Wait until every PromQL expression returns finite series — Prometheus has scraped
    enough samples (``rate()`` and ``increase()`` need two) — while ``prom`` runs; fail
    naming the expressions that never did, with what they last returned."""
    pending = {expr: "not asked yet" for expr in expressions}
    deadline = time.monotonic() + timeout
    while pending:
        assert prom.poll() is None, f"Prometheus exited with status {prom.returncode}"
        for expr in list(pending):
            series = await asyncio.to_thread(promql, port, expr)
            if finite(series):
                del pending[expr]
            else:
                pending[expr] = repr(series)
        if pending and time.monotonic() > deadline:
            lines = "\n".join(f"  {expr} -> {last}" for expr, last in pending.items())
            raise AssertionError(f"no finite series within {timeout:g} s for:\n{lines}")
        if pending:
            await asyncio.sleep(0.5)
