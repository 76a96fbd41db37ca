"""The wire format: versioned msgpack, one report per message or a columnar batch.

Every Kafka message value is one msgpack map with this envelope (docs/wire-format.md):

* ``ver`` — schema version, 1;
* ``col`` — collection name; ``mech`` — mechanism tag; ``cfg`` — the collection digest
  (uint32 over mechanism, epsilon, parameters, keys and value range);
* optional: ``ts`` — device timestamp (ms since the epoch), judged against the Kafka
  record timestamp (``stale`` if older than ``aggregate.max_report_age_s``, ``future``
  if ahead by more than ``aggregate.max_clock_skew_s``, so a replay judges the same way);
  ``rid`` — report id (uint64, non-zero), for de-duplication; ``eps`` — the epsilon the
  device used, which must be the collection's (``config_mismatch``);

then either the payload fields of one report at top level (``{"j": 3, "s": 2}``;
bitsets as ``bin`` of ceil(L/8) bytes, LSB-first), or a *batch*: ``n`` (number of
reports) and ``cols``, a map from field name to one ``bin`` holding the column:
``n`` little-endian integers of the field's width, or ``n`` bitsets back to back, plus
an optional ``rid`` column (``n`` little-endian uint64). Columns decode with one
``numpy.frombuffer`` each, so a gateway batch costs no Python work per report.

Decoding is hostile-input safe: sizes are capped before parsing, msgpack runs with
small container limits, and every exception at the boundary becomes a
:class:`WireError` with a stable reason code (the DLQ ``reason`` header and the
``kvldp_reports_rejected_total`` label):

``oversize``, ``undecodable``, ``bad_envelope``, ``unsupported_version``,
``wrong_collection``, ``wrong_mechanism``, ``config_mismatch``, ``bad_payload``,
``out_of_range``, ``invalid_report``, ``implausible_report`` (a report no input makes
plausible: docs/plausibility.md), ``stale``, ``future`` (and the aggregator's own
``budget_exceeded``, and for interactive collections ``stale_round`` — a report for a
round that is not the open one — and ``round_mismatch`` — built on other means than
the ones published for its round).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import msgspec
import numpy as np
from numpy.typing import NDArray

from kvldp.common.config.collection import Collection
from kvldp.common.data.schema import Field, Report, ReportBatch, batch_len
from kvldp.common.errors import KvldpError
from kvldp.common.messages.layout import SingleLayout
from kvldp.common.messages.single_report import single_report_decoder, unchecked_bounds
from kvldp.common.typed_fields import integer, is_integer

VERSION = 1
ENVELOPE = ("ver", "col", "mech", "cfg")
OPTIONAL = ("ts", "rid", "eps")
RID = "rid"
BATCH_KEYS = ("n", "cols")
REASONS = (
    "oversize",
    "undecodable",
    "bad_envelope",
    "unsupported_version",
    "wrong_collection",
    "wrong_mechanism",
    "config_mismatch",
    "bad_payload",
    "out_of_range",
    "invalid_report",
    "implausible_report",
    "stale",
    "future",
    "record_future",
    "budget_exceeded",
    "stale_round",
    "round_mismatch",
)
#: a record stamped further ahead of the aggregator's clock than ``[aggregate] max_record_lead``
RECORD_FUTURE = "record_future"


class WireError(KvldpError):
    """A message that cannot be folded; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


#: what each of msgpack's size limits (:attr:`WireFormat._unpack_limits`) refuses
_OVER_LIMIT = {
    "max_array_len": "an array (messages hold none)",
    "max_ext_len": "an extension type (messages hold none)",
    "max_map_len": "a map with more entries than a message holds",
    "max_str_len": "a string longer than 256 bytes",
    "max_bin_len": "a binary longer than max_message_bytes",
}


def undecodable(exc: Exception) -> str:
    """What is wrong with bytes msgpack could not decode, in kvldp's words (msgpack's own
    messages name its internals)."""
    text = str(exc)
    if isinstance(exc, msgpack.ExtraData):
        return "bytes follow the end of the message's msgpack value"
    if isinstance(exc, msgpack.FormatError):
        return "not msgpack: a byte no msgpack value starts with"
    if isinstance(exc, msgpack.StackError):
        return "msgpack values nested too deep"
    if isinstance(exc, UnicodeDecodeError):
        return "a string that is not UTF-8"
    for limit, what in _OVER_LIMIT.items():
        if limit in text:
            return f"not a message: {what}"
    if "incomplete input" in text:
        return "the msgpack value is cut short"
    if isinstance(exc, TypeError | ValueError) and "key" in text:
        return "a map key that is not a string"
    return "not valid msgpack"


