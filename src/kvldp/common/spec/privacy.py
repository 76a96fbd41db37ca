"""Privacy over a device's lifetime: the ``[privacy]`` table and the spending rule.

Local differential privacy protects a device *from the server*: every guarantee here is
kept by the device itself, which counts what it spends (``kvldp.producer.device_state``). The
server's ledger only mirrors the same rules for its own bookkeeping.

The ``[privacy]`` table of a collection file (covered by the collection digest)::

    [privacy]
    memoize = true           # a report is a deterministic function of (device secret, state)
    lifetime_epsilon = 20.0  # the most a device ever spends on this collection
    report_period = "1h"     # at most one report per period (and the aggregator refuses more)
    instantaneous_epsilon = 0.5  # every send of a memoized report randomized again

**Spending rule** (sequential composition, stated exactly):

* without ``memoize`` every report a device sends costs the collection's per-report
  epsilon;
* with ``memoize`` a report is a function of the device's permanent secret and its
  *state* (:mod:`kvldp.common.guarantees.memo`); the first report of a state the device never reported
  before costs the per-report epsilon, and sending a state again sends the byte-identical
  stored payload and costs nothing. So a device that visits k distinct states spends
  k x epsilon however many reports it sends;
* a report that would take the total past ``lifetime_epsilon`` is not sent.

What this bound covers: for any two lifetime input sequences with the same *pattern of
state changes* (which periods share a state), the ratio of the probabilities of
everything the server sees is at most ``exp(spent)``. Memoization does not hide *when*
a state changes: identical payloads from one device show the server that its state did
not change, and a new payload that it did (Ding et al. 2017 say so too).

``instantaneous_epsilon`` (eps1, with ``memoize``) randomizes every send of the memoized
report again, RAPPOR's instantaneous randomized response: one report then says at most
eps1 about the device's input, and a change of state shows only through reports that
are all fresh anyway. The spending rule is unchanged: a new state still costs the
per-report epsilon (the permanent response's eps-infinity), re-sends nothing. See
``docs/privacy.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvldp.common.errors import KvldpError
from kvldp.common.spec.collection_spec import PRIVACY
from kvldp.common.typed_fields import boolean, expected, number

#: fields of the ``[privacy]`` table (declared in :mod:`kvldp.common.spec.collection_spec`)
FIELDS = tuple(spec.name for spec in PRIVACY)
#: relative slack when comparing a spend with the cap (spends are count x epsilon)
CAP_SLACK = 1e-12
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class InvalidPrivacy(KvldpError):
    """A ``[privacy]`` table field is wrong (the message names it)."""


class PrivacyBudgetExhausted(KvldpError):
    """A report would take a device past its collection's ``lifetime_epsilon``; nothing was sent."""


@dataclass(frozen=True)
class PrivacyConfig:
    """The validated ``[privacy]`` table; the defaults are the table's absence."""

    memoize: bool = False
    lifetime_epsilon: float | None = None
    report_period_s: int | None = None
    instantaneous_epsilon: float | None = None

    def as_table(self) -> dict[str, Any]:
        """The fields that differ from the defaults, as a TOML table (also the digest input)."""
        table: dict[str, Any] = {}
        if self.memoize:
            table["memoize"] = True
        if self.lifetime_epsilon is not None:
            table["lifetime_epsilon"] = self.lifetime_epsilon
        if self.report_period_s is not None:
            table["report_period"] = f"{self.report_period_s}s"
        if self.instantaneous_epsilon is not None:
            table["instantaneous_epsilon"] = self.instantaneous_epsilon
        return table


def parse_duration(text: Any, field: str) -> int:
    """``"90s"``, ``"5m"``, ``"1h"``, ``"1d"`` -> seconds (positive)."""
    if isinstance(text, str) and len(text) >= 2 and text[-1] in _UNITS and text[:-1].isdigit():
        seconds = int(text[:-1]) * _UNITS[text[-1]]
        if seconds > 0:
            return seconds
    raise InvalidPrivacy(f"{field}: {text!r} is not a duration (use e.g. '90s', '30m', '1h' or '1d')")


