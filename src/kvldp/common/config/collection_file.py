"""The collection file: a TOML table validated into a :class:`Collection`, and back.

:func:`load_collection` reads a file and :func:`parse_collection` validates an
already-parsed table (the format is documented in :mod:`kvldp.common.config.collection`):
the top-level fields, the keys, the mechanism and its ``[params]``, the ``[privacy]``
table's fit with the mechanism, and that one report fits the message cap; the
``[aggregate]`` table is left to :mod:`kvldp.common.config.aggregate_config`.
:func:`collection_table` and :func:`collection_toml` are the inverse, for child processes
and for users' records.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvldp.common.config.aggregate_config import parse_aggregate
from kvldp.common.config.collection import Collection
from kvldp.common.mechanisms import create, get
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.spec.collection_fields import (
    InvalidCollection,
    boolean,
    number,
    positive_integer,
    require,
    string_list,
)
from kvldp.common.spec.collection_spec import TABLES, TOP_LEVEL, names
from kvldp.common.spec.params import InvalidParameter
from kvldp.common.spec.privacy import InvalidPrivacy, PrivacyConfig, parse_privacy

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
KEY_PATTERN = re.compile(r"^[^\s|,=]{1,128}$")

_TOP_LEVEL = names(TOP_LEVEL) | set(TABLES)

#: envelope bytes of a single-report message besides the collection name (see kvldp.common.messages.wire)
ENVELOPE_BYTES = 48


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


def _parse_keys(table: Mapping[str, Any]) -> tuple[str, ...]:
    if "keys" in table and "key_count" in table:
        raise InvalidCollection("keys: give either keys or key_count, not both")
    if "keys" in table:
        keys = string_list(table["keys"], "keys")
        for k in keys:
            if not KEY_PATTERN.match(k):
                raise InvalidCollection(
                    f"keys: {k!r} is not a key name (1-128 characters, no spaces, '|', ',' or '=')"
                )
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise InvalidCollection(f"keys: {dup!r} appears twice")
    elif "key_count" in table:
        keys = tuple(f"k{i}" for i in range(positive_integer(table["key_count"], "key_count")))
    else:
        raise InvalidCollection("keys: required field is missing (or give key_count)")
    if not keys:
        raise InvalidCollection("keys: the list is empty")
    return keys


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
    instantaneous = privacy.instantaneous_epsilon
    if instantaneous is not None and not instantaneous < mechanism.epsilon:
        raise InvalidCollection(
            f"privacy.instantaneous_epsilon: {instantaneous:g} must be below epsilon ({mechanism.epsilon:g}), "
            "the budget of the memoized report it randomizes again"
        )
    return privacy


def parse_collection(table: Mapping[str, Any], source: str = "collection") -> Collection:
    """Validate a parsed TOML table; errors name the offending field."""
    try:
        unknown = sorted(set(table) - _TOP_LEVEL)
        if unknown:
            raise InvalidCollection(f"{unknown[0]}: unknown field (known: {', '.join(sorted(_TOP_LEVEL))})")
        name = require(table, "name")
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise InvalidCollection(f"name: {name!r} must be 1-100 letters, digits, '_' or '-'")
        mech_name = require(table, "mechanism")
        if not isinstance(mech_name, str):
            raise InvalidCollection(f"mechanism: expected a mechanism name, got {mech_name!r}")
        try:
            get(mech_name)
        except InvalidParameter as exc:
            raise InvalidCollection(f"mechanism: {exc}") from None
        epsilon = number(require(table, "epsilon"), "epsilon")
        if epsilon <= 0:
            raise InvalidCollection("epsilon: must be positive")
        keys = _parse_keys(table)
        value_range = require(table, "value_range")
        if not isinstance(value_range, list) or len(value_range) != 2:
            raise InvalidCollection(f"value_range: expected [low, high], got {value_range!r}")
        lo, hi = (number(v, "value_range") for v in value_range)
        if not lo < hi:
            raise InvalidCollection(f"value_range: low {lo:g} must be below high {hi:g}")
        clip = boolean(table.get("clip_values", False), "clip_values")
        params = table.get("params", {})
        if not isinstance(params, dict):
            raise InvalidCollection("params: expected a table")
        try:
            mechanism = create(mech_name, len(keys), epsilon, **params)
        except InvalidParameter as exc:
            raise InvalidCollection(f"params: {exc}") from None
        aggregate = parse_aggregate(table.get("aggregate"), mechanism)
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
        try:
            collection.estimation_mechanism  # noqa: B018 - solves the instantaneous randomization
        except InvalidParameter as exc:
            raise InvalidCollection(f"privacy.instantaneous_epsilon: {exc}") from None
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
            "replication_factor": agg.replication_factor,
            "min_insync_replicas": agg.min_insync_replicas,
            "max_message_bytes": agg.max_message_bytes,
            "max_report_age_s": agg.max_report_age_s,
            "max_clock_skew_s": agg.max_clock_skew_s,
            "dedup_horizon": agg.dedup_horizon,
            "dedup_window": f"{agg.dedup_window_s}s",
            "dedup_max_ids": agg.dedup_max_ids,
            "max_record_lead": f"{agg.max_record_lead_s}s",
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
