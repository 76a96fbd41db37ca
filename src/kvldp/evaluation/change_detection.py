"""What an observer of one device's payload stream learns about when its state changed.

A device re-sends the memoized report z of its state (:mod:`kvldp.common.guarantees.memo`) at every
send; over 2m sends its state changes once, to one whose memoized report is z', at a
send tau drawn uniformly from 1 .. 2m - 1 (m sends before the change and m after, on
average). Without instantaneous randomization the payloads are z, ..., z, z', ...:
the first payload that differs gives the change time exactly, and a change goes unseen
only when z' = z by chance (:func:`chance_equal_payloads`). With it every send is the
randomizer applied afresh to z or z' (public fields permanent per device), and the
observer must test a change in the law of the sends.

Two observers, both knowing the randomizer (its K values per coordinate and its keep and
move probabilities p_I, q_I) and neither knowing the change time (uniform over the 2m - 1
splits of the stream), score a stream by the likelihood ratio of "one change" against
"no change", averaged over the change time (the Bayes factor of a uniform change time):

* ``oracle`` knows both memoized reports z and z'. Its likelihood ratio is exact, so for
  its information its test is the most powerful one (Neyman-Pearson), and it is more
  than the server knows: its detection rate bounds the server's from above.
* ``server`` knows neither; it knows the population's law of a memoized report's
  coordinates (which it can estimate) and treats z and z' as independent draws with those
  per-coordinate marginals. For a one-symbol report that is the exact Bayes factor; for a
  vector it ignores the dependence between coordinates, a plausible strong detector.

The change time is located at the split of largest likelihood (MAP under the uniform prior).
Every computation is vectorised over devices, sends, coordinates and values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvldp.common.channel.instantaneous import (
    BitsOutput,
    InstantaneousRandomizer,
    RandomizedOutput,
    SymbolOutput,
)
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import ReportBatch
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.primitives import FloatArray, IntArray

#: devices scored per block (bounds the (devices, splits, coordinates, values) arrays)
_BLOCK = 256
#: levels above it change no bound (e^-700 is below any rate), and e^700 stays finite
_LARGEST_LEVEL = 700.0


def coordinates(output: RandomizedOutput, batch: ReportBatch) -> IntArray:
    """The (reports, coordinates) values in [0, K) of a batch's randomized fields: a
    symbol; the bits of a bit vector (bit i = coordinate i); PCKV-UE's ternary coordinates
    as 0, 1 (+1) and 2 (-1)."""
    if isinstance(output, SymbolOutput):
        return output.symbols(batch)[:, None]
    if isinstance(output, BitsOutput):
        column = batch[output.field]
        if output.packed:
            return np.unpackbits(column, axis=1, count=output.nbits, bitorder="little").astype(np.int64)
        shifts = np.arange(output.nbits, dtype=np.int64)
        return (np.asarray(column, dtype=np.int64)[:, None] >> shifts) & 1
    pos = np.unpackbits(batch[output.positive], axis=1, count=output.nbits, bitorder="little")
    neg = np.unpackbits(batch[output.negative], axis=1, count=output.nbits, bitorder="little")
    return pos.astype(np.int64) + 2 * neg.astype(np.int64)


def _take(batch: ReportBatch, index: IntArray) -> ReportBatch:
    return {name: column[index] for name, column in batch.items()}


def payloads_equal(first: ReportBatch, second: ReportBatch) -> NDArray[np.bool_]:
    """Per row, whether two batches of the same fields carry the same payload."""
    n = next(iter(first.values())).shape[0]
    equal = np.ones(n, dtype=np.bool_)
    for name, column in first.items():
        equal &= np.all(column.reshape(n, -1) == second[name].reshape(n, -1), axis=1)
    return equal


def rounded_states(users: KVData, alpha: FloatArray, collects_values: bool) -> KVData:
    """The memoization states of ``users``: each value alpha-point rounded to +-1 with the
    (users, d) offsets ``alpha`` of its device (:func:`kvldp.common.guarantees.memo.round_values`),
    all +1 for a frequency oracle, whose state is the key set alone."""
    owner = np.repeat(np.arange(users.n_users), users.sizes)
    signs = np.where(alpha[owner, users.keys] < (1.0 + users.values) / 2.0, 1.0, -1.0)
    values = signs if collects_values else np.ones_like(users.values)
    return KVData(users.d, users.indptr, users.keys, values)


def changed_state_pairs(
    population: KVData, devices: int, collects_values: bool, rng: np.random.Generator
) -> tuple[KVData, KVData]:
    """``devices`` (old, new) state pairs: each device holds a random member's data, then
    another random member's, rounded with the device's own offsets; pairs whose two states
    coincide (no change of state) are drawn again."""
    d = population.d
    olds: list[KVData] = []
    news: list[KVData] = []
    found = 0
    while found < devices:
        want = devices - found
        alpha = rng.random((want, d))
        old = rounded_states(
            population.take(rng.integers(0, population.n_users, want)), alpha, collects_values
        )
        new = rounded_states(
            population.take(rng.integers(0, population.n_users, want)), alpha, collects_values
        )
        held_old, val_old = old.to_dense()
        held_new, val_new = new.to_dense()
        differ = np.flatnonzero(np.any((held_old != held_new) | (held_old & (val_old != val_new)), axis=1))
        olds.append(old.take(differ))
        news.append(new.take(differ))
        found += differ.shape[0]
    return _concat(olds), _concat(news)


def _concat(parts: list[KVData]) -> KVData:
    sizes = np.concatenate([p.sizes for p in parts])
    indptr = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    keys = np.concatenate([p.keys for p in parts])
    values = np.concatenate([p.values for p in parts])
    return KVData(parts[0].d, indptr, keys, values)


def memoized_pair(
    mechanism: Mechanism, old: KVData, new: KVData, permanent_public: bool, seed: int
) -> tuple[ReportBatch, ReportBatch]:
    """The memoized reports of every device's old and new state: the mechanism's client
    on each, its public fields drawn once for both (``permanent_public``, as with
    instantaneous randomization) or afresh for each (keyed by the state, as without)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5E1]))
    if permanent_public:
        public = np.random.SeedSequence([seed, 0x9B1])
        first = mechanism.perturb_many(old, rng, np.random.default_rng(public))
        second = mechanism.perturb_many(new, rng, np.random.default_rng(public))
        return first, second
    return mechanism.perturb_many(old, rng), mechanism.perturb_many(new, rng)


