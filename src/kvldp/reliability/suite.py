"""``kvldp bench reliability``: run scenarios on an embedded broker, report the figures."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from kvldp.broker.tansu import EmbeddedBroker
from kvldp.reliability.scenarios import SCALES, run
from kvldp.reliability.scenarios.outcome import Outcome


def run_scenarios(names: list[str], scale: str, keep: Path | None = None) -> list[tuple[Outcome, float]]:
    """Each scenario in turn, with its wall time; logs and recordings go to ``keep``
    (else to a temporary directory that is removed)."""
    results = []
    with tempfile.TemporaryDirectory(prefix="kvldp-reliability-") as tmp, EmbeddedBroker(0) as broker:
        root = keep or Path(tmp)
        for name in names:
            workdir = root / name
            workdir.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            outcome = asyncio.run(run(name, scale, workdir, broker.bootstrap_servers))
            results.append((outcome, time.monotonic() - started))
    return results


def rows(results: list[tuple[Outcome, float]], scale: str) -> list[dict[str, Any]]:
    return [
        {
            "scenario": o.name,
            "scale": scale,
            "passed": o.passed,
            "seconds": round(seconds, 1),
            "failures": o.failures,
            "figures": o.figures,
            "parameters": SCALES[scale][o.name],
        }
        for o, seconds in results
    ]


def markdown(table: list[dict[str, Any]]) -> str:
    """The figures of a run as the Markdown of ``docs/results/reliability.md``."""
    lines = [
        "# Reliability scenarios: figures of one run",
        "",
        "Written by `kvldp bench reliability --markdown docs/results/reliability.md` on the",
        "embedded broker, except the scenarios that take down nodes of a three-node Apache Kafka",
        "cluster of their own (2 cores shared by the brokers, the aggregators and the producers).",
        "Each scenario compares the aggregator's integer statistics with its oracles; see",
        "`docs/reliability.md` for what each one does and checks.",
        "",
        "| scenario | scale | parameters | passed | wall seconds |",
        "|---|---|---|---|---|",
    ]
    for row in table:
        params = ", ".join(
            f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in row["parameters"].items()
        )
        lines.append(
            f"| `{row['scenario']}` | {row['scale']} | {params} | {'yes' if row['passed'] else 'NO'} | {row['seconds']} |"
        )
    for row in table:
        lines += ["", f"## {row['scenario']}", ""]
        lines += [f"- {k}: {v}" for k, v in row["figures"].items()]
        lines += [f"- FAILED: {f}" for f in row["failures"]]
    return "\n".join(lines) + "\n"
