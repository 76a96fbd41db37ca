"""Unusable paths on the command line and in the SDK: one line naming the path and the
problem, exit status 2, checked before any work (no Kafka is reached: the address given
answers nothing), and nothing created."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvldp.aggregator.service import Aggregator
from kvldp.cli import main
from kvldp.common.config.collection_file import load_collection
from kvldp.common.files.path_checks import UnusablePath, readable_file, writable_directory, writable_file
from kvldp.producer.collector import Collector
from kvldp.producer.device_state import InvalidDeviceState

from support.package import REPO

COLLECTION = str(REPO / "deploy" / "collections" / "checkout.toml")
#: an address where no broker answers: a check that came too late would report it instead
NOWHERE = ["--bootstrap-servers", "127.0.0.1:1"]
#: a listening command's port: any free one (a fixed port may be another process's)
AGGREGATE_PORT = ["--metrics-port", "0"]
GATEWAY_PORT = ["--port", "0"]
#: kvldp produce of ten simulated devices to no broker
PRODUCE_TEN = ["produce", "--collection", COLLECTION, "--simulate", "gaussian", "--users", "10", *NOWHERE]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A directory that takes no new files: a 0500 directory, or for root (whom modes do
    not stop) /sys, which takes no new regular files."""
    if os.geteuid() == 0:
        yield Path("/sys")
        return
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        yield directory
    finally:
        directory.chmod(0o700)


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("x")
    return path


#: commands and the path flag of each kind they take, as argv with PATH in place of the path
DIRECTORIES = {
    "aggregate --state-dir": [
        "aggregate",
        "--collection",
        COLLECTION,
        *NOWHERE,
        *AGGREGATE_PORT,
        "--state-dir",
        "PATH",
    ],
    "produce --state-dir": [
        *PRODUCE_TEN,
        "--state-dir",
        "PATH",
    ],
    "evaluate --out": ["evaluate", "--experiment", "sun-fig1", "--quick", "--out", "PATH"],
    "attack --out": ["attack", "--mechanism", "pckv_grr", "--keys", "3", "--epsilon", "1", "--out", "PATH"],
    "devices keygen --out": ["devices", "keygen", "--out", "PATH"],
    "bench reliability --keep": ["bench", "reliability", "--scale", "fast", "--keep", "PATH"],
}
OUTPUT_FILES = {
    "produce --truth": [
        *PRODUCE_TEN,
        "--truth",
        "PATH",
    ],
    "record --out": ["record", "--collection", COLLECTION, *NOWHERE, "--out", "PATH"],
    "bench reliability --markdown": ["bench", "reliability", "--scale", "fast", "--markdown", "PATH"],
}
INPUT_FILES = {
    "devices token --key": ["devices", "token", "--key", "PATH", "--device", "d", "--audience", "a"],
    "produce --from-csv": ["produce", "--collection", COLLECTION, *NOWHERE, "--from-csv", "PATH"],
    "produce --token-file": [
        "produce",
        "--collection",
        COLLECTION,
        "--from-csv",
        COLLECTION,
        "--endpoint",
        "https://127.0.0.1:1",
        "--token-file",
        "PATH",
    ],
    "produce --ca-file": [
        "produce",
        "--collection",
        COLLECTION,
        "--from-csv",
        COLLECTION,
        "--endpoint",
        "https://127.0.0.1:1",
        "--token-file",
        COLLECTION,
        "--ca-file",
        "PATH",
    ],
    "aggregate --from-file": ["aggregate", "--collection", COLLECTION, "--from-file", "PATH"],
    "aggregate --metrics-tls-cert": [
        "aggregate",
        "--collection",
        COLLECTION,
        *NOWHERE,
        *AGGREGATE_PORT,
        "--metrics-tls-cert",
        "PATH",
        "--metrics-tls-key",
        COLLECTION,
    ],
    "aggregate --metrics-basic-auth-file": [
        "aggregate",
        "--collection",
        COLLECTION,
        *NOWHERE,
        *AGGREGATE_PORT,
        "--metrics-basic-auth-file",
        "PATH",
    ],
    "gateway --tls-key": [
        "gateway",
        "--collection",
        COLLECTION,
        "--jwks",
        COLLECTION,
        "--audience",
        "a",
        *NOWHERE,
        *GATEWAY_PORT,
        "--tls-cert",
        COLLECTION,
        "--tls-key",
        "PATH",
    ],
    "gateway --jwks": [
        "gateway",
        "--collection",
        COLLECTION,
        "--jwks",
        "PATH",
        "--audience",
        "a",
        *NOWHERE,
        *GATEWAY_PORT,
    ],
    "broker --tls-cert": ["broker", "--port", "0", "--tls-cert", "PATH", "--tls-key", COLLECTION],
    "replay": ["replay", "PATH", *NOWHERE],
}


