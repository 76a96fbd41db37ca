"""Writing a file atomically and durably, for the callers that keep state in one file and
the commands whose output files must never be seen half written.

The aggregator's checkpoint (:class:`kvldp.aggregator.state.CheckpointStore`) and a
device's privacy state (:class:`kvldp.producer.device_state.DeviceState`) are each one
file that must never be seen half written: a crash at any point leaves either the old
content or the new one. :func:`write_atomically` writes a temporary file in the same
directory (created with the final mode, so a secret is never readable by others, even
for an instant), fsyncs it, renames it over the target (atomic on POSIX) and fsyncs the
directory, so that the rename itself survives a power loss.

A command's output that a reader would take at its word (a population's true
statistics, a results table) is written the same way, with :func:`write_atomically` or,
for a table, :func:`write_csv`: an interrupted command leaves the old file or none.

A secret created once and kept for good (the aggregator's ledger key,
:mod:`kvldp.aggregator.ledgerkey`) goes through :func:`create_once`: the same temporary
file, linked to its name only if nothing holds that name yet, so that two processes
starting at once keep the first one's secret and a crash never leaves the name empty.
"""

from __future__ import annotations

import csv
import io
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data``, a file of permissions ``mode``, atomically and durably.

    The directory must exist. On any failure (an :class:`OSError` is raised as it is) the
    temporary file is removed and ``path`` keeps what it held before.
    """
    with _synced_copy(path, data, mode) as tmp:
        os.replace(tmp, path)
    _sync_directory(path.parent)


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Replace ``path`` with a CSV table (UTF-8, mode 0644) of ``rows``, dicts of
    ``columns``, atomically and durably."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(columns))
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, text.getvalue().encode("utf-8"), mode=0o644)


def create_once(path: Path, data: bytes, mode: int = 0o600) -> bool:
    """Create ``path`` holding ``data`` (permissions ``mode``) unless something already
    holds that name, atomically and durably; whether this call created it.

    The directory must exist. Whatever happens, ``path`` is either absent or complete.
    """
    with _synced_copy(path, data, mode) as tmp:
        try:
            os.link(tmp, path)  # refused if the name exists: the first creator wins
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
    _sync_directory(path.parent)
    return True


@contextmanager
def _synced_copy(path: Path, data: bytes, mode: int) -> Iterator[Path]:
    """A temporary file beside ``path`` holding ``data`` on disk; removed if the body fails."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)  # the mode as asked, whatever the umask
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _sync_directory(directory: Path) -> None:
    """fsync a directory, so that a rename or link in it survives a power loss."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