def chance_equal_payloads(mechanism: Mechanism, old: KVData, new: KVData, seed: int) -> float:
    """The share of state changes whose two memoized reports are the same payload (public
    fields keyed by the state, as without instantaneous randomization): the changes a
    payload stream hides by chance."""
    first, second = memoized_pair(mechanism, old, new, False, seed)
    return float(payloads_equal(first, second).mean())


@dataclass(frozen=True)
class Streams:
    """Randomized payload streams of ``devices`` devices, as coordinates: ``changed``
    (devices, 2m, C) switch from z to z' at send ``change`` (devices,), ``unchanged`` keep
    z throughout."""

    changed: IntArray
    unchanged: IntArray
    old: IntArray  # (devices, C): z
    new: IntArray  # (devices, C): z'
    change: IntArray  # tau in 1 .. 2m - 1: the first send of the new state


def streams(
    randomizer: InstantaneousRandomizer,
    old: ReportBatch,
    new: ReportBatch,
    sends: int,
    rng: np.random.Generator,
) -> Streams:
    """Every device's 2m sends, randomized afresh by ``randomizer``, the change at a
    uniform send tau in 1 .. 2m - 1."""
    n = next(iter(old.values())).shape[0]
    length = 2 * sends
    change: IntArray = np.asarray(rng.integers(1, length, size=n), dtype=np.int64)
    device = np.repeat(np.arange(n), length)
    after = (np.arange(length)[None, :] >= change[:, None]).reshape(-1)
    both = {name: np.concatenate([old[name], new[name]]) for name in old}
    changed = randomizer.randomize(_take(both, device + n * after), rng)
    unchanged = randomizer.randomize(_take(old, device), rng)
    output = randomizer.output
    shape = (n, length, output.coords)
    return Streams(
        changed=coordinates(output, changed).reshape(shape),
        unchanged=coordinates(output, unchanged).reshape(shape),
        old=coordinates(output, old),
        new=coordinates(output, new),
        change=change,
    )


def marginal_prior(values: IntArray, size: int) -> FloatArray:
    """(C, K) log-probabilities of each coordinate's values among memoized reports (rows of
    ``values``), with half a count added to every value."""
    counts = np.stack([np.sum(values == v, axis=0) for v in range(size)], axis=1) + 0.5
    return np.asarray(np.log(counts / counts.sum(axis=1, keepdims=True)), dtype=np.float64)


def _logmeanexp(x: FloatArray, axis: int) -> FloatArray:
    top = np.max(x, axis=axis, keepdims=True)
    return np.asarray(np.squeeze(top, axis) + np.log(np.mean(np.exp(x - top), axis=axis)), dtype=np.float64)


