"""Atomic replacement of a state file: a crash before the rename leaves the old file whole,
the mode is the one asked for, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvldp.common.files.atomic_file import create_once, write_atomically, write_csv

from support import run


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_new_content_replaces_the_old_with_the_mode_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "state"
    write_atomically(path, b"first")
    assert path.read_bytes() == b"first" and mode_of(path) == 0o600
    old_umask = os.umask(0o077)  # the mode is applied whatever the umask takes away
    try:
        write_atomically(path, b"second", mode=0o640)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == b"second" and mode_of(path) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_a_crash_between_write_and_rename_leaves_the_old_file_intact(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"old")
    # a child process that dies (no cleanup, no exception handler) where the rename would be
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from kvldp.common.files.atomic_file import write_atomically\n"
        "os.replace = lambda *args: os._exit(9)\n"
        "write_atomically(Path(sys.argv[1]), b'new')\n"
    )
    crashed = run([sys.executable, "-P", "-c", code, str(path)])
    assert crashed.returncode == 9, crashed.stderr
    assert path.read_bytes() == b"old"
    # what the crash left is a temporary file beside it, written in full, never the file itself
    (left,) = [p for p in tmp_path.iterdir() if p != path]
    assert left.name.startswith(".state.") and left.name.endswith(".tmp") and left.read_bytes() == b"new"
    write_atomically(path, b"newer")
    assert path.read_bytes() == b"newer"


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_write_removes_its_temporary_file_and_keeps_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"old")

    def fail(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(OSError, match="No space left on device"):
        write_atomically(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_a_missing_directory_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "missing" / "state", b"data")
    assert list(tmp_path.iterdir()) == []


def test_create_once_keeps_the_first_content(tmp_path: Path) -> None:
    path = tmp_path / "key"
    assert create_once(path, b"first", mode=0o600)
    assert not create_once(path, b"second")  # the name is taken: nothing is replaced
    assert path.read_bytes() == b"first" and mode_of(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_create_once_leaves_no_name_when_it_fails(tmp_path: Path) -> None:
    missing = tmp_path / "absent" / "key"
    with pytest.raises(FileNotFoundError):
        create_once(missing, b"secret")
    assert not (tmp_path / "absent").exists()


def test_a_table_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    write_csv(path, ["a", "b"], [{"a": 1, "b": "x"}, {"a": 2.5, "b": ""}])
    assert path.read_bytes() == b"a,b\r\n1,x\r\n2.5,\r\n" and mode_of(path) == 0o644

    def rows() -> Iterator[dict[str, object]]:
        yield {"a": 3, "b": "y"}
        raise RuntimeError("the command stops half way")

    with pytest.raises(RuntimeError):
        write_csv(path, ["a", "b"], rows())
    assert path.read_bytes() == b"a,b\r\n1,x\r\n2.5,\r\n" and sorted(tmp_path.iterdir()) == [path]