def format_duration(seconds: int) -> str:
    """Seconds as :func:`parse_duration` reads them, in the largest exact unit (``86400`` -> ``"1d"``)."""
    unit = next(u for u in ("d", "h", "m", "s") if seconds % _UNITS[u] == 0)
    return f"{seconds // _UNITS[unit]}{unit}"


def parse_privacy(table: Any) -> PrivacyConfig:
    """Validate a ``[privacy]`` table (None: no table); errors name the field."""
    if table is None:
        return PrivacyConfig()
    if not isinstance(table, Mapping):
        raise InvalidPrivacy("privacy: expected a table")
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise InvalidPrivacy(f"privacy.{unknown[0]}: unknown field (known: {', '.join(FIELDS)})")
    memoize = boolean(
        table.get("memoize", False), expected(InvalidPrivacy, "privacy.memoize", "true or false")
    )
    cap = table.get("lifetime_epsilon")
    if cap is not None:
        refuse = expected(InvalidPrivacy, "privacy.lifetime_epsilon", "a positive finite number")
        cap = number(cap, refuse, positive=True)
    period = table.get("report_period")
    period_s = None if period is None else parse_duration(period, "privacy.report_period")
    instantaneous = table.get("instantaneous_epsilon")
    if instantaneous is not None:
        refuse = expected(InvalidPrivacy, "privacy.instantaneous_epsilon", "a positive finite number")
        instantaneous = number(instantaneous, refuse, positive=True)
        if not memoize:
            raise InvalidPrivacy(
                "privacy.instantaneous_epsilon: randomizes every send of a memoized report again; "
                "it needs memoize = true"
            )
    return PrivacyConfig(
        memoize=memoize, lifetime_epsilon=cap, report_period_s=period_s, instantaneous_epsilon=instantaneous
    )


def affordable_reports(per_report: float, cap: float | None) -> float:
    """How many epsilon-costing reports fit under ``cap`` (``inf`` without a cap)."""
    if cap is None:
        return math.inf
    return float(math.floor(cap / per_report * (1.0 + CAP_SLACK)))


def spent(per_report: float, charged: int) -> float:
    """Epsilon spent after ``charged`` reports that cost (sequential composition)."""
    return charged * per_report


def would_exceed(per_report: float, cap: float | None, charged: int, more: int = 1) -> bool:
    """Whether ``more`` costing reports after ``charged`` would take a device past ``cap``."""
    return charged + more > affordable_reports(per_report, cap)


@dataclass(frozen=True)
class LifetimeAudit:
    """The worst case a device spends over ``reports`` reports of which ``changes`` change its state."""

    per_report_epsilon: float
    memoize: bool
    reports: int
    changes: int
    cap: float | None
    charged: int
    refused: int

    @property
    def lifetime_epsilon(self) -> float:
        return spent(self.per_report_epsilon, self.charged)


def lifetime_audit(per_report: float, config: PrivacyConfig, reports: int, changes: int) -> LifetimeAudit:
    """Worst case over ``reports`` reports, ``changes`` of which move the device to a new state.

    Without memoization every report costs. With it only the first report and each
    change can reach a state never reported before (a change back to an old state costs
    nothing, so ``changes + 1`` is the worst case). The cap then refuses what does not fit.
    """
    if reports < 0 or changes < 0:
        raise InvalidPrivacy("reports and changes must be non-negative")
    if changes > max(reports - 1, 0):
        raise InvalidPrivacy(f"{changes} state changes need at least {changes + 1} reports, got {reports}")
    costing = min(reports, changes + 1) if config.memoize else reports
    fits = affordable_reports(per_report, config.lifetime_epsilon)
    charged = int(min(costing, fits))
    return LifetimeAudit(
        per_report_epsilon=per_report,
        memoize=config.memoize,
        reports=reports,
        changes=changes,
        cap=config.lifetime_epsilon,
        charged=charged,
        refused=costing - charged,
    )
