"""What a device remembers about one collection so that its privacy spending is kept.

A device that reports for a long time must never forget what it already spent
(:mod:`kvldp.common.spec.privacy`). :class:`DeviceState` holds, for one collection:

* the device **secret** (:func:`kvldp.common.guarantees.memo.new_secret`, created once, never sent), which
  keys the alpha-point rounding and the memoized reports;
* the **memo table**: state fingerprint -> the payload first derived for that state. A
  re-send is a table lookup, so it is byte-identical even if numpy's generators change
  (with ``privacy.instantaneous_epsilon`` the table keeps the permanent report, and the
  collector randomizes every send of it again);
* the **ledger**: how many reports were charged epsilon, the last report period, and
  for an interactive collection (PrivKVM) the rounds the device reported in: round r
  costs the mechanism's ``round_epsilon(r)``, and a second report in one round is refused;
* the **mirror of the aggregator's budget** (``aggregate.max_reports_per_device`` per
  ``budget_window``, :func:`server_budget`): the reports sent in the current budget
  window. The aggregator refuses a device's reports past the limit (``budget_exceeded``)
  and the device is never told, so the device counts the same way and does not send, nor
  pay epsilon for, a report that would be refused (``SKIPPED_BUDGET``).

With a path the state lives in one file (msgpack, tagged with a format name, a version,
the collection's name and digest), written atomically with mode 0600
(:func:`kvldp.common.files.atomic_file.write_atomically`). The spending rule always records
a spend in the file *before* the report is handed to Kafka: a crash may lose a report,
never a spend. A file that is corrupt, of another format, or of another collection (or
digest) raises :class:`InvalidDeviceState` naming the file, and is left untouched.

One file may be shared by several processes of a device (an app and its background
service, a restarted process while the old one still runs), and the rule holds across
them as it holds in one: every read-modify-write of the file (:meth:`DeviceState.locked`,
and every rule method) holds the file's exclusive lock (:mod:`kvldp.common.files.file_lock`),
reads the file again, applies the rule to what is on disk, writes and only then lets the
next process in. Otherwise two processes would each decide from their own copy and each
send (two reports in one period, a cap passed twice over), and the last write would
forget the other's spend. The file and its secret are created exactly once
(:func:`kvldp.common.files.atomic_file.create_once`, under the lock): processes starting together
all read the one secret, so a memoized state has one payload whoever sends it. A process
waits for the lock at most ``lock_timeout`` seconds
(:class:`~kvldp.common.files.file_lock.LockTimeout`, nothing spent); a file system that cannot
lock, or grants locks it does not enforce, is refused (:class:`InvalidDeviceState`).

Without a path the state lives in memory only. A gateway or simulator keeps one state per
device id it reports for in a :class:`Fleet`: in memory, or one file per device in a
directory, each shared and locked the same way.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import math
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import msgpack

from kvldp.common.config.collection import Collection
from kvldp.common.data.schema import Report
from kvldp.common.errors import KvldpError
from kvldp.common.files.atomic_file import create_once, write_atomically
from kvldp.common.files.file_lock import LOCK_TIMEOUT_S, CannotLock, FileLock
from kvldp.common.files.path_checks import UnusablePath, writable_directory, writable_file
from kvldp.common.guarantees.memo import SECRET_BYTES, alphas, memoized_report, new_secret, state_of
from kvldp.common.messages.control_record import interactive_mechanism, is_interactive
from kvldp.common.primitives import FloatArray, IntArray
from kvldp.common.spec.privacy import CAP_SLACK, spent, would_exceed

FORMAT = "kvldp-device-state"
VERSION = 3
_V1_FIELDS = frozenset(
    ("format", "version", "collection", "digest", "device_id", "secret", "charged", "last_period", "memo")
)
#: the fields of each version: 2 adds the rounds, 3 the budget window mirror
_FIELDS = {
    1: _V1_FIELDS,
    2: _V1_FIELDS | {"rounds"},
    3: _V1_FIELDS | {"rounds", "budget_window", "budget_used"},
}
#: what a state file holds of a device, besides its format and collection
_KEPT = ("device_id", "secret", "charged", "last_period", "memo", "rounds", "budget_window", "budget_used")

P = ParamSpec("P")
R = TypeVar("R")


class InvalidDeviceState(KvldpError):
    """A device state file cannot be used (corrupt, another format, another collection,
    not writable, or on a file system that cannot lock it)."""


class ReportStatus(enum.Enum):
    """What happened to one device's report."""

    #: sent; it cost the collection's epsilon (a state never reported before, or no memoization)
    SENT = "sent"
    #: the stored payload of an already reported state was sent again (with
    #: ``privacy.instantaneous_epsilon``, randomized again); it cost nothing
    RESENT = "resent"
    #: not sent: the device already reported in this ``report_period``, or in a later one (a
    #: process sharing the state file with a later clock, or a clock set back)
    SKIPPED_PERIOD = "skipped_period"
    #: not sent, nothing spent: the device already sent ``aggregate.max_reports_per_device``
    #: reports in this ``budget_window``, and the aggregator would refuse it (``budget_exceeded``);
    #: or its count moved on to a later window, so this one's count is not known
    SKIPPED_BUDGET = "skipped_budget"
    #: not sent: it would have exceeded ``lifetime_epsilon`` (``Collector.report`` raises
    #: :class:`kvldp.common.spec.privacy.PrivacyBudgetExhausted` instead of returning this)
    EXHAUSTED = "exhausted"
    #: not sent: the device already reported in the open round (interactive collections)
    SKIPPED_ROUND = "skipped_round"
    #: not sent: the collection's last round closed (interactive collections)
    ROUNDS_DONE = "rounds_done"


