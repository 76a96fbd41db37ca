"""``kvldp evaluate``: simulate a population, perturb, fold, estimate, score.

The population is generated once from the seed; each repeat re-runs the mechanism's
randomness on it (as the papers do), through the same ``collect``/``estimate`` code a
live collection uses. Metrics average over repeats: MSE and MAE of frequencies (as
fractions of users) over all keys, and of means over every key whose true mean is
defined (someone holds it). An estimator that leaves such a key's mean undefined is
scored as answering 0, the centre of the value range [-1, 1] and the least-bad answer
without information, and the key is counted in ``undefined_means``: so every estimator
is scored on the same keys, and declining to answer is never cheaper than the
no-information answer (which is what Algorithm 4's clipping prints for PCKV). Reference:
docs/mechanisms.md, *Frequency and mean errors*.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvldp.common.errors import KvldpError
from kvldp.common.estimation.conditional import ConditionalQuery, conditional_truth
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.ioh import JointStateMechanism
from kvldp.common.primitives import FloatArray
from kvldp.progress import Progress
from kvldp.sim.datasets import Dataset


@dataclass(frozen=True)
class RepeatScore:
    """The errors of one repeat of an evaluation: MSE and MAE of frequencies and of means."""

    mse_frequency: float
    mae_frequency: float
    mse_mean: float
    mae_mean: float
    undefined_means: int


def score(freq: FloatArray, mean: FloatArray, true_f: FloatArray, true_m: FloatArray) -> RepeatScore:
    """Errors of one estimate against the population's truth (docs/mechanisms.md, *Frequency and mean errors*)."""
    df = freq - true_f
    f_ok = np.isfinite(df)
    m_defined = np.isfinite(true_m)
    dm = np.where(np.isfinite(mean), mean, 0.0) - true_m
    m_ok = np.isfinite(dm)
    return RepeatScore(
        mse_frequency=float(np.mean(df[f_ok] ** 2)) if f_ok.any() else float("nan"),
        mae_frequency=float(np.mean(np.abs(df[f_ok]))) if f_ok.any() else float("nan"),
        mse_mean=float(np.mean(dm[m_ok] ** 2)) if m_ok.any() else float("nan"),
        mae_mean=float(np.mean(np.abs(dm[m_ok]))) if m_ok.any() else float("nan"),
        undefined_means=int(np.sum(m_defined & ~np.isfinite(mean))),
    )


def _nanmean(values: list[float]) -> float | None:
    arr = np.asarray(values, dtype=np.float64)
    if not np.any(np.isfinite(arr)):
        return None
    return float(np.nanmean(arr))


def evaluate(
    mechanism: Mechanism,
    estimator: str,
    dataset: Dataset,
    repeats: int,
    seed: int,
    show_progress: bool = True,
    queries: Sequence[ConditionalQuery] = (),
    extra: Callable[[Estimate], Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """Run ``repeats`` collections of ``dataset`` through ``mechanism`` and score ``estimator``
    (and, for joint-state mechanisms, the conditional ``queries``). ``extra`` adds
    experiment-specific metrics of each repeat's estimate, averaged like the others."""
    if repeats < 1:
        raise ValueError("--repeats must be at least 1")
    if queries and not isinstance(mechanism, JointStateMechanism):
        raise KvldpError(f"{mechanism.name} answers no conditional queries (use ioh, ioh_oue or ioh_hrr)")
    true_f, true_m = dataset.users.truth()
    truths = [conditional_truth(dataset.users, q) for q in queries]
    cond_f = np.array([t[0] for t in truths])
    cond_m = np.array([t[1] for t in truths])
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    scores: list[RepeatScore] = []
    cond_scores: list[RepeatScore] = []
    extras: list[Mapping[str, float]] = []
    started = time.perf_counter()
    with Progress(repeats, f"{mechanism.name}/{estimator}") as bar:
        bar.enabled = bar.enabled and show_progress
        for _ in range(repeats):
            stats = mechanism.collect(dataset.users, rng)
            est = mechanism.estimate(stats, estimator)
            scores.append(score(est.frequency, est.mean, true_f, true_m))
            if extra is not None:
                extras.append(extra(est))
            if queries:
                assert isinstance(mechanism, JointStateMechanism)
                answers = mechanism.conditional_many(stats, list(queries), estimator)
                freq = np.array([a.frequency for a in answers])
                mean = np.array([a.mean for a in answers])
                cond_scores.append(score(freq, mean, cond_f, cond_m))
            bar.advance()
    seconds = time.perf_counter() - started
    values = mechanism.collects_values
    mse_f = [s.mse_frequency for s in scores]
    conditional: dict[str, Any] = {}
    if queries:
        conditional = {
            "queries": [q.format([f"k{i}" for i in range(mechanism.d)]) for q in queries],
            "mse_conditional_frequency": _nanmean([s.mse_frequency for s in cond_scores]),
            "mse_conditional_mean": _nanmean([s.mse_mean for s in cond_scores]),
            "mae_conditional_frequency": _nanmean([s.mae_frequency for s in cond_scores]),
            "mae_conditional_mean": _nanmean([s.mae_mean for s in cond_scores]),
            "undefined_conditional_means": float(np.mean([s.undefined_means for s in cond_scores])),
        }
    return {
        "mechanism": mechanism.name,
        "notion": mechanism.notion,
        "estimator": estimator,
        "dataset": dataset.name,
        "users": dataset.users.n_users,
        "keys": mechanism.d,
        "epsilon": mechanism.epsilon,
        "params": dict(mechanism.params),
        "repeats": repeats,
        "seed": seed,
        "mse_frequency": _nanmean(mse_f),
        "mse_frequency_sd": float(np.std(mse_f, ddof=1)) if repeats > 1 else None,
        "mae_frequency": _nanmean([s.mae_frequency for s in scores]),
        "mse_mean": _nanmean([s.mse_mean for s in scores]) if values else None,
        "mae_mean": _nanmean([s.mae_mean for s in scores]) if values else None,
        "undefined_means": float(np.mean([s.undefined_means for s in scores])) if values else None,
        **conditional,
        **{name: _nanmean([e[name] for e in extras]) for name in (extras[0] if extras else {})},
        "seconds": seconds,
        "seconds_per_repeat": seconds / repeats,
    }
