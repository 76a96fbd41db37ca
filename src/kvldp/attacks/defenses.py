"""The defenses an attack experiment compares, by name.

A defense may drop reports before folding (a per-report rule), may replace the
estimators (a robust estimator) and may test the folded statistics (a population-level
detector); everything else is the plain pipeline. The registry is open: :func:`register`
adds one without touching the experiment.

* ``none`` — every well-formed report folded (implausible ones too: what the fakes do
  without the per-report rule), the requested estimators;
* ``plausibility`` — rows whose ``mechanism.validate_coded`` code is
  ``implausible_report`` are dropped, as the aggregator sends them to the DLQ. For a
  mechanism without that rule it drops nothing (the measured gains then equal ``none``'s);
* ``robust`` — the ``robust`` estimator instead of the requested ones, for the mechanisms
  that list it in ``estimator_names`` (skipped for the others);
* ``detection`` — the aggregator's population-level poisoning tests
  (:mod:`kvldp.common.untrusted.poisoning`) on the ``all`` window after a refit, as the aggregator
  computes them: on what it folds, so implausible rows are dropped first, and without the
  time-jump test (an in-process population is poisoned from its first report, so it has
  no newest window to compare). It changes no estimate (they equal ``plausibility``'s);
  it answers whether the operator would have been alerted: a score of the window at or
  above :data:`~kvldp.common.untrusted.poisoning.ALERT_SCORE`, and which keys were flagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvldp.common.data.schema import InvalidReport, ReportBatch, batch_len
from kvldp.common.data.stats import Stats
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import Mechanism
from kvldp.common.untrusted.poisoning import ALERT_SCORE, PoisoningReport, poisoning_reports
from kvldp.common.untrusted.poisoning_states import covers

IMPLAUSIBLE = "implausible_report"


class UnknownDefense(KvldpError):
    """No defense is registered under the requested name."""


@dataclass(frozen=True)
class Defense:
    """A named defense: which reports it keeps and which estimators it reads them with."""

    name: str
    summary: str
    #: estimator the defense imposes (None: the requested ones)
    estimator: str | None = None
    #: whether it drops rows the mechanism's validation marks implausible
    drops_implausible: bool = field(default=False)
    #: whether it runs the aggregator's poisoning tests on the folded statistics
    detects: bool = field(default=False)

    def applies(self, mechanism: Mechanism) -> bool:
        if self.detects and not covers(mechanism):
            return False
        return self.estimator is None or self.estimator in mechanism.estimator_names

    def estimators(self, mechanism: Mechanism, requested: list[str]) -> list[str]:
        return [self.estimator] if self.estimator is not None else requested

    def keep(self, mechanism: Mechanism, batch: ReportBatch) -> NDArray[np.bool_]:
        """Rows of ``batch`` the defense folds: every row, or (a defense that drops
        implausible rows) those the plausibility rule accepts. The rows kept are folded
        without validation (``Stats.fold(check=False)``), so an implausible row reaches
        the statistics of a defense without the rule; a row invalid for any other reason
        is a bug of the fakes and raises."""
        _, codes, details = mechanism.validate_coded(batch)
        broken = np.flatnonzero((codes != "") & (codes != IMPLAUSIBLE))
        if broken.size:
            i = int(broken[0])
            raise InvalidReport(f"{mechanism.name} report {i} is invalid: {details[i]}")
        if not self.drops_implausible:
            return np.ones(batch_len(batch), dtype=bool)
        return np.asarray(codes != IMPLAUSIBLE, dtype=bool)

    def detect(self, mechanism: Mechanism, stats: Stats) -> Alarm | None:
        """The poisoning tests of ``stats`` as the ``all`` window of a refit (None for a
        defense that does not detect)."""
        if not self.detects:
            return None
        report = poisoning_reports(mechanism, {"all": stats}, None, None)["all"]
        return Alarm.of(report)


@dataclass(frozen=True)
class Alarm:
    """What the poisoning tests of one snapshot say: the window's score, whether it
    reaches the alert threshold, and the keys whose own score does."""

    score: float
    flagged: NDArray[np.bool_]

    @classmethod
    def of(cls, report: PoisoningReport) -> Alarm:
        keys = np.nan_to_num(report.key_score, nan=0.0) >= ALERT_SCORE
        return cls(report.score, np.asarray(keys, dtype=bool))

    @property
    def alarm(self) -> bool:
        return self.score >= ALERT_SCORE


DEFENSES: dict[str, Defense] = {}


def register(defense: Defense) -> Defense:
    if defense.name in DEFENSES:
        raise ValueError(f"defense {defense.name!r} registered twice")
    DEFENSES[defense.name] = defense
    return defense


def get(name: str) -> Defense:
    try:
        return DEFENSES[name]
    except KeyError:
        raise UnknownDefense(f"unknown defense {name!r} (known: {', '.join(DEFENSES)})") from None


register(Defense("none", "no defense"))
register(
    Defense(
        "plausibility",
        "reports no input makes plausible are dropped (validation code implausible_report)",
        drops_implausible=True,
    )
)
register(Defense("robust", "the robust estimator", estimator="robust"))
register(
    Defense(
        "detection",
        "the aggregator's poisoning tests of the all window (alarms; estimates as plausibility's)",
        drops_implausible=True,
        detects=True,
    )
)
