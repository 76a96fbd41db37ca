"""Every code block of the documentation is run, checked or declared output, so that no
snippet can stop working unnoticed.

The documents are the README, deploy/README.md and everything under docs/
(:func:`support.doc_blocks.documents`). Each block is tagged with its language:

- ``sh``, ``bash`` and ``python`` blocks of one document run in order, as
  one bash script (``set -euo pipefail``, the environment's ``bin`` first on ``PATH``) in
  a fresh directory holding what a reader of a clone has (``deploy/collections``); a
  Python block runs there as a script of its own, seeing the shell's exported variables.
  A block that exits non-zero, or runs longer than :data:`BLOCK_TIMEOUT`, fails the
  test, and so does a service a block starts with ``&`` that ends with a failure; the
  services still running are stopped at the end. A service listens on port 0 (a free
  one, which it prints): a fixed port may be taken on the machine running the tests;
- ``toml`` blocks are collection files (or tables of one) and must load with kvldp's
  collection loader; ``properties`` blocks are Kafka client files and must read with
  kvldp's properties reader and Kafka settings;
- ``text`` blocks (output, listings, diagrams) are not run; an untagged block fails.

A block that cannot run here (a Docker engine, a managed cluster, a long computation)
carries ``<!-- doc-test: not run: REASON -->``; there are at most :data:`MOST_EXEMPT`
of them. Every ``kvldp`` command line of every shell block, exempt or not, must parse
with kvldp's own argument parser; every ``kvldp ...`` of the prose (inline code, tables
included), where values may be placeholders, must name a command and flags it has.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import pytest

from kvldp.cli import build_parser
from kvldp.common.config.collection_file import parse_collection
from kvldp.kafka.client_config import kafka_config
from kvldp.kafka.properties_file import parse_properties

from support.doc_blocks import (
    CHECKED,
    LANGUAGES,
    RUN,
    SHELL,
    Block,
    blocks,
    documents,
    kvldp_commands,
    prose_commands,
    services,
    shell_lines,
)
from support.package import REPO

#: the most blocks that may be exempt from running
MOST_EXEMPT = 15
#: seconds one block may run
BLOCK_TIMEOUT = 120.0
#: what a reader of a clone has in the directory the commands run in
CLONE_FILES = ("deploy/collections",)
#: the smallest collection a ``toml`` block holding only tables is checked in
BASE_COLLECTION = (
    'name = "doc"\nmechanism = "pckv_ue"\nepsilon = 1.0\nkeys = ["a", "b"]\nvalue_range = [0.0, 1.0]\n'
)
#: a shell variable set to a plain value
ASSIGNED = re.compile(r"^\s*(\w+)=([\w.:/-]+)", re.M)
#: client-file keys naming files on the reader's machine
FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")

ALL = [block for doc in documents() for block in blocks(doc)]


def runs(block: Block) -> bool:
    return block.language in RUN and block.exemption is None


RUNNABLE_DOCS = [doc for doc in documents() if any(runs(block) for block in blocks(doc))]


def test_every_block_is_tagged_with_a_known_language() -> None:
    untagged = [f"{b.where} ({b.language or 'untagged'})" for b in ALL if b.language not in LANGUAGES]
    assert not untagged, f"tag these blocks with one of {sorted(LANGUAGES)}: {untagged}"


def test_every_directive_is_understood_and_every_exemption_says_why() -> None:
    unknown = [b.where for b in ALL if b.directive is not None and b.exemption is None and b.saved_as is None]
    assert not unknown, f"doc-test comments must be 'not run: REASON' or 'save as FILE': {unknown}"
    bare = [b.where for b in ALL if b.exemption == ""]
    assert not bare, f"these blocks are not run and do not say why: {bare}"
    exempt = [f"{b.where}: {b.exemption}" for b in ALL if b.exemption]
    assert len(exempt) <= MOST_EXEMPT, "\n".join(exempt)


@cache
def parser() -> argparse.ArgumentParser:
    return build_parser()


def parse_error(argv: list[str]) -> str | None:
    """What kvldp's argument parser says about ``kvldp ARGV``; None when it parses."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser().parse_args(argv)
        except SystemExit as exc:
            return None if exc.code == 0 else stderr.getvalue().strip().splitlines()[-1]
    return None


def flag_error(words: list[str]) -> str | None:
    """What is wrong with the command and flags of ``kvldp WORDS`` written in prose,
    where values may be placeholders and required flags left out: an unknown command or
    flag; None when there is none."""
    command = parser()
    rest = list(words)
    while actions := [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]:
        if not rest or rest[0] not in actions[0].choices:
            if command.prog == "kvldp":
                return f"no command {rest[:1]}"
            break
        command = actions[0].choices[rest.pop(0)]
    flags = [word.strip("[]").split("=")[0] for word in rest if re.match(r"\[?--?[A-Za-z]", word)]
    unknown = [flag for flag in flags if flag not in command._option_string_actions]
    return f"{command.prog} has no {', '.join(unknown)}" if unknown else None