def server_budget(collection: Collection) -> tuple[int, int] | None:
    """``(max_reports_per_device, budget_window_s)`` when a device of ``collection`` must
    mirror the aggregator's budget ledger itself, else None: no limit, or a
    ``report_period``, which the device keeps as its own rule (``SKIPPED_PERIOD``), or an
    interactive collection, whose rounds the device keeps."""
    limit = collection.aggregate.max_reports_per_device
    if not limit or collection.privacy.report_period_s is not None or is_interactive(collection):
        return None
    return limit, collection.aggregate.budget_window_s


def tracks_privacy(collection: Collection) -> bool:
    """Whether devices of ``collection`` have anything to remember: a ``[privacy]`` table,
    or an aggregator budget they mirror (:func:`server_budget`)."""
    return bool(collection.privacy.as_table()) or server_budget(collection) is not None


def budget_window_of(collection: Collection, ts_ms: int) -> int | None:
    """The aggregator's budget window of a report at ``ts_ms`` (``floor(ts_ms / window_ms)``)
    when the device mirrors the budget (:func:`server_budget`), else None."""
    budget = server_budget(collection)
    return None if budget is None else ts_ms // (budget[1] * 1000)


def period_of(collection: Collection, ts_ms: int) -> int | None:
    """The report period index of a report at ``ts_ms`` (the aggregator's tumbling
    window, ``floor(ts_ms / period_ms)``), or None without ``report_period``."""
    period_s = collection.privacy.report_period_s
    return None if period_s is None else ts_ms // (period_s * 1000)


