"""A collection: what devices report and how the aggregator turns it into statistics.

One TOML file is shared by devices and aggregator so that both agree, by construction,
on the mechanism, its parameters, the key names and the value range. Everything that
changes how a report is produced or read enters the collection *digest*, which every
report carries (spec §0.3, ``cfg``); a report whose digest differs is rejected, never
silently folded (the RAPPOR lesson).

```toml
name = "checkout"            # topics kvldp.checkout.reports / kvldp.checkout.dlq
mechanism = "pckv_ue"
epsilon = 2.0
keys = ["hamburger", "fries", "pepsi"]   # or key_count = 100 for k0..k99
value_range = [0.0, 10.0]    # raw values are normalised into [-1, 1] on the device
clip_values = false          # true: clip raw values into value_range on the device

[params]                     # mechanism parameters
ell = 2

[aggregate]
refit_interval_s = 5
estimators = ["unbiased", "em"]
windows = ["5m", "1h", "all"]
conditions = []              # joint-state mechanisms: "k | j=1, l=0" strings, or "all_pairs"
partitions = 4
replication_factor = 1       # copies of every topic kvldp creates (3 on a production cluster)
min_insync_replicas = 1      # replicas that must hold a write before acks=all succeeds (2 with 3 copies)
max_message_bytes = 65536
max_report_age_s = 604800    # device timestamps older than this (vs the record's) are "stale"
max_clock_skew_s = 300       # ... and further ahead than this are "future"
dedup_horizon = 100000       # report ids remembered per partition for de-duplication (0: off; ~72 B each)
max_reports_per_device = 0   # privacy budget: reports per device per budget_window (0: off)
budget_window = "1d"

[privacy]                    # a device's privacy over many reports (see kvldp.common.privacy)
memoize = true               # an unchanged state re-sends the same report and spends nothing
lifetime_epsilon = 20.0      # the most a device ever spends on this collection
report_period = "1h"         # at most one report per device and period (both sides enforce it)
```

``privacy.report_period`` becomes the aggregator's ledger rule (one report per device
per period) and cannot be combined with ``aggregate.max_reports_per_device``.

Invalid files raise :class:`InvalidCollection` naming the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from kvldp.common.conditional import ConditionalQuery, InvalidQuery, parse_query
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import create, get
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.ioh import JointStateMechanism
from kvldp.common.params import InvalidParameter
from kvldp.common.primitives import FloatArray
from kvldp.common.privacy import InvalidPrivacy, PrivacyConfig, parse_privacy

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
KEY_PATTERN = re.compile(r"^[^\s|,=]{1,128}$")
WINDOW_PATTERN = re.compile(r"^(\d+)(s|m|h|d)$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024
#: Kafka's default message limit: a cap above it could never be delivered
KAFKA_MESSAGE_LIMIT = 1_000_000

_TOP_LEVEL = {
    "name",
    "mechanism",
    "epsilon",
    "keys",
    "key_count",
    "value_range",
    "clip_values",
    "params",
    "aggregate",
    "privacy",
}
_AGGREGATE = {
    "refit_interval_s",
    "estimators",
    "windows",
    "conditions",
    "partitions",
    "replication_factor",
    "min_insync_replicas",
    "max_message_bytes",
    "max_report_age_s",
    "max_clock_skew_s",
    "dedup_horizon",
    "max_reports_per_device",
    "budget_window",
}


class InvalidCollection(KvldpError):
    """A collection file is missing a field or has a wrong one (the message names it)."""


@dataclass(frozen=True)
class Window:
    """A sliding window of report time: ``all`` (seconds None) or the last ``seconds``."""

    name: str
    seconds: int | None


def parse_window(text: str, field: str = "aggregate.windows") -> Window:
    if text == "all":
        return Window("all", None)
    match = WINDOW_PATTERN.match(text) if isinstance(text, str) else None
    if not match or int(match.group(1)) == 0:
        raise InvalidCollection(
            f"{field}: {text!r} is not a window (use e.g. '30s', '5m', '1h', '1d' or 'all')"
        )
    return Window(text, int(match.group(1)) * UNITS[match.group(2)])


@dataclass(frozen=True)
class AggregateConfig:
    refit_interval_s: float = 5.0
    estimators: tuple[str, ...] = ("unbiased", "em")
    windows: tuple[Window, ...] = (Window("all", None),)
    conditions: tuple[str, ...] = ()
    partitions: int = 4
    replication_factor: int = 1
    min_insync_replicas: int = 1
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_report_age_s: float = 7 * 86400.0
    max_clock_skew_s: float = 300.0
    dedup_horizon: int = 100_000
    max_reports_per_device: int = 0
    budget_window_s: int = 86_400


@dataclass(frozen=True)
class Collection:
    """A validated collection; build it with :func:`load_collection` or :func:`parse_collection`."""

    name: str
    mechanism_name: str
    epsilon: float
    keys: tuple[str, ...]
    value_range: tuple[float, float]
    clip_values: bool
    params: Mapping[str, Any]
    aggregate: AggregateConfig
    mechanism: Mechanism
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)

    @property
    def d(self) -> int:
        return len(self.keys)

    @property
    def reports_topic(self) -> str:
        return f"kvldp.{self.name}.reports"

    @property
    def dlq_topic(self) -> str:
        return f"kvldp.{self.name}.dlq"

    @property
    def state_topic(self) -> str:
        return f"kvldp.{self.name}.state"

    @property
    def consumer_group(self) -> str:
        return f"kvldp.{self.name}.aggregator"

    @cached_property
    def digest(self) -> int:
        """uint32 over everything that shapes a report: mechanism config, keys, value range,
        and the ``[privacy]`` table when there is one."""
        shape: dict[str, Any] = {
            "mechanism": self.mechanism.config,
            "keys": list(self.keys),
            "value_range": list(self.value_range),
            "clip_values": self.clip_values,
        }
        privacy = self.privacy.as_table()
        if privacy:
            shape["privacy"] = privacy
        canonical = json.dumps(
            shape,
            sort_keys=True,
            separators=(",", ":"),
        )
        return int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:4], "big")

    def conditional_queries(self) -> list[ConditionalQuery]:
        """The conditional queries to export: the parsed ``aggregate.conditions``, where
        ``"all_pairs"`` stands for f(k | j=1) and f(k | j=0) for every ordered pair."""
        conditions = self.aggregate.conditions
        if not conditions:
            return []
        if not isinstance(self.mechanism, JointStateMechanism):
            raise InvalidCollection(
                f"aggregate.conditions: {self.mechanism_name} does not collect joint key states "
                "(use ioh, ioh_oue or ioh_hrr)"
            )
        order = getattr(self.mechanism, "order", self.d)
        queries: list[ConditionalQuery] = []
        for text in conditions:
            if text == "all_pairs":
                if self.d > MAX_ALL_PAIRS_KEYS:
                    raise InvalidCollection(
                        f"aggregate.conditions: all_pairs over {self.d} keys would export "
                        f"{2 * self.d * (self.d - 1)} queries; it is limited to d <= {MAX_ALL_PAIRS_KEYS}"
                    )
                if order < 2:
                    raise InvalidCollection("aggregate.conditions: all_pairs needs order >= 2")
                queries += [
                    ConditionalQuery.build(self.d, k, {j: present})
                    for k in range(self.d)
                    for j in range(self.d)
                    if j != k
                    for present in (1, 0)
                ]
                continue
            try:
                query = parse_query(text, list(self.keys))
            except InvalidQuery as exc:
                raise InvalidCollection(f"aggregate.conditions: {text!r}: {exc}") from None
            touched = 1 + len(query.condition.pairs())
            if touched > order:
                raise InvalidCollection(
                    f"aggregate.conditions: {text!r} touches {touched} keys; {self.mechanism_name} with "
                    f"order {order} answers queries over at most {order}"
                )
            queries.append(query)
        return queries

    def key_index(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.keys)}

    def normalise(self, raw: FloatArray) -> FloatArray:
        """Raw values -> [-1, 1] (clipped first if ``clip_values``; otherwise out-of-range
        values are an error, so that a misconfigured range cannot bias the means silently)."""
        lo, hi = self.value_range
        values = np.asarray(raw, dtype=np.float64)
        if self.clip_values:
            values = np.clip(values, lo, hi)
        bad = ~np.isfinite(values) | (values < lo) | (values > hi)
        if np.any(bad):
            first = float(values[np.flatnonzero(bad)[0]])
            raise InvalidCollection(
                f"value {first!r} is outside value_range [{lo:g}, {hi:g}] of collection {self.name} "
                "(set clip_values = true to clip on the device)"
            )
        return np.clip((values - lo) / (hi - lo) * 2.0 - 1.0, -1.0, 1.0)

    def raw_mean(self, mean: FloatArray) -> FloatArray:
        """A mean in [-1, 1] back in the collection's units."""
        lo, hi = self.value_range
        return np.asarray(lo + (np.asarray(mean) + 1.0) * (hi - lo) / 2.0, dtype=np.float64)

    def raw_scale(self, stderr: FloatArray) -> FloatArray:
        """A standard error of a normalised mean in the collection's units."""
        lo, hi = self.value_range
        return np.asarray(np.asarray(stderr) * (hi - lo) / 2.0, dtype=np.float64)


