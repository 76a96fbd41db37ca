"""Checks of the paths a user names, made before any work starts.

A command or SDK object given a path it cannot use would otherwise fail half way — after
connecting to Kafka, after publishing, with a traceback from deep inside. These checks
run first instead: a file to read must exist, not be a directory and be readable; a file
to write must not be a directory, and its directory must exist and take new files; a
directory to keep state or results in must be one (or be creatable under the nearest
directory that exists) and take new files.

Whether a directory takes new files is probed by creating and removing a file in it: the
permission bits alone say nothing for root, nor for a read-only file system or a virtual
one such as ``/proc``. A check creates nothing that outlives it. Each refusal is an
:class:`UnusablePath`, one line naming the path and the problem.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from kvldp.common.errors import KvldpError


class UnusablePath(KvldpError):
    """A path the user named cannot be used as asked."""


def readable_file(path: str | Path, label: str) -> Path:
    """``path`` as a :class:`Path` if it is a readable file (anything but a directory)."""
    where = Path(path)
    mode = _mode(where, label)
    if mode is None:
        raise UnusablePath(f"{label} {where}: does not exist{_blocked(where)}")
    if stat.S_ISDIR(mode):
        raise UnusablePath(f"{label} {where}: is a directory, not a file")
    if not os.access(where, os.R_OK):
        raise UnusablePath(f"{label} {where}: cannot read it (Permission denied)")
    return where


def writable_file(path: str | Path, label: str) -> Path:
    """``path`` as a :class:`Path` if a file can be written there: not a directory, in an
    existing directory that takes new files (a file replaced atomically is written beside
    it first), and, if it exists, writable."""
    where = Path(path)
    mode = _mode(where, label)
    if mode is not None and stat.S_ISDIR(mode):
        raise UnusablePath(f"{label} {where}: is a directory; give a file name")
    directory = where.parent
    directory_mode = _mode(directory, label)
    if directory_mode is None:
        raise UnusablePath(f"{label} {where}: directory {directory} does not exist{_blocked(directory)}")
    if not stat.S_ISDIR(directory_mode):
        raise UnusablePath(f"{label} {where}: {directory} is not a directory")
    problem = _cannot_create_in(directory)
    if problem is not None:
        raise UnusablePath(f"{label} {where}: cannot write in {directory} ({problem})")
    if mode is not None and not os.access(where, os.W_OK):
        raise UnusablePath(f"{label} {where}: cannot write it (Permission denied)")
    return where


def writable_directory(path: str | Path, label: str) -> Path:
    """``path`` as a :class:`Path` if it is a directory that takes new files, or can be
    created as one (it is not created here)."""
    where = Path(path)
    existing = where
    mode = _mode(existing, label)
    while mode is None and existing != existing.parent:
        existing = existing.parent
        mode = _mode(existing, label)
    if mode is None:  # not even the root or the working directory: nothing to create in
        raise UnusablePath(f"{label} {where}: cannot create it (No such file or directory)")
    if not stat.S_ISDIR(mode):
        if existing == where:
            raise UnusablePath(f"{label} {where}: is not a directory")
        raise UnusablePath(f"{label} {where}: cannot create it, {existing} is not a directory")
    problem = _cannot_create_in(existing)
    if problem is not None:
        if existing == where:
            raise UnusablePath(f"{label} {where}: cannot write in it ({problem})")
        raise UnusablePath(f"{label} {where}: cannot create it in {existing} ({problem})")
    return where


def _mode(path: Path, label: str) -> int | None:
    """The file mode of ``path``, or None if nothing is there (or something on the way
    is not a directory)."""
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise UnusablePath(f"{label} {path}: cannot look it up ({exc.strerror})") from None


def _blocked(path: Path) -> str:
    """Why nothing can be at ``path`` when something on the way is a file: `` (F is not a
    directory)``; else nothing."""
    try:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    except OSError:
        return ""
    return "" if blocker is None else f" ({blocker} is not a directory)"


def _cannot_create_in(directory: Path) -> str | None:
    """Why a new file cannot be created in ``directory`` (None if it can): creates one and
    removes it."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".kvldp-probe-", dir=directory)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None
