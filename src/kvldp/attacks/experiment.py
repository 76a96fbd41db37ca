"""The in-process attack experiment: genuine devices with and without fake ones.

For each repeat the genuine population reports once (its generator seeded by the
repeat), the fakes of an attack are a fraction beta of all devices (beta/(1-beta) times
the genuine count) and report with a generator of their own; both are folded, through a
defense's filter, into the statistics "with fakes", and the genuine reports alone into
"without fakes". Per estimator the experiment measures (Wu et al. 2022):

* frequency gain G_f = sum over targets of f_hat(with) - f_hat(without),
* mean gain G_m = the same for the means (an undefined mean counts as 0, the value an
  estimator that knows nothing reports),
* MSE over all keys of the frequencies and of the means with fakes against the truth,

and the shares of fake and genuine reports the defense dropped. A detecting defense adds,
per repeat, whether the poisoning tests alarm on the statistics with fakes and on those
without (the false alarm of that population), and the share of the targets among the
keys they flag. PrivKVM reports in
rounds and publishes means between them: the fakes report in every round, the means
are computed from everything folded, and the run without fakes is a separate run of the
same genuine generator (its later rounds perturb other published means, so its
reports differ from round 2 on).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvldp.attacks.defenses import Alarm, Defense
from kvldp.attacks.fakes import Round, fake_reports
from kvldp.attacks.target import Target
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import ReportBatch, batch_len, concat
from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms import Mechanism
from kvldp.common.mechanisms.base import COLLECT_CHUNK
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.common.primitives import FloatArray

#: SeedSequence tags of the genuine and the fake devices' generators
GENUINE, FAKE = 0x6E, 0xFA


def fake_count(genuine: int, beta: float) -> int:
    """Fakes that make a fraction beta of all devices: round(beta / (1 - beta) * genuine)."""
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"the fake fraction must lie in [0, 1), got {beta}")
    return round(beta / (1.0 - beta) * genuine)


def genuine_rng(seed: int, repeat: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, repeat, GENUINE]))


def fake_rng(seed: int, repeat: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, repeat, FAKE]))


def genuine_reports(mechanism: Mechanism, users: KVData, rng: np.random.Generator) -> ReportBatch:
    """The genuine devices' reports, in the blocks of ``Mechanism.collect`` (same generator,
    same reports)."""
    return concat([mechanism.perturb_many(block, rng) for block in users.chunks(COLLECT_CHUNK)])


def _take(batch: ReportBatch, keep: np.ndarray) -> ReportBatch:
    return {name: column[keep] for name, column in batch.items()}


@dataclass
class Folded:
    """Statistics with and without fakes, and what the defense dropped."""

    with_fakes: Stats
    without: Stats
    fakes_dropped: int = 0
    fakes_sent: int = 0
    genuine_dropped: int = 0
    genuine_sent: int = 0
    #: the poisoning tests with and without fakes (a detecting defense only)
    alarm_with: Alarm | None = None
    alarm_without: Alarm | None = None


def fold_once(mechanism: Mechanism, genuine: ReportBatch, fakes: ReportBatch, defense: Defense) -> Folded:
    """One-shot mechanisms: the same genuine reports in both statistics."""
    keep_g = defense.keep(mechanism, genuine)
    keep_f = defense.keep(mechanism, fakes)
    without = mechanism.new_stats().fold(_take(genuine, keep_g), check=False)
    with_fakes = without.copy().fold(_take(fakes, keep_f), check=False)
    return Folded(
        with_fakes,
        without,
        int((~keep_f).sum()),
        batch_len(fakes),
        int((~keep_g).sum()),
        batch_len(genuine),
    )


FakeRound = Callable[[int, FloatArray], ReportBatch]


def privkvm_rounds(
    mechanism: PrivKVM,
    users: KVData,
    rng: np.random.Generator,
    fakes: FakeRound | None,
    defense: Defense,
    tally: Folded | None = None,
) -> Stats:
    """PrivKVM's rounds on genuine users plus (optionally) fakes, the published means
    computed from what the defense kept, with the adaptive rule's early stop."""
    stats = mechanism.new_stats()
    for r in range(mechanism.rounds):
        published = mechanism.published_means(stats.arrays["counts"].astype(np.float64))[r]
        batch = mechanism.perturb_round_many(users, rng, r, published)
        keep = defense.keep(mechanism, batch)
        stats.fold(_take(batch, keep), check=False)
        if fakes is not None:
            fake = fakes(r, published)
            keep_f = defense.keep(mechanism, fake)
            stats.fold(_take(fake, keep_f), check=False)
            if tally is not None:
                tally.fakes_dropped += int((~keep_f).sum())
                tally.fakes_sent += batch_len(fake)
                tally.genuine_dropped += int((~keep).sum())
                tally.genuine_sent += batch_len(batch)
        if mechanism.stops_after(r, stats.arrays["counts"].astype(np.float64)):
            break
    return stats