def expanded(block: Block) -> str:
    """A shell block with the variables its document sets to a plain value put in."""
    values = dict(ASSIGNED.findall("".join(b.text for b in blocks(block.doc) if b.language in SHELL)))
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), block.text)


def test_every_kvldp_command_of_the_docs_parses() -> None:
    """Every command of a shell block, exempt or not, as a whole; every one of the prose
    by its command and flags."""
    commands = [
        (b.where, argv)
        for b in ALL
        if b.language in SHELL
        for line in shell_lines(expanded(b))
        for argv in kvldp_commands(line)
    ]
    assert len(commands) > 30
    wrong = [
        f"{where}: kvldp {' '.join(argv)}: {error}"
        for where, argv in commands
        if (error := parse_error(argv))
    ]
    in_prose = [
        (f"{doc}:{line}", command.split()[1:]) for doc in documents() for line, command in prose_commands(doc)
    ]
    assert len(in_prose) > 100
    wrong += [
        f"{where}: kvldp {' '.join(words)}: {error}"
        for where, words in in_prose
        if (error := flag_error(words))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_command_checks_refuse_a_wrong_flag() -> None:
    assert parse_error(["aggregate", "--collection", "c.toml"]) is None
    error = parse_error(["aggregate", "--collection", "c.toml", "--colection", "c.toml"])
    assert error is not None and "--colection" in error
    assert flag_error(["bench", "estimate", "--keys", "d"]) is None
    assert flag_error(["bench", "estimate", "--colection"]) == "kvldp bench estimate has no --colection"
    assert flag_error(["aggregat"]) == "no command ['aggregat']"
    assert kvldp_commands("x=$(kvldp a --b c) && kvldp d | tee f  # kvldp e") == [["a", "--b", "c"], ["d"]]


#: the flags naming a port a kvldp service listens on
PORT_FLAGS = ("port", "metrics_port")


def fixed_ports(argv: list[str]) -> list[str]:
    """The ports ``kvldp ARGV`` listens on other than 0 (a free one), defaults included."""
    args = parser().parse_args(argv)
    return [
        f"--{flag.replace('_', '-')} {port}"
        for flag in PORT_FLAGS
        if (port := getattr(args, flag, None)) not in (None, 0)
    ]


def test_no_service_of_a_block_that_runs_listens_on_a_fixed_port() -> None:
    """The services a block starts listen on port 0 and the block reads the port they
    print: on a fixed one, another program of the machine may be listening already."""
    started = [
        (b.where, argv)
        for b in ALL
        if b.language in SHELL and runs(b)
        for line in shell_lines(expanded(b))
        for argv in services(line)
    ]
    assert {argv[0] for _, argv in started} >= {"broker", "aggregate", "gateway"}
    fixed = [
        f"{where}: kvldp {' '.join(argv)}: {', '.join(ports)}"
        for where, argv in started
        if (ports := fixed_ports(argv))
    ]
    assert not fixed, "\n".join(fixed)


def test_the_service_checks_see_a_fixed_port() -> None:
    assert services("kvldp broker --port 0 > broker.log &  # kvldp x &") == [["broker", "--port", "0"]]
    assert services("kvldp broker && kvldp aggregate --collection c.toml; kvldp mechanisms") == []
    assert fixed_ports(["broker", "--port", "0"]) == []
    assert fixed_ports(["broker"]) == ["--port 9092"]
    assert (
        fixed_ports(["gateway", "--collection", "c.toml", "--jwks", "j", "--audience", "a", "--port", "0"])
        == []
    )
    assert fixed_ports(["aggregate", "--collection", "c.toml"]) == ["--metrics-port 9108"]


@pytest.mark.parametrize("block", [b for b in ALL if b.language in CHECKED], ids=lambda b: b.where)
def test_every_collection_and_client_file_block_reads(block: Block) -> None:
    if block.language == "toml":
        text = block.text if block.text.lstrip().startswith("name") else BASE_COLLECTION + block.text
        parse_collection(tomllib.loads(text), source=block.where)
    else:
        entries = parse_properties(block.text.encode(), block.where)
        for key in FILE_KEYS:
            entries.pop(key, None)
        kafka_config(entries, block.where)


#: bash functions keeping the services a script starts with &: each is remembered in
#: the order it started (a DEBUG trap sees ``$!`` change); one that has ended with a
#: status other than 0 fails the script after its block (127: the document waited for it
#: itself and saw its status); at the end, the script's last block run or failed, they stop, the last started first, each
#: waited for, since a service may need one started before it (the broker) to stop
SERVICES = """DOC_TEST_SERVICES=()
DOC_TEST_ORDER=()
DOC_TEST_LAST=
doc_test_started_service() {
  if [[ -n ${!:-} && ${!} != "$DOC_TEST_LAST" ]]; then
    DOC_TEST_LAST=$!
    DOC_TEST_SERVICES[$!]=1
    DOC_TEST_ORDER+=("$!")
  fi
}
doc_test_services_ran() {
  local pid status
  for pid in "${!DOC_TEST_SERVICES[@]}"; do
    kill -0 "$pid" 2>/dev/null && continue
    unset "DOC_TEST_SERVICES[$pid]"
    status=0
    wait "$pid" || status=$?
    if [[ $status != 0 && $status != 127 ]]; then
      echo "doc-test: a service started with & ended with status $status" >&2
      exit 1
    fi
  done
}
doc_test_stop_services() {
  local i
  trap - DEBUG
  if [[ -e .doc-test/done ]]; then
    echo "stopping the services started with &" > .doc-test/current
  fi
  for ((i = ${#DOC_TEST_ORDER[@]} - 1; i >= 0; i--)); do
    kill "${DOC_TEST_ORDER[i]}" 2>/dev/null || true
    wait "${DOC_TEST_ORDER[i]}" 2>/dev/null || true
  done
}"""


def script(runnable: Sequence[Block], work: Path) -> str:
    """Blocks as one bash script run in ``work``, each first writing where it is into
    ``.doc-test/current`` so that a failure names its block. Files the text tells the
    reader to save are written into ``work``."""
    parts = [
        "set -euo pipefail",
        f'export PATH="{Path(sys.executable).parent}:$PATH"',
        SERVICES,
        "trap doc_test_started_service DEBUG",
        "trap doc_test_stop_services EXIT",
    ]
    for index, block in enumerate(runnable):
        if block.saved_as:
            (work / block.saved_as).write_text(block.text)
        if not runs(block):
            continue
        parts.append(f"echo {block.where} > .doc-test/current")
        if block.language == "python":
            source = work / ".doc-test" / f"block{index}.py"
            source.write_text(block.text)
            parts.append(f"python {source}")
        else:
            parts.append(block.text)
        parts.append("doc_test_services_ran")
    parts.append("touch .doc-test/done")
    return "\n".join(parts) + "\n"


def run_blocks(runnable: Sequence[Block], work: Path, timeout: float = BLOCK_TIMEOUT) -> str | None:
    """Run the blocks in ``work`` (:func:`script`): None when every one succeeded, else
    which block failed or ran longer than ``timeout`` seconds, with the end of the output.
    Whatever is still running at the end is stopped (SIGTERM, then SIGKILL)."""
    (work / ".doc-test").mkdir(parents=True)
    marker = work / ".doc-test" / "current"
    (work / ".doc-test" / "script.sh").write_text(script(runnable, work))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVLDP_")}
    log = work / ".doc-test" / "log.txt"
    with log.open("w") as out:
        shell = subprocess.Popen(
            ["bash", ".doc-test/script.sh"],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def where() -> str:
        return marker.read_text().strip() if marker.exists() else "the prelude"

    block, started, failure = where(), time.monotonic(), None
    try:
        while shell.poll() is None and failure is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                shell.wait(timeout=0.5)
            if where() != block:
                block, started = where(), time.monotonic()
            if time.monotonic() - started > timeout:
                failure = f"{block} ran longer than {timeout:g} s"
    finally:
        for stop in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, stop)
            with contextlib.suppress(subprocess.TimeoutExpired):
                shell.wait(timeout=30)
    if failure is None and (shell.returncode != 0 or not (work / ".doc-test" / "done").exists()):
        failure = f"{where()} failed (status {shell.returncode})"
    return None if failure is None else f"{failure}:\n{log.read_text()[-4000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("doc", RUNNABLE_DOCS)
def test_the_shell_and_python_blocks_run_as_written(doc: str, tmp_path: Path) -> None:
    for name in CLONE_FILES:
        shutil.copytree(REPO / name, tmp_path / name)
    failure = run_blocks(blocks(doc), tmp_path)
    assert failure is None, failure


def sample(*texts: str, language: str = "sh") -> list[Block]:
    return [Block("sample.md", line, language, text, None) for line, text in enumerate(texts, start=1)]


def test_the_runner_names_a_failing_block(tmp_path: Path) -> None:
    failure = run_blocks(sample("true", "echo ran > out.txt; false", "touch never"), tmp_path)
    assert failure is not None and failure.startswith("sample.md:2 failed (status 1)")
    assert (tmp_path / "out.txt").exists() and not (tmp_path / "never").exists()


def test_the_runner_fails_a_service_that_died(tmp_path: Path) -> None:
    failure = run_blocks(sample("(exit 3) &", "wait -n || true; true"), tmp_path)
    assert failure is not None and "a service started with & ended with status 3" in failure


def test_the_runner_stops_a_block_that_runs_too_long(tmp_path: Path) -> None:
    failure = run_blocks(sample("true", "sleep 600"), tmp_path, timeout=1)
    assert failure is not None and failure.startswith("sample.md:2 ran longer than 1 s")


def test_the_runner_runs_python_seeing_the_shells_exports(tmp_path: Path) -> None:
    python = sample("import os; open('env.txt', 'w').write(os.environ['X'])", language="python")
    assert run_blocks([*sample("export X=1"), *python], tmp_path) is None
    assert (tmp_path / "env.txt").read_text() == "1"
