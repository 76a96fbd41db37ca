"""The ``[aggregate]`` table of a collection: how the aggregator serves it.

Refits, estimators, sliding windows, conditional queries, topic layout (partitions,
replication, message cap), report age limits, de-duplication and the per-device report
budget: everything the aggregator side needs beyond what shapes a report. None of it
enters the collection digest (see :mod:`kvldp.common.config.collection`); the table is parsed
into an :class:`AggregateConfig` by :func:`parse_aggregate`, called by
:mod:`kvldp.common.config.collection_file`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.spec.collection_fields import InvalidCollection, integer, number, string_list
from kvldp.common.spec.collection_spec import AGGREGATE, names, spec_of

WINDOW_PATTERN = re.compile(r"^(\d+)(s|m|h|d)$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024

_AGGREGATE = names(AGGREGATE)


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
    """A validated ``[aggregate]`` table; the defaults are those of an absent field."""

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
    dedup_window_s: int = 300
    dedup_max_ids: int = 2_000_000
    max_reports_per_device: int = 0
    budget_window_s: int = 86_400
    max_record_lead_s: int = 300


def _duration(table: dict[str, Any], key: str, default: str) -> int:
    """Seconds of the duration field ``key`` (``all`` is not one)."""
    window = parse_window(table.get(key, default), f"aggregate.{key}")
    if window.seconds is None:
        raise InvalidCollection(f"aggregate.{key}: give a duration such as '5m' or '1h'")
    return window.seconds


def parse_aggregate(table: Any, mechanism: Mechanism) -> AggregateConfig:
    """Validate the ``[aggregate]`` table (None: absent) for a collection of ``mechanism``."""
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
    refit = number(table.get("refit_interval_s", defaults.refit_interval_s), "aggregate.refit_interval_s")
    if refit <= 0:
        raise InvalidCollection("aggregate.refit_interval_s: must be positive")
    estimators = string_list(table.get("estimators", list(defaults.estimators)), "aggregate.estimators")
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
    windows = tuple(parse_window(w) for w in string_list(table.get("windows", ["all"]), "aggregate.windows"))
    if len({w.name for w in windows}) != len(windows):
        raise InvalidCollection("aggregate.windows: a window is listed twice")
    if not any(w.seconds is None for w in windows):
        windows = (*windows, Window("all", None))
    conditions = string_list(table.get("conditions", []), "aggregate.conditions")
    partitions = _integer(table, "partitions")
    replication = _replication(table)
    cap = _integer(table, "max_message_bytes")
    limits = {
        key: _integer(table, key) for key in ("dedup_horizon", "dedup_max_ids", "max_reports_per_device")
    }
    limits["dedup_window_s"] = _duration(table, "dedup_window", "5m")
    limits["budget_window_s"] = _duration(table, "budget_window", "1d")
    limits["max_record_lead_s"] = _duration(table, "max_record_lead", "5m")
    ages = {}
    for key in ("max_report_age_s", "max_clock_skew_s"):
        value = number(table.get(key, getattr(defaults, key)), f"aggregate.{key}")
        if value <= 0:
            raise InvalidCollection(f"aggregate.{key}: must be positive")
        ages[key] = value
    return AggregateConfig(
        max_report_age_s=ages["max_report_age_s"],
        max_clock_skew_s=ages["max_clock_skew_s"],
        dedup_horizon=limits["dedup_horizon"],
        dedup_window_s=limits["dedup_window_s"],
        dedup_max_ids=limits["dedup_max_ids"],
        max_reports_per_device=limits["max_reports_per_device"],
        budget_window_s=limits["budget_window_s"],
        max_record_lead_s=limits["max_record_lead_s"],
        refit_interval_s=refit,
        estimators=usable,
        windows=windows,
        conditions=conditions,
        partitions=partitions,
        replication_factor=replication[0],
        min_insync_replicas=replication[1],
        max_message_bytes=cap,
    )


def _integer(table: Mapping[str, Any], key: str) -> int:
    """The integer field ``key`` within its declared bounds (:mod:`kvldp.common.spec.collection_spec`)."""
    low, high = spec_of(AGGREGATE, key).integer_bounds()
    return integer(table.get(key, getattr(AggregateConfig(), key)), f"aggregate.{key}", low, high)


def _replication(table: Mapping[str, Any]) -> tuple[int, int]:
    """``(replication_factor, min_insync_replicas)``: copies of each topic kvldp creates,
    and how many must hold a write before an ``acks=all`` send succeeds."""
    values = [_integer(table, key) for key in ("replication_factor", "min_insync_replicas")]
    if values[1] > values[0]:
        raise InvalidCollection(
            f"aggregate.min_insync_replicas: {values[1]} is more than replication_factor={values[0]}: "
            "no write could ever succeed"
        )
    return values[0], values[1]
