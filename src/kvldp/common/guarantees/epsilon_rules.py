"""Which rule each epsilon figure of a collection follows, and over what horizon.

A collection bounds a device's spending by several rules kept by different parties: the
mechanism bounds one report (with ``[privacy] instantaneous_epsilon``, the memoized report
randomized again at every send bounds one report, and the memoized report itself all
reports of one state); ``[privacy] report_period`` and ``[aggregate]
max_reports_per_device`` bound a window of time (the first kept by the device and the
aggregator alike, the second by the aggregator's ledger and mirrored by the SDK); the
device's own ledger (memoization, ``[privacy] lifetime_epsilon``) bounds its lifetime.
A figure without its rule is easy to misread (a lifetime total of 2,000 looks absurd
next to a server that takes one report a day), so :func:`epsilon_figures` returns each
figure with the rule it follows, who keeps that rule, and the horizon it covers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from kvldp.common.config.collection import Collection
from kvldp.common.spec.privacy import LifetimeAudit, format_duration


@dataclass(frozen=True)
class EpsilonFigure:
    """One epsilon figure: its ``name``, ``epsilon``, the ``rule`` it follows, who keeps
    that rule (``kept_by``) and the ``horizon`` it covers."""

    name: str
    epsilon: float
    rule: str
    kept_by: str
    horizon: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.name}: epsilon {self.epsilon:g} over {self.horizon}. Rule: {self.rule}. Kept by {self.kept_by}."


def _window_figure(collection: Collection) -> EpsilonFigure | None:
    """The most a device spends per window of time, when a rule limits its reports per window:
    per budget_window, the limit x epsilon, or with instantaneous randomization the limit x
    the per-send bound c (:meth:`~kvldp.common.channel.instantaneous.InstantaneousRandomizer.send_bound`,
    what the aggregator's device book charges each report), never more than the limit x epsilon."""
    aggregate, privacy = collection.aggregate, collection.privacy
    limit = aggregate.max_reports_per_device
    if not limit:
        return None
    at_most = "; memoized re-sends are free, so this is the most" if privacy.memoize else ""
    if privacy.report_period_s is not None:
        return EpsilonFigure(
            "per_period",
            collection.epsilon,
            f"[privacy] report_period: one report per device per period{at_most}",
            "the device (SKIPPED_PERIOD) and the aggregator's ledger (budget_exceeded)",
            f"one report_period ({format_duration(privacy.report_period_s)})",
        )
    rule = f"[aggregate] max_reports_per_device = {limit} per budget_window"
    kept_by = (
        "the aggregator's ledger (budget_exceeded); the SDK mirrors it in the device's state (SKIPPED_BUDGET)"
    )
    randomizer = collection.instantaneous_randomizer
    if randomizer is None:
        epsilon, rule = collection.epsilon * limit, rule + at_most
    else:
        # what the device book charges each report (kvldp.aggregator.devices.epsilon_per_charge)
        per_send = randomizer.send_bound(collection.epsilon)
        epsilon = limit * per_send
        rule += (
            f"; every send randomized again ([privacy] instantaneous_epsilon), so each report "
            f"reveals at most the per-send bound c = {per_send:g} = max over n of "
            f"min(eps_inf, eps1 + (n - 1) eps_out) / n (eps_inf = {collection.epsilon:g} per state, "
            f"eps1 = {randomizer.epsilon_per_report:g} per send, eps_out = "
            f"{randomizer.epsilon_on_output:g} the randomizer's own): n sends of one state reveal "
            f"at most n c, so {limit} reports, however they fall into states, at most {limit} x c"
        )
        kept_by += "; c by the device, which randomizes every send again before sending it"
    return EpsilonFigure(
        "per_window",
        epsilon,
        rule,
        kept_by,
        f"one budget_window ({format_duration(aggregate.budget_window_s)})",
    )


def _report_figures(collection: Collection) -> list[EpsilonFigure]:
    """One report's figure; with instantaneous randomization, also one state's."""
    name = collection.mechanism_name
    instantaneous = collection.privacy.instantaneous_epsilon
    if instantaneous is None:
        return [
            EpsilonFigure(
                "per_report",
                collection.epsilon,
                f"the {name} mechanism's local differential privacy (checked by the exact audit)",
                "the device (it perturbs before sending)",
                "one report",
            )
        ]
    both = "the device, which applies both randomizations before sending; the server can enforce neither"
    return [
        EpsilonFigure(
            "per_report",
            instantaneous,
            f"[privacy] instantaneous_epsilon: the memoized {name} report randomized again at every "
            "send, exactly this level with respect to the device's input (checked by the exact audit "
            "of the composed channel)",
            both,
            "one report",
        ),
        EpsilonFigure(
            "per_state",
            collection.epsilon,
            f"the {name} mechanism's local differential privacy of the memoized report (checked by the "
            "exact audit); the sends of a state randomize that one report again and reveal no more",
            both,
            "every report of one state",
        ),
    ]


def epsilon_figures(collection: Collection, life: LifetimeAudit) -> list[EpsilonFigure]:
    """The collection's epsilon figures: per report (and per state, with instantaneous
    randomization), per window of time (when a rule limits reports per window), and over
    ``life``'s reports (:func:`kvldp.common.spec.privacy.lifetime_audit`)."""
    figures = _report_figures(collection)
    window = _window_figure(collection)
    if window is not None:
        figures.append(window)
    spending = (
        f"memoize: only a state never reported before costs (worst case {life.changes} changes, "
        f"{life.changes + 1} states)"
        if life.memoize
        else "every report costs (sequential composition)"
    )
    cap = (
        "no [privacy] lifetime_epsilon cap"
        if life.cap is None
        else f"capped by [privacy] lifetime_epsilon = {life.cap:g} ({life.refused} reports refused)"
    )
    horizon = f"a device's {life.reports} reports"
    if window is not None and life.reports:
        limit, seconds = collection.aggregate.max_reports_per_device, collection.aggregate.budget_window_s
        windows = math.ceil(life.reports / limit)
        unit = "budget_window" if collection.privacy.report_period_s is None else "report_period"
        horizon += (
            f", which the aggregator takes over at least {windows} {unit}s of {format_duration(seconds)} "
            f"({windows * seconds / 86400:.4g} days)"
        )
    figures.append(
        EpsilonFigure("lifetime", life.lifetime_epsilon, f"{spending}; {cap}", "the device's ledger", horizon)
    )
    return figures
