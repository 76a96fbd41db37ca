"""Refits: statistics of every window -> estimates with standard errors, as one snapshot.

A refit is a pure function of the merged statistics (its cost depends on d, never on
the number of reports). It runs off the consume loop; the exporter reads the newest
:class:`Snapshot` by reference, so a scrape never sees a half-updated set of values.
EM is warm-started from the previous snapshot's fit of the same window (the
mechanisms ignore a warm start where their model is not identifiable). Every window of
a key-value collection also gets its poisoning tests (:mod:`kvldp.common.untrusted.poisoning`):
the shortest finite window is the newest, tested for a jump against the rest of the
longest window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvldp.common.config.collection import Collection
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.conditional import ConditionalEstimate, ConditionalQuery
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.mechanisms.ioh import JointStateMechanism
from kvldp.common.mechanisms.pckv import PCKV
from kvldp.common.mechanisms.pckv_padded import PaddedShare
from kvldp.common.untrusted.poisoning import PoisoningReport, poisoning_reports


@dataclass(frozen=True)
class WindowFit:
    """Every configured estimator's estimate for one window, the conditional queries'
    answers per estimator (joint-state mechanisms with ``aggregate.conditions``),
    PCKV's padded share (PCKV collections) and the poisoning tests (key-value
    collections)."""

    window: str
    n_reports: int
    estimates: dict[str, Estimate]
    conditionals: dict[str, list[ConditionalEstimate]] = field(default_factory=dict)
    padded: PaddedShare | None = None
    poisoning: PoisoningReport | None = None


def condition_label(query: ConditionalQuery, keys: tuple[str, ...]) -> str:
    """The ``condition`` metric label: ``hamburger=1,fries=0`` in key order ('' if none)."""
    return ",".join(f"{keys[k]}={v}" for k, v in query.condition.pairs())


@dataclass(frozen=True)
class Snapshot:
    """An immutable set of estimates, swapped atomically by the refit task."""

    collection: Collection
    created: float
    duration: float
    fits: dict[str, WindowFit]

    def em_iterations(self, window: str) -> int | None:
        fit = self.fits.get(window)
        if fit is None or "em" not in fit.estimates:
            return None
        return int(fit.estimates["em"].diagnostics.get("em_iterations", 0))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready estimates; means and their errors in the collection's units."""
        c = self.collection

        def col(values: np.ndarray) -> dict[str, float | None]:
            return {k: (float(v) if np.isfinite(v) else None) for k, v in zip(c.keys, values, strict=True)}

        windows: dict[str, Any] = {}
        for name, fit in self.fits.items():
            conditional = {
                est: [_conditional_json(c, a) for a in answers] for est, answers in fit.conditionals.items()
            }
            windows[name] = {
                "conditional": conditional,
                "reports": fit.n_reports,
                "estimators": {
                    est: {
                        "frequency": col(e.frequency),
                        "frequency_stderr": col(e.frequency_stderr),
                        "mean": col(c.raw_mean(e.mean)),
                        "mean_stderr": col(c.raw_scale(e.mean_stderr)),
                        "diagnostics": e.to_dict()["diagnostics"],
                    }
                    for est, e in fit.estimates.items()
                },
            }
            if fit.poisoning is not None:
                windows[name]["poisoning"] = fit.poisoning.to_json(c.keys)
        return {
            "collection": c.name,
            "refit_timestamp": self.created,
            "refit_seconds": self.duration,
            "windows": windows,
        }


def _conditional_json(collection: Collection, answer: ConditionalEstimate) -> dict[str, Any]:
    out = answer.to_dict(list(collection.keys))
    out["condition"] = condition_label(answer.query, collection.keys)
    out["key"] = collection.keys[answer.query.target]
    for key in ("mean", "mean_stderr"):
        if out[key] is not None:
            scale = collection.raw_mean if key == "mean" else collection.raw_scale
            out[key] = float(scale(np.array([out[key]]))[0])
    return out


def jump_windows(collection: Collection, names: set[str]) -> tuple[str | None, str | None]:
    """(newest, longest) among the configured windows in ``names``: the shortest finite
    window and the longest one (``all`` if configured); (None, None) with fewer than two."""
    windows = [w for w in collection.aggregate.windows if w.name in names]
    finite = [w for w in windows if w.seconds is not None]
    if len(windows) < 2 or not finite:
        return None, None
    newest = min(finite, key=lambda w: w.seconds or 0)
    longest = max(windows, key=lambda w: float("inf") if w.seconds is None else w.seconds)
    return newest.name, longest.name


def refit(
    collection: Collection,
    windows: dict[str, Stats],
    previous: Snapshot | None,
    queries: list[ConditionalQuery] | None = None,
) -> Snapshot:
    """Estimate every window with every configured estimator (and answer ``queries``,
    by default the collection's conditions)."""
    started = time.perf_counter()
    mech = collection.estimation_mechanism
    queries = collection.conditional_queries() if queries is None else queries
    fits: dict[str, WindowFit] = {}
    poisoning = poisoning_reports(mech, windows, *jump_windows(collection, set(windows)))
    for name, stats in windows.items():
        estimates: dict[str, Estimate] = {}
        for est in collection.aggregate.estimators:
            options: dict[str, Any] = {}
            if est == "em" and previous is not None and name in previous.fits:
                prior = previous.fits[name].estimates.get("em")
                if prior is not None and prior.latent is not None:
                    options["warm_start"] = prior
            estimates[est] = mech.estimate(stats, est, **options)
        conditionals: dict[str, list[ConditionalEstimate]] = {}
        if queries and isinstance(mech, JointStateMechanism):
            conditionals = {est: mech.conditional_many(stats, queries, est) for est in estimates}
        padded = mech.padded_share(stats) if isinstance(mech, PCKV) else None
        fits[name] = WindowFit(name, stats.n_reports, estimates, conditionals, padded, poisoning.get(name))
    return Snapshot(collection, time.time(), time.perf_counter() - started, fits)
