"""Parametric bootstrap of PrivKVM's clipped and iterated point estimates: their
root-mean-square error at plug-in states (docs/mechanisms.md, *PrivKVM estimators*).

Three PrivKVM point estimates have no usable error formula. ``paper``'s mean is a chain
of calibrations, each clipped into [-1, 1] and each round perturbed with the one before;
``virtual``'s iterations divide by an estimated weight and clip; ``normsub`` projects
round 1's states onto the simplex, which moves the frequency by the value noise. The
delta method misses the clipping (its gradient is 0 there) and the bias, so their
standard error is the RMSE of the point estimate, estimated by replaying the rounds on
the model: every key's reporters of round r are drawn from that round's participants
without replacement (a hypergeometric number of holders, each holder's value sign
Disc'ed with the plug-in mean), every reporter perturbs by that round's transition with
the mean the replayed rounds published before it, and the estimator runs on every
replicate. The report counts per round and key are held at the observed ones, and the
seed is fixed, so one set of statistics always gets the same standard errors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvldp.common.mechanisms.keysampled import ABSENT, NEG, POS
from kvldp.common.mechanisms.privkv import lpp_transition
from kvldp.common.mechanisms.privkvm_rounds import PrivKVMRounds, calibrated_mean
from kvldp.common.primitives import FloatArray

#: replicates of the bootstrap (the RMSE's relative Monte Carlo error is about 1/sqrt(2 * 200))
REPLICATES = 200
#: fixed seed: an estimate is a function of its statistics
SEED = 0x9B1


def replay_rounds(
    rounds: PrivKVMRounds, f: FloatArray, m: FloatArray, counts: FloatArray, replicates: int = REPLICATES
) -> FloatArray:
    """(replicates, c, d, 3) counts of the rounds replayed at frequencies ``f`` and means
    ``m`` with ``counts``' reports per round and key (see the module docstring)."""
    rng = np.random.default_rng(SEED)
    c, d = counts.shape[0], counts.shape[1]
    reports = counts.sum(axis=2).astype(np.int64)  # (c, d)
    out = np.zeros((replicates, c, d, 3))
    published = np.zeros((replicates, d))
    up = (1.0 + np.clip(m, -1.0, 1.0)) / 2.0
    for r in range(c):
        participants = int(reports[r].sum())
        if participants == 0:
            continue
        holders = np.rint(np.clip(f, 0.0, 1.0) * participants).astype(np.int64)
        shape = (replicates, d)
        held = rng.hypergeometric(
            np.broadcast_to(holders, shape),
            np.broadcast_to(participants - holders, shape),
            np.broadcast_to(reports[r], shape),
        )
        pos = rng.binomial(held, np.broadcast_to(up, shape))
        latent = {POS: pos, NEG: held - pos, ABSENT: reports[r][None, :] - held}
        trans = lpp_transition(float(rounds.p1[r]), rounds.p2, published)  # (B, d, 3, 3)
        for state, n in latent.items():
            out[:, r] += rng.multinomial(n, trans[..., :, state])
        published = calibrated_mean(out[:, r], rounds.p2, published)
    return out


def bootstrap_rmse(
    point: Callable[[FloatArray], FloatArray], replayed: FloatArray, truth: FloatArray
) -> FloatArray:
    """Per key, the RMSE about ``truth`` of ``point`` (counts (c, d, 3) -> (d,), key by key)
    over the replayed rounds; replicates where the estimate is undefined are left out. The
    replicates run in one call, as B·d keys."""
    b, c, d, _ = replayed.shape
    draws = point(replayed.transpose(1, 0, 2, 3).reshape(c, b * d, 3)).reshape(b, d)
    err2 = (draws - truth[None, :]) ** 2
    defined = np.isfinite(err2)
    with np.errstate(invalid="ignore", divide="ignore"):
        mse = np.where(defined, err2, 0.0).sum(axis=0) / defined.sum(axis=0)
    return np.asarray(np.sqrt(mse), dtype=np.float64)
