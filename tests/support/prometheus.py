"""A real Prometheus for the tests (Debian's package), and what they ask it: PromQL
queries over its HTTP API."""

from __future__ import annotations

import base64
import json
import math
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
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
