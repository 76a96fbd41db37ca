"""Replacing a file atomically and durably, for the callers that keep state in one file.

The aggregator's checkpoint (:class:`kvldp.aggregator.state.CheckpointStore`) and a
device's privacy state (:class:`kvldp.producer.device_state.DeviceState`) are each one
file that must never be seen half written: a crash at any point leaves either the old
content or the new one. :func:`write_atomically` writes a temporary file in the same
directory (created with the final mode, so a secret is never readable by others, even
for an instant), fsyncs it, renames it over the target (atomic on POSIX) and fsyncs the
directory, so that the rename itself survives a power loss.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data``, a file of permissions ``mode``, atomically and durably.

    The directory must exist. On any failure (an :class:`OSError` is raised as it is) the
    temporary file is removed and ``path`` keeps what it held before.
    """
    directory = path.parent
    tmp = directory / f".{path.name}.{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)  # the mode as asked, whatever the umask
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