def _exclusive(
    method: Callable[Concatenate[DeviceState, P], R],
) -> Callable[Concatenate[DeviceState, P], R]:
    """A rule method applied to what the state file holds, under its lock
    (:meth:`DeviceState.locked`)."""

    @functools.wraps(method)
    def under_lock(state: DeviceState, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with state.locked():
            return method(state, *args, **kwargs)

    return under_lock


@contextmanager
def _holding(path: Path, timeout: float, verify: bool = False) -> Iterator[None]:
    """Hold the lock of the state file ``path`` (:class:`~kvldp.common.files.file_lock.FileLock`);
    a file system that cannot keep it is an :class:`InvalidDeviceState`."""
    lock = FileLock(path, f"device state {path}")
    try:
        lock.acquire(timeout, verify)
    except CannotLock as exc:
        raise InvalidDeviceState(str(exc)) from None
    try:
        yield
    finally:
        lock.release()


@dataclass
class DeviceState:
    """One device's secret, memo table and ledger for one collection."""

    collection: str
    digest: int
    device_id: str
    secret: bytes
    memo: dict[str, Report] = field(default_factory=dict)
    charged: int = 0
    last_period: int | None = None
    #: rounds (0-based) this device reported in, for an interactive collection
    rounds: list[int] = field(default_factory=list)
    #: the aggregator's budget window of the last report sent, and the reports sent in it
    budget_window: int | None = None
    budget_used: int = 0
    path: Path | None = None
    #: seconds an operation on the file waits for another process holding its lock
    lock_timeout: float = field(default=LOCK_TIMEOUT_S, repr=False, compare=False)
    #: the rounding offsets, derived from the secret once per device (never written)
    _alpha: FloatArray | None = field(default=None, repr=False, compare=False)

    @classmethod
    def new(
        cls,
        collection: Collection,
        device_id: str | None = None,
        path: Path | None = None,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> DeviceState:
        """A fresh state with a new secret (not yet written)."""
        return cls(
            collection=collection.name,
            digest=collection.digest,
            device_id=device_id or uuid.uuid4().hex,
            secret=new_secret(),
            path=path,
            lock_timeout=lock_timeout,
        )

    @classmethod
    def open(
        cls,
        path: str | Path,
        collection: Collection,
        device_id: str | None = None,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> DeviceState:
        """The state at ``path``, created with a new secret if there is no file: exactly
        once, however many processes open it at the same moment (they all get the first
        one's). ``device_id``, when given, is the state's id (written if the file held
        another). A path where the state could not be kept is refused first, and so is a
        file system whose locks do not hold; another process holding the lock for longer
        than ``lock_timeout`` seconds raises :class:`~kvldp.common.files.file_lock.LockTimeout`."""
        try:
            path = writable_file(path, "device state")
        except UnusablePath as exc:
            raise InvalidDeviceState(str(exc)) from None
        state = cls.new(collection, device_id, path, lock_timeout)
        with _holding(path, lock_timeout, verify=True):
            if path.exists() or not state._create():
                state.refresh()
                if device_id and device_id != state.device_id:
                    state.device_id = device_id
                    state.save()
        return state

    @classmethod
    def load(cls, path: Path, collection: Collection) -> DeviceState:
        """The state in the file ``path``, read without its lock (a write replaces the file
        whole, so a read sees one whole state)."""
        return _read(path, collection.name, collection.digest)

    def to_bytes(self) -> bytes:
        obj = {
            "format": FORMAT,
            "version": VERSION,
            "collection": self.collection,
            "digest": self.digest,
            **{name: getattr(self, name) for name in _KEPT},
        }
        return bytes(msgpack.packb(obj, use_bin_type=True))

    def refresh(self) -> None:
        """Read the file again: what every process sharing it spent so far (nothing to do
        for an in-memory state)."""
        if self.path is None:
            return
        on_disk = _read(self.path, self.collection, self.digest)
        if on_disk.secret != self.secret:
            self._alpha = None
        for name in _KEPT:
            setattr(self, name, getattr(on_disk, name))

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the file's lock for a read-modify-write, the state read again first (another
        process may have changed it); the body saves what it changes. An in-memory state
        has nothing to hold."""
        if self.path is None:
            yield
            return
        with _holding(self.path, self.lock_timeout):
            self.refresh()
            yield

    def save(self) -> None:
        """Write the state atomically (nothing to do for an in-memory state)."""
        if self.path is not None:
            self._write(write_atomically)

    def _create(self) -> bool:
        """Write the file if nothing holds its name yet; whether this call created it."""
        return self._write(create_once)

    def _write(self, how: Callable[[Path, bytes, int], R]) -> R:
        assert self.path is not None
        try:
            return how(self.path, self.to_bytes(), 0o600)  # 0600: the file holds the secret
        except OSError as exc:
            raise InvalidDeviceState(f"device state {self.path}: cannot write it ({exc.strerror})") from None

    # ------------------------------------------------------------------ the spending rule
    def spent(self, collection: Collection) -> float:
        """Epsilon this device spent on ``collection`` so far."""
        if is_interactive(collection):
            mechanism = interactive_mechanism(collection)
            return float(sum(mechanism.round_epsilon(r) for r in self.rounds))
        return spent(collection.epsilon, self.charged)

    def remaining(self, collection: Collection) -> float:
        """Epsilon left under ``lifetime_epsilon`` (``inf`` without a cap)."""
        cap = collection.privacy.lifetime_epsilon
        return math.inf if cap is None else max(0.0, cap - self.spent(collection))

    def _reported_since(self, period: int | None) -> bool:
        """Whether the device reported in report period ``period`` or a later one (None: no
        ``report_period``). A later one happens when another process sharing the file took
        the lock first with a later clock, or when the clock was set back; refusing it too
        keeps the periods of the reports sent strictly increasing, so never two in one."""
        return period is not None and self.last_period is not None and period <= self.last_period

    def _over_budget(self, collection: Collection, window: int | None) -> bool:
        """Whether the aggregator may refuse one more report in budget window ``window``
        (None: the device mirrors no budget): the window is full, or earlier than the one
        counted (another process, or a clock set back, moved the count on)."""
        if window is None or self.budget_window is None:
            return False
        if window < self.budget_window:
            return True
        return (
            window == self.budget_window and self.budget_used >= collection.aggregate.max_reports_per_device
        )

    def _count_sent(self, window: int | None) -> None:
        """Count a report about to be sent in budget window ``window`` (the caller saves)."""
        if window is None:
            return
        if window != self.budget_window:
            self.budget_window, self.budget_used = window, 0
        self.budget_used += 1

    @_exclusive
    def memoized(
        self,
        collection: Collection,
        keys: IntArray,
        values: FloatArray,
        period: int | None,
        window: int | None = None,
    ) -> tuple[ReportStatus, Report | None]:
        """Apply the rule to a memoized report of the normalised pairs (``keys``, ``values``)
        at report period ``period`` and budget window ``window`` (:func:`budget_window_of`);
        returns the status and the state's stored payload (None when nothing is sent). A
        spend is written before this returns.

        With ``privacy.instantaneous_epsilon`` the payload is the permanent report, its
        public fields keyed by the secret alone (:func:`~kvldp.common.guarantees.memo.memoized_report`
        with ``permanent_public``), and it is what the memo table keeps; the caller sends
        it randomized again, freshly, every time (the collection's
        :attr:`~kvldp.common.config.collection.Collection.instantaneous_randomizer`). The charge is
        unchanged, epsilon once per state: the sends of a state are post-processing of its
        one permanent report, and each send reveals besides at most ``instantaneous_epsilon``
        about the input."""
        if self._reported_since(period):
            return ReportStatus.SKIPPED_PERIOD, None
        if self._over_budget(collection, window):
            return ReportStatus.SKIPPED_BUDGET, None
        mechanism = collection.mechanism
        if self._alpha is None:
            self._alpha = alphas(self.secret, self.digest, mechanism.d)
        state = state_of(mechanism, keys, values, self._alpha)
        stored = self.memo.get(state.fingerprint)
        if stored is not None:
            self._count_sent(window)
            if period is not None:
                self.last_period = period
            if period is not None or window is not None:
                self.save()
            return ReportStatus.RESENT, stored
        if would_exceed(collection.epsilon, collection.privacy.lifetime_epsilon, self.charged):
            return ReportStatus.EXHAUSTED, None
        permanent_public = collection.privacy.instantaneous_epsilon is not None
        report = memoized_report(mechanism, self.secret, self.digest, state, permanent_public)
        self.memo[state.fingerprint] = report
        self.charged += 1
        self.last_period = period
        self._count_sent(window)
        self.save()
        return ReportStatus.SENT, report

    @_exclusive
    def round_report(self, collection: Collection, round_index: int) -> ReportStatus:
        """Apply the rule to a report in round ``round_index`` of an interactive collection:
        SENT means the round's epsilon is written as spent and the caller may perturb and
        send; a second report in one round is SKIPPED_ROUND."""
        if round_index in self.rounds:
            return ReportStatus.SKIPPED_ROUND
        cost = interactive_mechanism(collection).round_epsilon(round_index)
        cap = collection.privacy.lifetime_epsilon
        if cap is not None and self.spent(collection) + cost > cap * (1.0 + CAP_SLACK):
            return ReportStatus.EXHAUSTED
        self.rounds.append(round_index)
        self.charged += 1
        self.save()
        return ReportStatus.SENT

    @_exclusive
    def fresh(self, collection: Collection, period: int | None, window: int | None = None) -> ReportStatus:
        """Apply the rule to a report perturbed afresh (no memoization) at report period
        ``period`` and budget window ``window``: SENT means the spend is written and the
        caller may perturb and send."""
        if self._reported_since(period):
            return ReportStatus.SKIPPED_PERIOD
        if self._over_budget(collection, window):
            return ReportStatus.SKIPPED_BUDGET
        if would_exceed(collection.epsilon, collection.privacy.lifetime_epsilon, self.charged):
            return ReportStatus.EXHAUSTED
        self.charged += 1
        self.last_period = period
        self._count_sent(window)
        self.save()
        return ReportStatus.SENT

    @_exclusive
    def charge(self, reports: int) -> None:
        """Count ``reports`` reports sent without a rule to apply (a collection without a
        ``[privacy]`` table): each still costs epsilon."""
        self.charged += reports
        self.save()


def _read(path: Path, collection: str, digest: int) -> DeviceState:
    """The state in the file ``path``, which must belong to ``collection`` at ``digest``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidDeviceState(f"device state {path}: cannot read it ({exc.strerror})") from None
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception:
        raise InvalidDeviceState(f"device state {path}: not a kvldp device state (undecodable)") from None
    state = _from_obj(obj, path)
    if state.collection != collection or state.digest != digest:
        raise InvalidDeviceState(
            f"device state {path} belongs to collection {state.collection!r} "
            f"(digest {state.digest:08x}), not {collection!r} (digest {digest:08x})"
        )
    return state


def _from_obj(obj: Any, path: Path) -> DeviceState:
    def bad(what: str) -> InvalidDeviceState:
        return InvalidDeviceState(f"device state {path}: {what}")

    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise bad("not a kvldp device state (no format tag)")
    version = obj.get("version")
    fields = _FIELDS.get(version) if type(version) is int else None
    if fields is None:
        raise bad(f"unsupported version {version!r} (this kvldp reads versions 1 to {VERSION})")
    if set(obj) != fields:
        raise bad(f"fields {sorted(obj)} are not {sorted(fields)}")
    rounds = obj.get("rounds", [])
    window, used = obj.get("budget_window"), obj.get("budget_used", 0)
    checks = (
        ("collection", isinstance(obj["collection"], str)),
        ("digest", type(obj["digest"]) is int and 0 <= obj["digest"] < 2**32),
        ("device_id", isinstance(obj["device_id"], str) and obj["device_id"] != ""),
        ("secret", isinstance(obj["secret"], bytes) and len(obj["secret"]) == SECRET_BYTES),
        ("charged", type(obj["charged"]) is int and obj["charged"] >= 0),
        ("last_period", obj["last_period"] is None or type(obj["last_period"]) is int),
        ("memo", isinstance(obj["memo"], dict) and all(_is_report(r) for r in obj["memo"].values())),
        ("rounds", isinstance(rounds, list) and all(type(r) is int and 0 <= r < 64 for r in rounds)),
        ("budget_window", window is None or type(window) is int),
        ("budget_used", type(used) is int and used >= 0),
    )
    for name, ok in checks:
        if not ok:
            raise bad(f"field {name!r} is invalid")
    return DeviceState(
        collection=obj["collection"],
        digest=obj["digest"],
        device_id=obj["device_id"],
        secret=obj["secret"],
        memo=obj["memo"],
        charged=obj["charged"],
        last_period=obj["last_period"],
        rounds=list(rounds),
        budget_window=window,
        budget_used=used,
        path=path,
    )


def _is_report(report: Any) -> bool:
    return isinstance(report, dict) and all(
        isinstance(k, str) and type(v) in (int, bytes) for k, v in report.items()
    )


@dataclass
class FleetSummary:
    """Outcome counts of one call that reports for many devices."""

    sent: int = 0
    resent: int = 0
    skipped_period: int = 0
    skipped_budget: int = 0
    exhausted: int = 0
    skipped_round: int = 0
    rounds_done: int = 0

    def count(self, status: ReportStatus) -> None:
        setattr(self, status.value, getattr(self, status.value) + 1)

    def add(self, other: FleetSummary) -> None:
        for status in ReportStatus:
            setattr(self, status.value, getattr(self, status.value) + getattr(other, status.value))

    @property
    def published(self) -> int:
        """Reports that went out (new and re-sent)."""
        return self.sent + self.resent

    def __str__(self) -> str:
        text = (
            f"sent {self.sent}, resent {self.resent}, skipped (period) {self.skipped_period}, "
            f"exhausted {self.exhausted}"
        )
        if self.skipped_budget:
            text += f", skipped (budget window) {self.skipped_budget}"
        if self.skipped_round or self.rounds_done:
            text += f", skipped (round) {self.skipped_round}, rounds done {self.rounds_done}"
        return text


class Fleet:
    """Device states by device id (the Kafka key), each with its own secret: in memory, or
    with a ``directory`` one state file per device there (:meth:`path_of`), shared and
    locked like any state file, so that processes reporting for the same devices keep one
    account per device (the directory is created if missing)."""

    def __init__(
        self,
        collection: Collection,
        directory: str | Path | None = None,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> None:
        self.collection = collection
        self.directory = None if directory is None else _state_directory(directory)
        self.lock_timeout = lock_timeout
        #: the states used so far, by key
        self.states: dict[bytes, DeviceState] = {}

    def path_of(self, key: bytes) -> Path | None:
        """The state file of the device ``key`` (None in memory): named for the collection
        and the SHA-256 of the key, safe whatever the id holds; the id is in the file."""
        if self.directory is None:
            return None
        return self.directory / f"{self.collection.name}.{hashlib.sha256(key).hexdigest()}.state"

    def state(self, key: bytes) -> DeviceState:
        """The state of device ``key``, opened (or created) on first use."""
        found = self.states.get(key)
        if found is None:
            device_id, path = key.decode(errors="replace"), self.path_of(key)
            found = self.states[key] = (
                DeviceState.new(self.collection, device_id)
                if path is None
                else DeviceState.open(path, self.collection, device_id, self.lock_timeout)
            )
        return found

    def known(self, key: bytes) -> DeviceState | None:
        """The state of device ``key``, read again from its file, if this fleet used it or
        its file exists (another process made it); else None."""
        found = self.states.get(key)
        if found is not None:
            found.refresh()
            return found
        path = self.path_of(key)
        return self.state(key) if path is not None and path.exists() else None


def _state_directory(directory: str | Path) -> Path:
    """``directory``, created if missing, if state files can be kept in it."""
    try:
        path = writable_directory(directory, "device state directory")
    except UnusablePath as exc:
        raise InvalidDeviceState(str(exc)) from None
    path.mkdir(parents=True, exist_ok=True)
    return path
