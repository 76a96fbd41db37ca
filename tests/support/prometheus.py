"""A real Prometheus for the tests (Debian's package), and what they ask it: PromQL
queries over its HTTP API, and waiting until queries return data."""

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


def start_prometheus(binary: str, config: Path, tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    """A real Prometheus on ``config``, its database under ``tmp_path``, on 127.0.0.1:``port``."""
    return subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


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
            try:
                series = await asyncio.to_thread(promql, port, expr)
            except OSError as exc:  # not listening yet
                pending[expr] = f"{type(exc).__name__}: {exc}"
                continue
            if finite(series):
                del pending[expr]
            else:
                pending[expr] = repr(series)
        if pending and time.monotonic() > deadline:
            lines = "\n".join(f"  {expr} -> {last}" for expr, last in pending.items())
            raise AssertionError(f"no finite series within {timeout:g} s for:\n{lines}")
        if pending:
            await asyncio.sleep(0.5)