#: envelope bytes of a single-report message besides the collection name (see kvldp.common.wire)
ENVELOPE_BYTES = 48
#: largest d for which "all_pairs" expands (d (d - 1) * 2 exported queries)
MAX_ALL_PAIRS_KEYS = 16


def _check_report_size(mechanism: Mechanism, cap: int, name_length: int) -> None:
    """A single report must fit the message cap; IOH's 3^d bits are the usual offender."""
    size = (
        ENVELOPE_BYTES
        + name_length
        + sum(f.nbytes + 5 if f.kind == "bits" else 11 for f in mechanism.fields())
    )
    if size > cap:
        advice = (
            "; use ioh_hrr (about 10 bits per report, queries over <= order keys)"
            if mechanism.name.startswith("ioh")
            else ""
        )
        raise InvalidCollection(
            f"aggregate.max_message_bytes: one {mechanism.name} report over {mechanism.d} keys takes "
            f"{size} bytes, above the cap of {cap}{advice}, or raise max_message_bytes"
        )


def _require(table: Mapping[str, Any], key: str, where: str = "") -> Any:
    if key not in table:
        raise InvalidCollection(f"{where}{key}: required field is missing")
    return table[key]


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidCollection(f"{field}: expected a finite number, got {value!r}")
    return float(value)