@dataclass(frozen=True)
class Setting:
    """One cell of the experiment grid."""

    mechanism: Mechanism
    attack: str
    beta: float
    defense: Defense
    estimators: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    """Per-repeat measurements of one setting and estimator."""

    frequency_gain: float
    mean_gain: float
    target_frequency: float
    target_mean: float
    mse_frequency: float
    mse_mean: float
    mse_frequency_clean: float


def _nanmse(estimate: FloatArray, truth: FloatArray) -> float:
    ok = np.isfinite(estimate) & np.isfinite(truth)
    return float(np.mean((estimate[ok] - truth[ok]) ** 2)) if ok.any() else math.nan


def measure(
    mechanism: Mechanism, folded: Folded, estimator: str, target: Target, truth: tuple[FloatArray, FloatArray]
) -> Outcome:
    """Gains of the targets and MSE over all keys for one estimator."""
    after = mechanism.estimate(folded.with_fakes, estimator)
    before = mechanism.estimate(folded.without, estimator)
    t = target.keys
    f_after, f_before = after.frequency[t], before.frequency[t]
    m_after = np.nan_to_num(after.mean[t], nan=0.0)
    m_before = np.nan_to_num(before.mean[t], nan=0.0)
    return Outcome(
        frequency_gain=float(np.sum(f_after - f_before)),
        mean_gain=float(np.sum(m_after - m_before)),
        target_frequency=float(np.mean(f_after)),
        target_mean=float(np.mean(m_after)),
        mse_frequency=_nanmse(after.frequency, truth[0]),
        mse_mean=_nanmse(after.mean, truth[1]),
        mse_frequency_clean=_nanmse(before.frequency, truth[0]),
    )


def run_repeat(
    setting: Setting, users: KVData, target: Target, seed: int, repeat: int, genuine: ReportBatch | None
) -> tuple[Folded, dict[str, Outcome]]:
    """One repeat of one setting: fold, then measure every estimator the defense uses.
    ``genuine`` (one-shot mechanisms) are the repeat's genuine reports, shared across settings."""
    mech = setting.mechanism
    n_fakes = fake_count(users.n_users, setting.beta)
    f_rng = fake_rng(seed, repeat)
    if isinstance(mech, PrivKVM):
        tally = Folded(mech.new_stats(), mech.new_stats())

        def fakes(r: int, published: FloatArray) -> ReportBatch:
            return fake_reports(mech, setting.attack, n_fakes, target, f_rng, Round(r, published))

        tally.with_fakes = privkvm_rounds(
            mech, users, genuine_rng(seed, repeat), fakes, setting.defense, tally
        )
        tally.without = privkvm_rounds(mech, users, genuine_rng(seed, repeat), None, setting.defense)
        folded = tally
    else:
        assert genuine is not None
        folded = fold_once(
            mech, genuine, fake_reports(mech, setting.attack, n_fakes, target, f_rng), setting.defense
        )
    folded.alarm_with = setting.defense.detect(mech, folded.with_fakes)
    folded.alarm_without = setting.defense.detect(mech, folded.without)
    truth = users.truth()
    return folded, {e: measure(mech, folded, e, target, truth) for e in setting.estimators}


@dataclass(frozen=True)
class Row:
    """A result row: one mechanism x attack x beta x defense x estimator over the repeats."""

    values: dict[str, Any]


def _nanmean(xs: Sequence[float]) -> float:
    a = np.asarray(xs, dtype=np.float64)
    return float(a[np.isfinite(a)].mean()) if np.isfinite(a).any() else math.nan


