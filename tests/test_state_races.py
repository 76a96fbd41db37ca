"""Processes racing on one device state file keep the spending rule as one process does.

Real processes, not threads (:mod:`support.state_races`): 1,000 races of 2 to 8 processes
released together at a barrier, each race on a fresh file, through the SDK's decision
layer (no Kafka: a collector sends into a producer that keeps what it is given). Four
kinds of race, in turn:

* **first open**: everyone opens a file that does not exist yet; exactly one secret is
  created, and every process gets it and the same device id;
* **the period rule** (``report_period``, through the collector): everyone reports in one
  period and then in the next; exactly one report is sent in each;
* **the lifetime cap** (ε 4.5 at 1.5 a report): everyone tries three reports; exactly
  three are sent, the file charges exactly those, and the ε spent stays under the cap;
* **memoized re-sends**: everyone reports the same pairs twice; one report is new, every
  other is a re-send, and all of them carry the byte-identical payload the file stores.

And the same through the command line: two ``kvldp produce --state-dir`` runs at once over
the same simulated devices send one report per device between them, and the aggregator
refuses none.

The 1,000 races run in a directory in memory (tmpfs, ``/dev/shm``) where there is one: the
lock works there as on a disk, and a write's fsync costs nothing, which halves the test's
time on a loaded disk. Run so, they still catch what they look for (measured by breaking
the code on purpose): with the lock taken out, 20 to 30% of the period, cap and memoized
races break the rule; with no lock and a first open that looks for the file and then
creates it, about 13% of the first-open races make two or more secrets (on the disk,
nearly all of them). The full variant (``-m full``) runs 10,000 races on the disk, where
every write waits for fsync.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection_file import load_collection
from kvldp.producer.device_state import DeviceState, period_of

from support import record_and_fold
from support.state_races import HOUR, NOW, RACES, Racers, collection

WORKERS = 8
SIZES = range(2, WORKERS + 1)


def plan(races: int) -> list[tuple[str, int]]:
    """(kind, processes) of each race: the kinds in turn, the sizes 2 to 8 in turn."""
    kinds = itertools.cycle(RACES)
    return [(next(kinds), SIZES[(i // len(RACES)) % len(SIZES)]) for i in range(races)]


def check_open(path: Path, seen: list[tuple[bytes, str]]) -> None:
    state = DeviceState.load(path, collection("open"))
    assert set(seen) == {(state.secret, state.device_id)}, f"{len(set(seen))} secrets in one file"
    left = sorted(p.name for p in path.parent.iterdir())
    assert left == ["state", "state.lock"], left  # no temporary file left behind


def check_period(path: Path, seen: list[list[tuple[int, str]]]) -> None:
    c = collection("period")
    statuses = Counter(report for process in seen for report in process)
    assert statuses == {
        (0, "sent"): 1,
        (1, "sent"): 1,
        (0, "skipped_period"): len(seen) - 1,
        (1, "skipped_period"): len(seen) - 1,
    }, statuses
    state = DeviceState.load(path, c)
    assert state.charged == 2 and state.last_period == period_of(c, int((NOW + HOUR) * 1000))


def check_cap(path: Path, seen: list[list[str]]) -> None:
    c = collection("cap")
    statuses = Counter(status for process in seen for status in process)
    assert statuses == {"sent": 3, "exhausted": 3 * len(seen) - 3}, statuses
    state = DeviceState.load(path, c)
    assert state.charged == 3 and state.spent(c) <= c.privacy.lifetime_epsilon


def check_memoized(path: Path, seen: list[list[tuple[str, bytes | None]]]) -> None:
    state = DeviceState.load(path, collection("memoized"))
    (stored,) = state.memo.values()
    payload = bytes(msgpack.packb(stored, use_bin_type=True))
    reports = [report for process in seen for report in process]
    statuses = Counter(status for status, _ in reports)
    assert statuses == {"sent": 1, "resent": len(reports) - 1}, statuses
    assert {sent for _, sent in reports} == {payload}, "two payloads for one memoized state"
    assert state.charged == 1


CHECKS: dict[str, Any] = {
    "open": check_open,
    "period": check_period,
    "cap": check_cap,
    "memoized": check_memoized,
}


@pytest.fixture
def in_memory(tmp_path: Path) -> Iterator[Path]:
    """A fresh directory on tmpfs (``/dev/shm``) where there is one, else ``tmp_path``."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(prefix="kvldp-races-", dir=shm) as directory:
        yield Path(directory)


def run_races(directory: Path, races: int) -> Counter[tuple[str, int]]:
    """``races`` races (:func:`plan`), each on a fresh file under ``directory``, each checked."""
    done: Counter[tuple[str, int]] = Counter()
    with Racers(WORKERS) as racers:
        for i, (kind, size) in enumerate(plan(races)):
            path = directory / str(i) / "state"
            path.parent.mkdir()
            taking_part = [(i + k) % WORKERS for k in range(size)]
            CHECKS[kind](path, racers.race(kind, path, taking_part))
            done[kind, size] += 1
    return done


def test_processes_racing_on_one_state_file_keep_the_rule(in_memory: Path) -> None:
    done = run_races(in_memory, 1000)
    assert sum(done.values()) == 1000
    assert set(done) == {(kind, size) for kind in RACES for size in SIZES}  # every kind at every size


@pytest.mark.full
def test_ten_thousand_races_on_the_disk(tmp_path: Path) -> None:
    assert sum(run_races(tmp_path, 10_000).values()) == 10_000


def test_two_produce_runs_at_once_share_the_devices_states(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """Both runs report for the same 300 simulated devices in one report_period (a century
    long, so that no period boundary falls between them), their states in one directory:
    each device reports once between the two, whichever run took its lock first."""
    users = 300
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'name = "shared-{uuid.uuid4().hex[:8]}"\nmechanism = "pckv_ue"\nepsilon = 1.0\nkey_count = 6\n'
        'value_range = [-1.0, 1.0]\n[privacy]\nmemoize = true\nreport_period = "36500d"\n'
    )
    states = tmp_path / "states"
    bootstrap = ["--bootstrap-servers", broker.bootstrap_servers]
    argv = [sys.executable, "-P", "-m", "kvldp", "produce", "--collection", str(toml), "--simulate"]
    argv += ["gaussian", "--users", str(users), "--seed", "1", "--state-dir", str(states), *bootstrap]
    with contextlib.ExitStack() as stack:
        runs = [
            stack.enter_context(
                subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            )
            for _ in range(2)
        ]
        try:
            said = [run.communicate(timeout=120)[1] for run in runs]
        finally:
            for run in runs:  # one that did not finish in time (nothing to do for the others)
                run.kill()
    assert [run.returncode for run in runs] == [0, 0], said
    published = [int(re.findall(r"^published (\d+) reports", err, re.MULTILINE)[-1]) for err in said]
    skipped = [
        sum(int(n) for n in re.findall(r"(\d+) not sent, nothing spent: their device already", err))
        for err in said
    ]
    assert sum(published) == users and sum(skipped) == users, said
    c = load_collection(toml)
    files = sorted(states.glob("*.state"))
    assert len(files) == users and len(list(states.glob("*.state.lock"))) == users
    assert all(DeviceState.load(path, c).charged == 1 for path in files)
    folded = record_and_fold(toml, tmp_path / "shared.rec", *bootstrap)
    assert folded["reports_total"] == users and folded["rejected"] == {}
