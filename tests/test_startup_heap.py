"""A service's start-up heap is frozen once its imports are done: the garbage start-up
left is collected first, what is alive is exempt from later passes, and what the service
allocates afterwards is collected as before. ``kvldp aggregate``, ``kvldp gateway`` and
``kvldp bench ingest`` freeze before their loop starts.

The freeze itself runs in a child process: freezing this one would exempt the test
session's objects from every later collection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvldp import startup_heap
from kvldp.cli import main
from kvldp.gateway.signing import generate
from kvldp.kafka import main_loop

from support.pipeline import collection_toml, unique_collection

CHILD = """
import gc, json, weakref
from kvldp import startup_heap

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

left = weakref.ref(cycle())            # start-up garbage: unreachable already
kept = cycle()                          # alive at the freeze
kept_ref = weakref.ref(kept)
frozen = startup_heap.freeze()
collected_before = left() is None
del kept                                # a start-up object dropped later, inside a cycle
later = weakref.ref(cycle())            # garbage made after the freeze
gc.collect()
print(json.dumps({
    "frozen": frozen,
    "count": gc.get_freeze_count(),
    "collected_before": collected_before,
    "later_collected": later() is None,
    "frozen_kept": kept_ref() is not None,
}))
"""


def test_freeze_collects_start_up_garbage_then_exempts_what_is_alive() -> None:
    done = subprocess.run([sys.executable, "-P", "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["collected_before"]  # collected, not frozen
    assert seen["frozen"] == seen["count"] > 1_000  # the modules' objects, at least
    assert seen["later_collected"]  # what comes after is collected as before
    assert seen["frozen_kept"]  # the documented cost: a frozen cycle stays


@pytest.fixture()
def order(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What a command did, in order: froze its heap, ran its loop (neither for real)."""
    done: list[str] = []
    monkeypatch.setattr(startup_heap, "freeze", lambda: done.append("freeze") or 0)
    monkeypatch.setattr(main_loop, "run_async", lambda *args: done.append("loop"))
    return done


def test_aggregate_freezes_its_heap_before_its_loop(order: list[str]) -> None:
    toml = Path(__file__).parents[1] / "deploy" / "collections" / "demo.toml"
    argv = [
        "aggregate",
        "--collection",
        str(toml),
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--metrics-port",
        "0",
    ]
    assert main(argv) == 0
    assert order == ["freeze", "loop"]


def test_gateway_freezes_its_heap_before_its_loop(order: list[str], tmp_path: Path) -> None:
    _, jwks = generate(tmp_path / "keys")
    toml = collection_toml(unique_collection("kvue", d=4), tmp_path / "c.toml")
    argv = ["gateway", "--collection", str(toml), "--jwks", str(jwks), "--audience", "a", "--port", "0"]
    assert main([*argv, "--bootstrap-servers", "127.0.0.1:1"]) == 0
    assert order == ["freeze", "loop"]


def test_bench_ingest_freezes_before_both_sides_run(
    order: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvldp.bench import kafka_throughput

    monkeypatch.setattr(kafka_throughput, "bench_ingest", lambda *args: order.append("bench") or [])
    assert main(["bench", "ingest", "--json"]) == 0
    assert order == ["freeze", "bench"]