def _mean_se(xs: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=np.float64)
    if a.size < 2:
        return float(a.mean()), math.nan
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(a.size))


def _detection(folds: list[Folded], target: Target) -> dict[str, float]:
    """Alarm rates with and without fakes over the repeats, the share of the targets
    flagged (with fakes) and the mean score with fakes; NaN without detection."""
    with_ = [f.alarm_with for f in folds if f.alarm_with is not None]
    without = [f.alarm_without for f in folds if f.alarm_without is not None]
    if not with_ or not without:
        return dict.fromkeys(DETECTION, math.nan)
    return {
        "alarm_with_fakes": float(np.mean([a.alarm for a in with_])),
        "alarm_without_fakes": float(np.mean([a.alarm for a in without])),
        "targets_flagged": float(np.mean([a.flagged[target.keys].mean() for a in with_])),
        "score_with_fakes": float(np.mean([a.score for a in with_])),
    }


#: the columns a detecting defense fills
DETECTION = ("alarm_with_fakes", "alarm_without_fakes", "targets_flagged", "score_with_fakes")


def summarise(
    setting: Setting, estimator: str, runs: list[tuple[Folded, Outcome]], n_fakes: int, target: Target
) -> Row:
    def stat(name: str) -> list[float]:
        return [getattr(o, name) for _, o in runs]

    gf, gf_se = _mean_se(stat("frequency_gain"))
    gm, gm_se = _mean_se(stat("mean_gain"))
    sent_f = sum(f.fakes_sent for f, _ in runs)
    sent_g = sum(f.genuine_sent for f, _ in runs)
    return Row(
        {
            "mechanism": setting.mechanism.name,
            "epsilon": setting.mechanism.epsilon,
            "attack": setting.attack,
            "beta": setting.beta,
            "defense": setting.defense.name,
            "estimator": estimator,
            "repeats": len(runs),
            "fakes": n_fakes,
            "frequency_gain": gf,
            "frequency_gain_se": gf_se,
            "mean_gain": gm,
            "mean_gain_se": gm_se,
            "target_frequency": float(np.mean(stat("target_frequency"))),
            "target_mean": float(np.mean(stat("target_mean"))),
            "mse_frequency": _nanmean(stat("mse_frequency")),
            "mse_frequency_clean": _nanmean(stat("mse_frequency_clean")),
            "mse_mean": _nanmean(stat("mse_mean")),
            "fakes_dropped": sum(f.fakes_dropped for f, _ in runs) / sent_f if sent_f else math.nan,
            "genuine_dropped": sum(f.genuine_dropped for f, _ in runs) / sent_g if sent_g else math.nan,
            **_detection([f for f, _ in runs], target),
        }
    )


def run(
    mechanisms: Sequence[Mechanism],
    attacks: Sequence[str],
    betas: Sequence[float],
    defenses: Sequence[Defense],
    estimators: Sequence[str],
    users: KVData,
    target: Target,
    repeats: int,
    seed: int,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """The whole grid; an estimator a mechanism lacks is skipped for it, as is a defense
    that does not apply to it."""
    rows: list[Row] = []
    for mech in mechanisms:
        target.check(mech.d)
        mine = tuple(e for e in estimators if e in mech.estimator_names)
        per_repeat = [
            None if isinstance(mech, PrivKVM) else genuine_reports(mech, users, genuine_rng(seed, r))
            for r in range(repeats)
        ]
        for defense in defenses:
            if not defense.applies(mech):
                continue
            chosen = tuple(defense.estimators(mech, list(mine)))
            for attack in attacks:
                for beta in betas:
                    setting = Setting(mech, attack, beta, defense, chosen)
                    runs = [
                        run_repeat(setting, users, target, seed, r, per_repeat[r]) for r in range(repeats)
                    ]
                    for e in chosen:
                        rows.append(
                            summarise(
                                setting,
                                e,
                                [(f, o[e]) for f, o in runs],
                                fake_count(users.n_users, beta),
                                target,
                            )
                        )
                    if progress is not None:
                        progress(f"{mech.name} {defense.name} {attack} beta={beta:g}")
    return rows
