"""An exclusive lock on a file, so that processes sharing it change it one at a time.

A device's state file (:mod:`kvldp.producer.device_state`) may be shared by several
processes of one device: an app and its background service, or a restarted process while
the old one still runs. Every change to it is a read-modify-write, which only one of them
may do at a time. An aggregator's checkpoint (:class:`kvldp.aggregator.state.CheckpointStore`)
is held by one aggregator for as long as it runs. The file itself cannot carry the lock, since every write replaces it by
a rename (:func:`kvldp.common.files.atomic_file.write_atomically`) and a lock would stay with
the old file; :class:`FileLock` locks a sibling that is never replaced or removed,
``<file>.lock`` (empty, mode 0600).

The lock is a POSIX ``flock``, which belongs to an open file description: two opens of
the lock file exclude each other whether they are in two processes or in one, so two
collectors in one process sharing a file wait for each other too. The wait is bounded:
non-blocking attempts, with pauses growing from 0.1 ms to 5 ms, until the timeout
(:data:`LOCK_TIMEOUT_S` by default), then :class:`LockTimeout`, one line naming the file.
A lock is released when its holder releases it or exits, however it exits.

Where locks cannot be trusted the file is refused with :class:`CannotLock` rather than
shared without one: a platform without ``fcntl`` (Windows), a lock file that cannot be
opened, a file system whose ``flock`` fails (ENOLCK, ENOSYS, EOPNOTSUPP, EINVAL), and,
when asked (``verify``), one that grants locks it does not enforce (some FUSE and network
mounts): while the lock is held, a second open of the lock file must be refused it. What
no check on one host can see is a network file system whose locks are kept by each client
alone (NFS mounted with ``local_lock``, or clients that do not share a lock manager):
processes on other hosts are not excluded.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kvldp.common.errors import KvldpError

try:
    import fcntl
except ImportError:  # Windows: no flock, so a shared file is refused (CannotLock)
    fcntl = None  # type: ignore[assignment]

#: seconds an operation waits for another holder of the lock before it gives up
LOCK_TIMEOUT_S = 10.0
#: the pauses between attempts while another process holds the lock
FIRST_PAUSE_S = 0.0001
LONGEST_PAUSE_S = 0.005


class LockTimeout(KvldpError):
    """Another process (or another open in this one) held the lock for longer than the wait
    allowed; nothing was changed."""


class CannotLock(KvldpError):
    """The file cannot be locked here: no ``fcntl``, an unusable lock file, or a file system
    that does not keep locks."""


def lock_file(path: Path) -> Path:
    """The file whose lock stands for ``path``'s: ``<path>.lock`` beside it."""
    return path.with_name(f"{path.name}.lock")


class FileLock:
    """The exclusive lock of ``path`` (the ``flock`` of :func:`lock_file`), named ``label``
    in its errors (``device state /data/phone.state``)."""

    def __init__(self, path: Path, label: str) -> None:
        self.path = lock_file(path)
        self.label = label
        self._fd: int | None = None

    def acquire(self, timeout: float, verify: bool = False) -> None:
        """Take the lock, waiting at most ``timeout`` seconds for another holder
        (:class:`LockTimeout`); ``verify`` also checks that the file system enforces it
        (:class:`CannotLock` if it does not, or cannot lock at all)."""
        if fcntl is None:
            raise CannotLock(
                f"{self.label}: this platform has no fcntl.flock, which a state file needs so that "
                "processes sharing it change it one at a time; keep the state in memory (no path)"
            )
        fd = self._open()
        try:
            self._wait(fd, timeout)
            if verify:
                self._check_enforced()
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Let the next holder in (closing the lock file releases its lock)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise CannotLock(
                f"{self.label}: cannot open its lock file {self.path} ({exc.strerror})"
            ) from None

    def _wait(self, fd: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pause = FIRST_PAUSE_S
        while not self._try(fd):
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockTimeout(
                    f"{self.label}: another process held its lock ({self.path}) for all of the "
                    f"{timeout:g} s this one waits; nothing was changed"
                )
            time.sleep(min(pause, left))
            pause = min(2 * pause, LONGEST_PAUSE_S)

    def _try(self, fd: int) -> bool:
        """One non-blocking attempt: whether the lock was taken."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise CannotLock(
                f"{self.label}: the file system cannot lock {self.path} ({exc.strerror}); "
                "keep the state on a local file system"
            ) from None
        return True

    def _check_enforced(self) -> None:
        """Refuse a file system that grants a second lock of the file while one is held."""
        probe = self._open()
        try:
            granted = self._try(probe)
        finally:
            os.close(probe)
        if granted:
            raise CannotLock(
                f"{self.label}: the file system does not enforce locks (a second lock of {self.path} "
                "was granted while one was held), so processes sharing the file could overspend; "
                "keep the state on a local file system"
            )