def refusal(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], path: Path | str) -> str:
    """What ``kvldp argv`` (PATH replaced by ``path``) says, having exited 2 and created nothing."""
    before = sorted(tmp_path.rglob("*"))
    assert main([str(path) if word == "PATH" else word for word in argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert sorted(tmp_path.rglob("*")) == before
    return err.removeprefix("kvldp: error: ").strip()


def flag_of(command: str, argv: list[str]) -> str:
    return "recording" if command == "replay" else argv[argv.index("PATH") - 1]


BadPath = Callable[[Path, Path, Path], tuple[Path | str, str]]
#: a path a directory flag cannot use, and what the message says after "FLAG PATH: "
BAD_DIRECTORIES: dict[str, BadPath] = {
    "under /proc": lambda tmp, file, ro: ("/proc/kvldp-nothing", "cannot create it in /proc ("),
    "under a file": lambda tmp, file, ro: (file / "x", f"cannot create it, {file} is not a directory"),
    "a file": lambda tmp, file, ro: (file, "is not a directory"),
    "read-only": lambda tmp, file, ro: (ro / "x", f"cannot create it in {ro} ("),
}
BAD_OUTPUT_FILES: dict[str, BadPath] = {
    "no directory": lambda tmp, file, ro: (tmp / "none" / "x", f"directory {tmp / 'none'} does not exist"),
    "under /proc": lambda tmp, file, ro: ("/proc/kvldp-nothing/x", "directory /proc/kvldp-nothing does not"),
    "under a file": lambda tmp, file, ro: (file / "x", f"{file} is not a directory"),
    "a directory": lambda tmp, file, ro: (tmp, "is a directory; give a file name"),
    "read-only": lambda tmp, file, ro: (ro / "x", f"cannot write in {ro} ("),
}
BAD_INPUT_FILES: dict[str, BadPath] = {
    "missing": lambda tmp, file, ro: (tmp / "none", "does not exist"),
    "under a file": lambda tmp, file, ro: (file / "x", f"does not exist ({file} is not a directory)"),
    "a directory": lambda tmp, file, ro: (tmp, "is a directory, not a file"),
}


@pytest.mark.parametrize(
    ("command", "case"),
    [
        *((c, b) for c in DIRECTORIES for b in BAD_DIRECTORIES),
        *((c, b) for c in OUTPUT_FILES for b in BAD_OUTPUT_FILES),
        *((c, b) for c in INPUT_FILES for b in BAD_INPUT_FILES),
    ],
)
def test_an_unusable_path_is_one_line_and_exit_2_before_any_work(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    a_file: Path,
    read_only: Path,
    command: str,
    case: str,
) -> None:
    argv, bad = next(
        (kinds[command], cases[case])
        for kinds, cases in (
            (DIRECTORIES, BAD_DIRECTORIES),
            (OUTPUT_FILES, BAD_OUTPUT_FILES),
            (INPUT_FILES, BAD_INPUT_FILES),
        )
        if command in kinds
    )
    path, problem = bad(tmp_path, a_file, read_only)
    message = refusal(capsys, tmp_path, argv, path)
    assert message.startswith(f"{flag_of(command, argv)} {path}: {problem}"), message


def test_the_checks_leave_nothing_behind_and_create_nothing(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper"
    assert writable_directory(target, "--out") == target
    assert writable_file(tmp_path / "out.json", "--truth") == tmp_path / "out.json"
    assert readable_file(__file__, "--key") == Path(__file__)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_unwritable_output_file_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes whatever the mode: a file on /proc it cannot write
        target = Path("/proc/version")
        with pytest.raises(UnusablePath, match=r"^--truth /proc/version: cannot write in /proc \("):
            writable_file(target, "--truth")
        return
    target = tmp_path / "kept.json"
    target.write_text("{}")
    target.chmod(0o400)
    with pytest.raises(UnusablePath, match=r"cannot write it \(Permission denied\)"):
        writable_file(target, "--truth")


def test_the_aggregator_refuses_an_unusable_state_directory_up_front(a_file: Path) -> None:
    collection = load_collection(COLLECTION)
    for state_dir, problem in (
        ("/proc/kvldp-nothing", "cannot create it in /proc"),
        (a_file / "x", f"cannot create it, {a_file} is not a directory"),
        (a_file, "is not a directory"),
    ):
        with pytest.raises(UnusablePath, match=f"^state directory {state_dir}: {problem}"):
            Aggregator(collection, "127.0.0.1:1", state_dir=state_dir)


def test_the_sdk_refuses_an_unusable_state_file_up_front(
    tmp_path: Path, a_file: Path, read_only: Path
) -> None:
    collection = load_collection(COLLECTION)
    for state_path, problem in (
        ("/proc/kvldp-nothing/state", "directory /proc/kvldp-nothing does not exist"),
        (a_file / "state", f"{a_file} is not a directory"),
        (tmp_path, "is a directory; give a file name"),
        (read_only / "state", f"cannot write in {read_only} ("),
    ):
        with pytest.raises(
            InvalidDeviceState, match="^" + re.escape(f"device state {state_path}: {problem}")
        ):
            Collector(collection, bootstrap_servers="127.0.0.1:1", state_path=state_path)


def test_evaluate_checks_its_default_folder_before_running_the_grid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("results").write_text("x")
    message = refusal(capsys, tmp_path, ["evaluate", "--experiment", "sun-fig1", "--quick"], "")
    assert message == "--out (default) results/sun-fig1: cannot create it, results is not a directory"


def test_keygen_leaves_no_key_without_its_jwks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    jwks = tmp_path / "keys" / "jwks.json"
    jwks.mkdir(parents=True)  # the key set cannot be written: the private key must not stay
    assert main(["devices", "keygen", "--out", str(jwks.parent)]) == 2
    assert capsys.readouterr().err == f"kvldp: error: cannot write {str(jwks)!r}: Is a directory\n"
    assert list(jwks.parent.iterdir()) == [jwks]
