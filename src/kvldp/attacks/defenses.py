"""The defenses an attack experiment compares, by name.

A defense may drop reports before folding (a per-report rule) and may replace the
estimators (a robust estimator); everything else is the plain pipeline. The registry is
open: :func:`register` adds one (a population-level detector, say) without touching the
experiment.

* ``none`` — every valid report folded, the requested estimators;
* ``plausibility`` — rows whose ``mechanism.validate_coded`` code is
  ``implausible_report`` are dropped, as the aggregator sends them to the DLQ. For a
  mechanism without that rule it drops nothing (the measured gains then equal ``none``'s);
* ``robust`` — the ``robust`` estimator instead of the requested ones, for the mechanisms
  that list it in ``estimator_names`` (skipped for the others).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import Mechanism
from kvldp.common.schema import ReportBatch, batch_len

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

    def applies(self, mechanism: Mechanism) -> bool:
        return self.estimator is None or self.estimator in mechanism.estimator_names

    def estimators(self, mechanism: Mechanism, requested: list[str]) -> list[str]:
        return [self.estimator] if self.estimator is not None else requested

    def keep(self, mechanism: Mechanism, batch: ReportBatch) -> NDArray[np.bool_]:
        """Rows of ``batch`` the defense folds."""
        if not self.drops_implausible:
            return np.ones(batch_len(batch), dtype=bool)
        _, codes, _ = mechanism.validate_coded(batch)
        return np.asarray(codes != IMPLAUSIBLE, dtype=bool)


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