def column_dtype(f: Field) -> np.dtype[Any]:
    """Little-endian wire type of a field's batch column (the narrowest that fits)."""
    if f.kind == "bits":
        return np.dtype("u1")
    if f.kind == "int":
        for width in (1, 2, 4, 8):
            if -(2 ** (8 * width - 1)) <= f.low and f.high <= 2 ** (8 * width - 1):
                return np.dtype(f"<i{width}")
    for width in (1, 2, 4):
        if f.high <= 2 ** (8 * width):
            return np.dtype(f"<u{width}")
    return np.dtype("<u8")


def _padding(f: Field) -> int:
    """The bits of a bitset field's last byte beyond its ``high`` bits (LSB-first)."""
    spare = f.nbytes * 8 - f.high
    return (0xFF << (8 - spare)) & 0xFF if spare else 0


def _integer_bounds(f: Field) -> tuple[int, int]:
    """Values a field's storage type can hold (the schema check then applies the domain)."""
    return (0, 2**64) if f.dtype == np.dtype(np.uint64) else (-(2**63), 2**63)


@dataclass(frozen=True)
class Decoded:
    """The reports of a list of messages: the valid ones as one columnar batch in message
    order, with ``message`` giving the index of the message each report came from and
    ``rids`` its report id (0 = none), and the rejected messages as (index, reason, detail)."""

    reports: ReportBatch
    message: NDArray[np.int64]
    rids: NDArray[np.uint64]
    rejected: list[tuple[int, str, str]]