def oracle_llr(randomizer: InstantaneousRandomizer, y: IntArray, old: IntArray, new: IntArray) -> FloatArray:
    """(devices, 2m - 1) log-likelihood ratios of a change at each split tau = 1 .. 2m - 1
    against none, for an observer who knows z and z': the sends from tau on, scored on
    the coordinates where z and z' differ, ln(p_I/q_I) per match of z' minus match of z."""
    ratio = np.log(randomizer.keep / randomizer.other)
    score = np.sum((y == new[:, None, :]).astype(np.int64) - (y == old[:, None, :]), axis=2)
    suffix = np.cumsum(score[:, ::-1], axis=1)[:, ::-1]
    return np.asarray(ratio * suffix[:, 1:], dtype=np.float64)


def server_llr(randomizer: InstantaneousRandomizer, y: IntArray, log_prior: FloatArray) -> FloatArray:
    """(devices, 2m - 1) log-likelihood ratios of a change at each split against none, for
    an observer who knows only the per-coordinate marginals ``log_prior`` (C, K) of a
    memoized report: per coordinate, the marginal likelihood of a segment with n_v sends
    of value v is q_I^len sum_v pi(v) (p_I/q_I)^n_v, and the q_I^len factors cancel."""
    ratio = np.log(randomizer.keep / randomizer.other)
    size = log_prior.shape[1]
    out: list[FloatArray] = []
    for start in range(0, y.shape[0], _BLOCK):
        block = y[start : start + _BLOCK]
        onehot = (block[..., None] == np.arange(size)).astype(np.int32)
        counts = np.cumsum(onehot, axis=1)  # (n, 2m, C, K): counts over sends 0 .. t
        total = counts[:, -1:]
        prefix = counts[:, :-1]  # splits tau = 1 .. 2m - 1: sends before tau

        def segment(n: NDArray[np.int32]) -> FloatArray:
            terms = log_prior + ratio * n
            top = terms.max(axis=-1, keepdims=True)
            per_coord = np.squeeze(top, -1) + np.log(np.sum(np.exp(terms - top), axis=-1))
            return np.asarray(per_coord.sum(axis=-1), dtype=np.float64)

        out.append(segment(prefix) + segment(total - prefix) - segment(total))
    return np.concatenate(out)


@dataclass(frozen=True)
class Detection:
    """One observer's results on a set of streams: the detection rate at the false-positive
    rate aimed at, the false-positive rate obtained, and the share of changes located
    within one send of the truth."""

    detection: float
    false_positive: float
    located: float


def detect(
    changed: FloatArray, unchanged: FloatArray, change: IntArray, alpha: float, rng: np.random.Generator
) -> Detection:
    """Score changed and unchanged streams from their per-split log-likelihood ratios: the
    statistic is their mean over splits (the Bayes factor of a uniform change time),
    thresholded at the unchanged streams' 1 - alpha quantile (ties broken at random, a
    randomized test); the change is located at the split of largest ratio (ties broken at
    random: every such split is a most likely one)."""
    jitter = 1e-9
    stat_changed = _logmeanexp(changed, 1) + jitter * rng.random(changed.shape[0])
    stat_unchanged = _logmeanexp(unchanged, 1) + jitter * rng.random(unchanged.shape[0])
    threshold = float(np.quantile(stat_unchanged, 1.0 - alpha, method="higher"))
    guess = np.argmax(changed + jitter * rng.random(changed.shape), axis=1) + 1
    located = np.abs(guess - change) <= 1
    return Detection(
        detection=float(np.mean(stat_changed > threshold)),
        false_positive=float(np.mean(stat_unchanged > threshold)),
        located=float(np.mean(located)),
    )


def detection_bound(levels: FloatArray, alpha: float) -> float:
    """The largest detection rate at false-positive rate ``alpha`` of any test of a change
    over devices (equally likely) whose changed and unchanged streams have likelihood
    ratios within e^+-levels[i]. Per device the rates obey T <= min(e^l F, 1 - e^-l (1 - F)):
    slope e^l up to F = 1/(e^l + 1), then e^-l; the best test spends its false positives
    on the steepest pieces first."""
    n = levels.shape[0]
    levels = np.minimum(levels, _LARGEST_LEVEL)
    knee = 1.0 / (np.exp(levels) + 1.0)
    slopes = np.concatenate([np.exp(levels), np.exp(-levels)])
    widths = np.concatenate([knee, 1.0 - knee]) / n
    order = np.argsort(-slopes, kind="stable")
    slopes, widths = slopes[order], widths[order]
    spent = np.minimum(widths, np.maximum(alpha - (np.cumsum(widths) - widths), 0.0))
    return float(min(np.sum(spent * slopes), 1.0))