def _string_list(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidCollection(f"{field}: expected a list of strings, got {value!r}")
    return tuple(value)


def _parse_keys(table: Mapping[str, Any]) -> tuple[str, ...]:
    if "keys" in table and "key_count" in table:
        raise InvalidCollection("keys: give either keys or key_count, not both")
    if "keys" in table:
        keys = _string_list(table["keys"], "keys")
        for k in keys:
            if not KEY_PATTERN.match(k):
                raise InvalidCollection(
                    f"keys: {k!r} is not a key name (1-128 characters, no spaces, '|', ',' or '=')"
                )
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise InvalidCollection(f"keys: {dup!r} appears twice")
    elif "key_count" in table:
        count = table["key_count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidCollection(f"key_count: expected a positive integer, got {count!r}")
        keys = tuple(f"k{i}" for i in range(count))
    else:
        raise InvalidCollection("keys: required field is missing (or give key_count)")
    if not keys:
        raise InvalidCollection("keys: the list is empty")
    return keys


def _parse_aggregate(table: Any, mechanism: Mechanism) -> AggregateConfig:
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise InvalidCollection("aggregate: expected a table")
    unknown = sorted(set(table) - _AGGREGATE)
    if unknown:
        raise InvalidCollection(
            f"aggregate.{unknown[0]}: unknown field (known: {', '.join(sorted(_AGGREGATE))})"
        )
    defaults = AggregateConfig()
    refit = _number(table.get("refit_interval_s", defaults.refit_interval_s), "aggregate.refit_interval_s")
    if refit <= 0:
        raise InvalidCollection("aggregate.refit_interval_s: must be positive")
    estimators = _string_list(table.get("estimators", list(defaults.estimators)), "aggregate.estimators")
    if not estimators:
        raise InvalidCollection("aggregate.estimators: give at least one estimator")
    usable = tuple(e for e in estimators if e in mechanism.estimator_names)
    if "estimators" in table:
        for e in estimators:
            if e not in mechanism.estimator_names:
                raise InvalidCollection(
                    f"aggregate.estimators: {mechanism.name} has no estimator {e!r} "
                    f"(available: {', '.join(mechanism.estimator_names)})"
                )
    elif not usable:
        usable = ("unbiased",)
    windows = tuple(parse_window(w) for w in _string_list(table.get("windows", ["all"]), "aggregate.windows"))
    if len({w.name for w in windows}) != len(windows):
        raise InvalidCollection("aggregate.windows: a window is listed twice")
    if not any(w.seconds is None for w in windows):
        windows = (*windows, Window("all", None))
    conditions = _string_list(table.get("conditions", []), "aggregate.conditions")
    partitions = table.get("partitions", defaults.partitions)
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= 1024:
        raise InvalidCollection(f"aggregate.partitions: expected an integer in [1, 1024], got {partitions!r}")
    replication = _replication(table)
    cap = table.get("max_message_bytes", defaults.max_message_bytes)
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1024 <= cap <= KAFKA_MESSAGE_LIMIT:
        raise InvalidCollection(
            f"aggregate.max_message_bytes: expected an integer in [1024, {KAFKA_MESSAGE_LIMIT}], got {cap!r}"
        )
    limits: dict[str, int] = {}
    # the de-duplication table costs about 40 bytes per unit of horizon and partition
    for key, high in (("dedup_horizon", 10_000_000), ("max_reports_per_device", 100_000_000)):
        value = table.get(key, getattr(defaults, key))
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise InvalidCollection(f"aggregate.{key}: expected an integer in [0, {high}], got {value!r}")
        limits[key] = value
    window = parse_window(table.get("budget_window", "1d"), "aggregate.budget_window")
    if window.seconds is None:
        raise InvalidCollection("aggregate.budget_window: give a duration such as '1d' or '12h'")
    limits["budget_window_s"] = window.seconds
    ages = {}
    for key in ("max_report_age_s", "max_clock_skew_s"):
        value = _number(table.get(key, getattr(defaults, key)), f"aggregate.{key}")
        if value <= 0:
            raise InvalidCollection(f"aggregate.{key}: must be positive")
        ages[key] = value
    return AggregateConfig(
        max_report_age_s=ages["max_report_age_s"],
        max_clock_skew_s=ages["max_clock_skew_s"],
        dedup_horizon=limits["dedup_horizon"],
        max_reports_per_device=limits["max_reports_per_device"],
        budget_window_s=limits["budget_window_s"],
        refit_interval_s=refit,
        estimators=usable,
        windows=windows,
        conditions=conditions,
        partitions=partitions,
        replication_factor=replication[0],
        min_insync_replicas=replication[1],
        max_message_bytes=cap,
    )


def _replication(table: Mapping[str, Any]) -> tuple[int, int]:
    """``(replication_factor, min_insync_replicas)``: copies of each topic kvldp creates,
    and how many must hold a write before an ``acks=all`` send succeeds."""
    values = []
    for key in ("replication_factor", "min_insync_replicas"):
        value = table.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 32:
            raise InvalidCollection(f"aggregate.{key}: expected an integer in [1, 32], got {value!r}")
        values.append(value)
    if values[1] > values[0]:
        raise InvalidCollection(
            f"aggregate.min_insync_replicas: {values[1]} is more than replication_factor={values[0]}: "
            "no write could ever succeed"
        )
    return values[0], values[1]


def _parse_privacy(table: Any, mechanism: Mechanism) -> PrivacyConfig:
    try:
        privacy = parse_privacy(table)
    except InvalidPrivacy as exc:
        raise InvalidCollection(str(exc)) from None
    if privacy.memoize and mechanism.name == "privkvm":
        raise InvalidCollection(
            "privacy.memoize: privkvm is interactive (a non-holder's fake values follow the server's "
            "published means, so the server could force new states); use privkv, pckv_ue or pckv_grr"
        )
    if privacy.report_period_s is not None and mechanism.name == "privkvm":
        raise InvalidCollection(
            "privacy.report_period: privkvm devices report once per round; params.round_period "
            "sets the pace of the rounds"
        )
    return privacy


def parse_collection(table: Mapping[str, Any], source: str = "collection") -> Collection:
    """Validate a parsed TOML table; errors name the offending field."""
    try:
        unknown = sorted(set(table) - _TOP_LEVEL)
        if unknown:
            raise InvalidCollection(f"{unknown[0]}: unknown field (known: {', '.join(sorted(_TOP_LEVEL))})")
        name = _require(table, "name")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise InvalidCollection(f"name: {name!r} must be 1-100 letters, digits, '_' or '-'")
        mech_name = _require(table, "mechanism")
        if not isinstance(mech_name, str):
            raise InvalidCollection(f"mechanism: expected a mechanism name, got {mech_name!r}")
        try:
            get(mech_name)
        except InvalidParameter as exc:
            raise InvalidCollection(f"mechanism: {exc}") from None
        epsilon = _number(_require(table, "epsilon"), "epsilon")
        if epsilon <= 0:
            raise InvalidCollection("epsilon: must be positive")
        keys = _parse_keys(table)
        value_range = _require(table, "value_range")
        if not isinstance(value_range, list) or len(value_range) != 2:
            raise InvalidCollection(f"value_range: expected [low, high], got {value_range!r}")
        lo, hi = (_number(v, "value_range") for v in value_range)
        if not lo < hi:
            raise InvalidCollection(f"value_range: low {lo:g} must be below high {hi:g}")
        clip = table.get("clip_values", False)
        if not isinstance(clip, bool):
            raise InvalidCollection(f"clip_values: expected true or false, got {clip!r}")
        params = table.get("params", {})
        if not isinstance(params, dict):
            raise InvalidCollection("params: expected a table")
        try:
            mechanism = create(mech_name, len(keys), epsilon, **params)
        except InvalidParameter as exc:
            raise InvalidCollection(f"params: {exc}") from None
        aggregate = _parse_aggregate(table.get("aggregate"), mechanism)
        privacy = _parse_privacy(table.get("privacy"), mechanism)
        if privacy.report_period_s is not None:
            if aggregate.max_reports_per_device:
                raise InvalidCollection(
                    "privacy.report_period: already one report per device and period; "
                    "drop aggregate.max_reports_per_device"
                )
            aggregate = replace(aggregate, max_reports_per_device=1, budget_window_s=privacy.report_period_s)
        _check_report_size(mechanism, aggregate.max_message_bytes, len(name))
        collection = Collection(
            name=name,
            mechanism_name=mech_name,
            epsilon=epsilon,
            keys=keys,
            value_range=(lo, hi),
            clip_values=clip,
            params=dict(params),
            aggregate=aggregate,
            mechanism=mechanism,
            privacy=privacy,
        )
        collection.conditional_queries()  # validates every condition against keys and mechanism
        return collection
    except InvalidCollection as exc:
        raise InvalidCollection(f"{source}: {exc}") from None


def load_collection(path: str | Path) -> Collection:
    """Read and validate a collection file (TOML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidCollection(f"collection file {str(p)!r} does not exist") from None
    except OSError as exc:
        raise InvalidCollection(f"collection file {str(p)!r} cannot be read: {exc.strerror}") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidCollection(f"{p}: not valid TOML: {exc}") from None
    return parse_collection(table, source=str(p))


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def collection_table(collection: Collection) -> dict[str, Any]:
    """The collection as a table that :func:`parse_collection` turns back into it."""
    agg = collection.aggregate
    default_keys = collection.keys == tuple(f"k{i}" for i in range(collection.d))
    table: dict[str, Any] = {
        "name": collection.name,
        "mechanism": collection.mechanism_name,
        "epsilon": collection.epsilon,
        **({"key_count": collection.d} if default_keys else {"keys": list(collection.keys)}),
        "value_range": list(collection.value_range),
        "clip_values": collection.clip_values,
        "params": dict(collection.params),
        "aggregate": {
            "refit_interval_s": agg.refit_interval_s,
            "estimators": list(agg.estimators),
            "windows": [w.name for w in agg.windows],
            "conditions": list(agg.conditions),
            "partitions": agg.partitions,
            "max_message_bytes": agg.max_message_bytes,
            "max_report_age_s": agg.max_report_age_s,
            "max_clock_skew_s": agg.max_clock_skew_s,
            "dedup_horizon": agg.dedup_horizon,
        },
    }
    if collection.privacy.report_period_s is None:  # otherwise the period sets the ledger
        table["aggregate"]["max_reports_per_device"] = agg.max_reports_per_device
        table["aggregate"]["budget_window"] = f"{agg.budget_window_s}s"
    privacy = collection.privacy.as_table()
    if privacy:
        table["privacy"] = privacy
    return table


def collection_toml(collection: Collection) -> str:
    """The collection as a TOML file (for child processes and for users' records)."""
    table = collection_table(collection)
    lines = [f"{k} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for section in ("params", "aggregate", "privacy"):
        if section in table:
            lines += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in table[section].items()]
    return "\n".join(lines) + "\n"