class WireFormat:
    """Encoder and decoder bound to one collection (its digest, fields and size cap)."""

    def __init__(self, collection: Collection) -> None:
        self.collection = collection
        # what travels: the reports as the server receives them (with instantaneous
        # randomization, the composed channel's, whose plausibility rule decoding applies)
        self.mechanism = collection.estimation_mechanism
        self.fields: tuple[Field, ...] = self.mechanism.fields()
        self.names = tuple(f.name for f in self.fields)
        self.dtypes = {f.name: column_dtype(f) for f in self.fields}
        self.cap = collection.aggregate.max_message_bytes
        self.max_age_ms = int(collection.aggregate.max_report_age_s * 1000)
        self.max_skew_ms = int(collection.aggregate.max_clock_skew_s * 1000)
        self.envelope = {
            "ver": VERSION,
            "col": collection.name,
            "mech": self.mechanism.name,
            "cfg": collection.digest,
        }
        #: the canonical single-report layout (SDK output), decoded without per-message work
        self.layout = SingleLayout(collection.name, self.mechanism.name, collection.digest, self.fields)
        #: per field: (bitset bytes or 0, lower, upper bound of the storage type)
        self._checks = [(f.nbytes if f.kind == "bits" else 0, *_integer_bounds(f)) for f in self.fields]
        #: a single report checked in one compiled pass (:meth:`count`), and what that pass
        #: leaves: the padding bits of each bitset field, the domains beyond int64
        self._single = single_report_decoder(self.envelope, self.fields)
        self._paddings = [
            (i, _padding(f)) for i, f in enumerate(self.fields) if f.kind == "bits" and _padding(f)
        ]
        self._wide_bounds = unchecked_bounds(self.fields)
        #: whether a report's validity depends on more than each field's domain
        self._row_rules = self.mechanism.has_row_rules()
        self._single_keys = frozenset((*ENVELOPE, *self.names))
        self._batch_keys = frozenset((*ENVELOPE, *BATCH_KEYS))
        self._unpack_limits = {
            "max_bin_len": self.cap,
            "max_str_len": 256,
            "max_array_len": 0,
            "max_map_len": max(16, len(self.fields) + 8),
            "max_ext_len": 0,
        }

    # ------------------------------------------------------------------ encoding
    def report_bytes(self) -> int:
        """Payload bytes of one report in a batch (sizes gateway batches under the cap)."""
        return sum(f.nbytes if f.kind == "bits" else self.dtypes[f.name].itemsize for f in self.fields)

    def max_batch(self) -> int:
        """Most reports one batch message may carry under the collection's size cap
        (with a ``rid`` column: 8 more bytes per report)."""
        overhead = 128 + 16 * (len(self.fields) + 1) + len(self.collection.name)
        return max(1, (self.cap - overhead) // (self.report_bytes() + 8))

    def _check_size(self, data: bytes) -> bytes:
        if len(data) > self.cap:
            raise WireError("oversize", f"{len(data)} bytes exceed max_message_bytes={self.cap}")
        return data

    def encode_report(self, report: Report, ts_ms: int | None = None, rid: int | None = None) -> bytes:
        """One report (as returned by ``Mechanism.perturb``) as one message; in the
        canonical layout (:mod:`kvldp.common.messages.layout`) when it has both ``ts`` and ``rid``."""
        if ts_ms is not None and rid is not None:
            columns = {f.name: np.asarray([report[f.name]]) for f in self.fields}
            for f in self.fields:
                if f.kind == "bits":
                    columns[f.name] = np.frombuffer(report[f.name], dtype=np.uint8).reshape(1, -1)  # type: ignore[arg-type]
            return self._check_size(
                self.layout.encode(columns, int(ts_ms), np.asarray([rid], dtype=np.uint64))
            )
        body: dict[str, Any] = dict(self.envelope)
        if ts_ms is not None:
            body["ts"] = int(ts_ms)
        if rid is not None:
            body["rid"] = int(rid)
        for name in self.names:
            body[name] = report[name]
        return self._check_size(bytes(msgpack.packb(body, use_bin_type=True)))

    def encode_many(self, batch: ReportBatch, ts_ms: int, rids: NDArray[np.uint64]) -> list[bytes]:
        """Every report of a batch as its own single-report message, in the canonical
        layout: one numpy pass for all of them (devices that each send their own report,
        simulated in bulk)."""
        self._check_size(bytes(self.layout.length))
        return self.layout.split(self.layout.encode(batch, ts_ms, rids))

    def encode_batch(
        self, batch: ReportBatch, ts_ms: int | None = None, rids: NDArray[np.uint64] | None = None
    ) -> bytes:
        """A columnar batch of reports (``perturb_many`` output) as one message."""
        n = batch_len(batch)
        if n < 1:
            raise ValueError("a batch message carries at least one report")
        body: dict[str, Any] = dict(self.envelope)
        if ts_ms is not None:
            body["ts"] = int(ts_ms)
        body["n"] = n
        body["cols"] = {
            name: np.ascontiguousarray(batch[name], dtype=self.dtypes[name]).tobytes() for name in self.names
        }
        if rids is not None:
            body["cols"][RID] = np.ascontiguousarray(rids, dtype="<u8").tobytes()
        return self._check_size(bytes(msgpack.packb(body, use_bin_type=True)))

    # ------------------------------------------------------------------ decoding
    def _envelope(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise WireError("bad_envelope", f"message is a {type(obj).__name__}, not a map")
        ver = obj.get("ver")
        if ver != VERSION:
            if is_integer(ver):
                raise WireError(
                    "unsupported_version", f"schema version {ver} (this aggregator reads {VERSION})"
                )
            raise WireError("bad_envelope", "missing or malformed 'ver'")
        for key in ("col", "mech"):
            if not isinstance(obj.get(key), str):
                raise WireError("bad_envelope", f"missing or malformed {key!r}")
        cfg = integer(obj.get("cfg"), lambda _: WireError("bad_envelope", "missing or malformed 'cfg'"))
        if obj["col"] != self.collection.name:
            raise WireError("wrong_collection", f"report for collection {obj['col']!r}")
        if obj["mech"] != self.mechanism.name:
            raise WireError("wrong_mechanism", f"report of mechanism {obj['mech']!r}")
        if cfg != self.collection.digest:
            raise WireError("config_mismatch", f"config digest {cfg} != {self.collection.digest}")

    def _scalar(self, f: Field, value: Any) -> Any:
        if f.kind == "bits":
            if not isinstance(value, bytes) or len(value) != f.nbytes:
                raise WireError("bad_payload", f"{f.name}: expected {f.nbytes} bytes")
            return value
        value = integer(
            value,
            lambda v: WireError("bad_payload", f"{f.name}: expected an integer, got {type(v).__name__}"),
        )
        lo, hi = _integer_bounds(f)
        if not lo <= value < hi:
            raise WireError("out_of_range", f"{f.name}: {value} does not fit the field's 64-bit type")
        return value

    def _columns(self, obj: dict[str, Any]) -> dict[str, NDArray[Any]]:
        n = integer(
            obj["n"], lambda _: WireError("bad_payload", "batch 'n' must be a positive integer"), low=1
        )
        cols = obj["cols"]
        if not isinstance(cols, dict) or set(cols) - {RID} != set(self.names):
            raise WireError(
                "bad_payload", f"batch columns must be {', '.join(self.names)} (and optionally rid)"
            )
        out: dict[str, NDArray[Any]] = {}
        for f in self.fields:
            buf = cols[f.name]
            dtype = self.dtypes[f.name]
            width = f.nbytes if f.kind == "bits" else dtype.itemsize
            if not isinstance(buf, bytes) or len(buf) != n * width:
                raise WireError("bad_payload", f"column {f.name}: expected {n} x {width} bytes")
            raw = np.frombuffer(buf, dtype=dtype)
            out[f.name] = raw.reshape(n, width) if f.kind == "bits" else raw.astype(f.dtype)
        if RID in cols:
            buf = cols[RID]
            if not isinstance(buf, bytes) or len(buf) != 8 * n:
                raise WireError("bad_payload", f"column rid: expected {n} x 8 bytes")
            out[RID] = np.frombuffer(buf, dtype="<u8").astype(np.uint64)
        return out

    def _optional(self, obj: dict[str, Any], record_ts: int | None) -> int:
        """Check ``ts``, ``rid`` and ``eps``; return the report id (0 when absent)."""
        for key in ("ts", "rid"):
            if key in obj and (type(obj[key]) is not int or not 0 <= obj[key] < 2**64):
                raise WireError("bad_envelope", f"malformed {key!r}")
        if "eps" in obj and type(obj["eps"]) not in (int, float):
            raise WireError("bad_envelope", "malformed 'eps'")
        self._judge(obj.get("ts"), obj.get("eps"), record_ts)
        rid = obj.get("rid", 0)
        return int(rid)

    def _judge(self, ts: int | None, eps: float | None, record_ts: int | None) -> None:
        """A well-formed ``eps`` against the collection's, and a well-formed device time
        ``ts`` against the record's."""
        if eps is not None and not math.isclose(
            float(eps), self.collection.epsilon, rel_tol=1e-12, abs_tol=0.0
        ):
            raise WireError(
                "config_mismatch",
                f"report for epsilon {eps!r}, collection has {self.collection.epsilon!r}",
            )
        if ts is not None and record_ts is not None:
            if ts < record_ts - self.max_age_ms:
                raise WireError(
                    "stale", f"device time {ts} is {(record_ts - ts) / 1000:.0f}s before the record's"
                )
            if ts > record_ts + self.max_skew_ms:
                raise WireError(
                    "future", f"device time {ts} is {(ts - record_ts) / 1000:.0f}s after the record's"
                )

    def _fields_of(self, obj: dict[str, Any]) -> list[Any] | None:
        """Payload values of a well-formed single report, or None to take the slow path."""
        try:
            values = [obj[name] for name in self.names]
        except KeyError:
            return None
        optional = ("ts" in obj) + ("rid" in obj) + ("eps" in obj)
        if len(obj) != len(self._single_keys) + optional:
            return None
        for (nbytes, lo, hi), value in zip(self._checks, values, strict=True):
            if nbytes:
                if type(value) is not bytes or len(value) != nbytes:
                    return None
            elif type(value) is not int or not lo <= value < hi:
                return None
        return values

    def _own_single(self, obj: Any) -> bool:
        """``obj`` is a map with this collection's envelope and no batch count: a single
        report for :meth:`_fields_of` to read."""
        env = self.envelope
        return (
            type(obj) is dict
            and obj.get("ver") == env["ver"]
            and obj.get("col") == env["col"]
            and obj.get("mech") == env["mech"]
            and type(obj.get("cfg")) is int
            and obj["cfg"] == env["cfg"]
            and "n" not in obj
        )

    def count(self, message: bytes | None, record_ts: int | None = None) -> int:
        """How many reports ``message`` carries, when :meth:`decode` would take every one
        of them from a record stamped ``record_ts``; otherwise :class:`WireError` with the
        reason :meth:`decode` gives.

        One message through :meth:`decode` costs numpy's fixed cost per call several times
        over. A single report that :mod:`~kvldp.common.messages.single_report`'s compiled
        check accepts, and whose remaining rules hold (bitset padding, ``ts``, ``rid``,
        ``eps``, and a mechanism's rules across fields on the one row), is counted without
        it; any other message goes through :meth:`decode`, which names the reason of a
        refusal.
        """
        if message is not None and len(message) <= self.cap and self._single_accepted(message, record_ts):
            return 1
        decoded = self.decode([message], None if record_ts is None else [record_ts])
        if decoded.rejected:
            _, reason, detail = decoded.rejected[0]
            raise WireError(reason, detail)
        return int(decoded.message.size)

    def _single_accepted(self, message: bytes, record_ts: int | None) -> bool:
        """Whether ``message`` is a single report :meth:`decode` takes (False: ask it)."""
        try:
            single = self._single.decode(message)
        except Exception:  # msgspec's DecodeError, or what it lets through (bad UTF-8): decode names it
            return False
        values = [getattr(single, name) for name in self.names]
        for i, padding in self._paddings:
            if values[i][-1] & padding:
                return False
        for i, low, high in self._wide_bounds:
            if not low <= values[i] < high:
                return False
        ts, rid, eps = single.ts, single.rid, single.eps
        if (ts is not msgspec.UNSET and ts < 0) or (rid is not msgspec.UNSET and rid < 0):
            return False
        try:
            self._judge(None if ts is msgspec.UNSET else ts, None if eps is msgspec.UNSET else eps, record_ts)
        except WireError:
            return False
        return not self._row_rules or bool(self.mechanism.valid_rows(self._assemble([values], []))[0])

    def _single_or_batch(self, obj: Any) -> list[Any] | dict[str, NDArray[Any]]:
        """The slow, diagnosing path: a single report's values or a batch's columns, or a
        :class:`WireError` naming what is wrong."""
        self._envelope(obj)
        keys = set(obj) - set(OPTIONAL)
        if keys == self._batch_keys:
            return self._columns(obj)
        if keys == self._single_keys:
            return [self._scalar(f, obj[f.name]) for f in self.fields]
        missing = sorted(self._single_keys - keys)
        extra = sorted(keys - self._single_keys - self._batch_keys)
        raise WireError("bad_payload", f"fields missing {missing} / unexpected {extra}")

    def decode(
        self, messages: Sequence[bytes | None], timestamps: Sequence[int] | NDArray[np.int64] | None = None
    ) -> Decoded:
        """Decode and validate messages; never raises on bad input. ``timestamps`` are the
        Kafka record timestamps (ms), against which device ``ts`` are judged.

        Messages in the canonical layout are decoded all at once (:mod:`kvldp.common.messages.layout`);
        the rest go through the general decoder, message by message, which names the
        reason of every rejection.
        """
        record_ts = None if timestamps is None else np.asarray(timestamps, dtype=np.int64)
        fast = self.layout.match(messages)
        if record_ts is not None and fast.index.size:
            ts, rts = fast.ts, record_ts[fast.index]
            out_of_time = (ts < rts - self.max_age_ms) | (ts > rts + self.max_skew_ms)
            if out_of_time.any():  # the general decoder says which, and by how much
                fast = fast.select(~out_of_time)
        rejected: list[tuple[int, str, str]] = []
        if fast.index.size == len(messages):  # all canonical: nothing for the general decoder
            columns, message, rids = fast.reports, fast.index, fast.rids
        else:
            general = np.ones(len(messages), dtype=bool)
            general[fast.index] = False
            columns, message, rids, rejected = self._decode_general(
                messages, np.flatnonzero(general), record_ts
            )
            if fast.index.size:
                mixed = message.size > 0
                columns = {k: np.concatenate([fast.reports[k], columns[k]]) for k in self.names}
                message = np.concatenate([fast.index, message])
                rids = np.concatenate([fast.rids, rids])
                if mixed:
                    order = np.argsort(message, kind="stable")
                    columns = {k: v[order] for k, v in columns.items()}
                    message, rids = message[order], rids[order]
        if message.size and not self.mechanism.valid_rows(columns).all():
            valid, codes, details = self.mechanism.validate_coded(columns)
            if not np.all(valid):
                bad_msgs: dict[int, tuple[str, str]] = {}
                for r in np.flatnonzero(~valid):
                    bad_msgs.setdefault(int(message[r]), (str(codes[r]), str(details[r])))
                rejected.extend((m, code, detail) for m, (code, detail) in bad_msgs.items())
                keep = ~np.isin(message, np.fromiter(bad_msgs, dtype=np.int64))
                columns = {k: v[keep] for k, v in columns.items()}
                message = message[keep]
                rids = rids[keep]
        rejected.sort()
        return Decoded(reports=columns, message=message, rids=rids, rejected=rejected)

    def _decode_general(
        self,
        messages: Sequence[bytes | None],
        indices: NDArray[np.int64],
        record_ts: NDArray[np.int64] | None,
    ) -> tuple[ReportBatch, NDArray[np.int64], NDArray[np.uint64], list[tuple[int, str, str]]]:
        """The messages at ``indices``, one by one: (columns in message order, message index
        of each report, report ids, rejections)."""
        singles: list[list[Any]] = []
        single_msg: list[int] = []
        single_rid: list[int] = []
        batches: list[dict[str, NDArray[Any]]] = []
        batch_msg: list[NDArray[np.int64]] = []
        rejected: list[tuple[int, str, str]] = []
        unpack, limits = msgpack.unpackb, self._unpack_limits
        stamps = None if record_ts is None else record_ts[indices].tolist()
        for j, i in enumerate(indices.tolist()):
            data = messages[i]
            rts = None if stamps is None else stamps[j]
            try:
                if data is None:
                    raise WireError("undecodable", "empty message (no value)")
                if len(data) > self.cap:
                    raise WireError("oversize", f"{len(data)} bytes exceed max_message_bytes={self.cap}")
                try:
                    obj = unpack(data, raw=False, strict_map_key=True, **limits)
                except Exception as exc:  # msgpack raises many unrelated types on garbage
                    raise WireError("undecodable", undecodable(exc)) from None
                if self._own_single(obj):
                    values = self._fields_of(obj)
                    if values is not None:
                        single_rid.append(self._optional(obj, rts))
                        singles.append(values)
                        single_msg.append(i)
                        continue
                parsed = self._single_or_batch(obj)
                rid = self._optional(obj, rts)
                if isinstance(parsed, dict):
                    batches.append(parsed)
                    batch_msg.append(np.full(next(iter(parsed.values())).shape[0], i, dtype=np.int64))
                else:
                    singles.append(parsed)
                    single_msg.append(i)
                    single_rid.append(rid)
            except WireError as exc:
                rejected.append((i, exc.reason, exc.detail))
        columns = self._assemble(singles, batches)
        message = np.concatenate([np.asarray(single_msg, dtype=np.int64), *batch_msg])
        rids = np.concatenate(
            [np.asarray(single_rid, dtype=np.uint64)]
            + [b.get(RID, np.zeros(b[self.names[0]].shape[0], dtype=np.uint64)) for b in batches]
        )
        if singles and batches:  # singles were assembled before batches: restore message order
            order = np.argsort(message, kind="stable")
            columns = {k: v[order] for k, v in columns.items()}
            message, rids = message[order], rids[order]
        return columns, message, rids, rejected

    def _assemble(self, singles: list[list[Any]], batches: list[dict[str, NDArray[Any]]]) -> ReportBatch:
        out: ReportBatch = {}
        for j, f in enumerate(self.fields):
            if f.kind == "bits":
                head = np.frombuffer(b"".join(v[j] for v in singles), dtype=np.uint8).reshape(-1, f.nbytes)
            else:
                head = np.fromiter((v[j] for v in singles), dtype=f.dtype, count=len(singles))
            out[f.name] = np.concatenate([head, *(b[f.name] for b in batches)]) if batches else head
        return out
