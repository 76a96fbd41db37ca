"""PrivKVM's round protocol: the budget of each round, the published means, the stop rule.

Budget (``budget_mode``): with ``default`` round 1 spends eps/2 on the key bit; every
round spends eps/(2c) on the value; later rounds spend nothing on the key (the key bit
is a fair coin). ``per_round_equal`` is the alternative reading eps1 = eps2 = eps/(2c)
in every round. Round r costs a device ``round_epsilon(r)``; the c rounds together cost
exactly eps.

Published means: m^(0) = 0, and when round r closes the server publishes m^(r), the
PrivKV calibration of that round's counts (:func:`calibrated_mean`). Every report
carries its round ``r`` and ``md``, the digest of the means it perturbed with
(:func:`means_digest`), so a server can tell a report built on other means. With
``adaptive`` the rounds stop early by PrivKVM+'s rule (reconstructed; docs/mechanisms.md,
*Adaptive stop (PrivKVM+)*): after
the first round r whose means moved by at most ``a0`` on average,
mean_k |m^(r) - m^(r-1)| <= a0.

Client (:mod:`~kvldp.common.mechanisms.privkvm`), server (the aggregator's rounds) and
estimators (:mod:`~kvldp.common.mechanisms.privkvm_estimate`) all follow this one
recursion, held by :class:`PrivKVMRounds`.
"""

from __future__ import annotations

import hashlib

import numpy as np

from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.keysampled import NEG, POS
from kvldp.common.mechanisms.privkv import lpp_transition
from kvldp.common.primitives import FloatArray, rr_keep


def means_digest(round_index: int, means: FloatArray) -> int:
    """uint32 binding a round to the means published before it (the reports' ``md``)."""
    h = hashlib.sha256(b"kvldp-privkvm-means")
    h.update(int(round_index).to_bytes(2, "little"))
    h.update(np.ascontiguousarray(means, dtype="<f8").tobytes())
    return int.from_bytes(h.digest()[:4], "big")


def calibrated_mean(counts: FloatArray, p2: float, previous: FloatArray) -> FloatArray:
    """PrivKV calibration of one round (Sun et al. 2019, Alg. 2), clipped into [-1, 1]; keeps
    ``previous`` for keys without key-bit-1 reports (as the PCKV authors' reference code does)."""
    m1, m_1 = counts[..., POS], counts[..., NEG]
    big_n = m1 + m_1
    n1 = np.clip(((p2 - 1) * big_n + m1) / (2 * p2 - 1), 0, big_n)
    n2 = np.clip(((p2 - 1) * big_n + m_1) / (2 * p2 - 1), 0, big_n)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(big_n > 0, np.clip((n1 - n2) / big_n, -1.0, 1.0), previous)


class PrivKVMRounds(Mechanism):
    """The round schedule of a PrivKVM configuration: per-round budget and LPP
    probabilities, the server's recursion of published means, and when the rounds stop.
    ``rounds``, ``adaptive`` and ``a0`` come from the parameters (``PrivKVM._setup``)."""

    rounds: int
    adaptive: bool
    a0: float
    eps_value: float
    eps_key: FloatArray
    p1: FloatArray
    p2: float

    def _schedule_budget(self) -> None:
        """eps/(2c) on the value every round, the key's budget per round by
        ``budget_mode``, and the LPP's keep probabilities p1 per round and p2."""
        c = self.rounds
        self.eps_value = self.epsilon / (2 * c)
        if self.params["budget_mode"] == "default":
            self.eps_key = np.array([self.epsilon / 2] + [0.0] * (c - 1))
        else:
            self.eps_key = np.full(c, self.epsilon / (2 * c))
        self.p1 = np.array([rr_keep(e) for e in self.eps_key])
        self.p2 = rr_keep(self.eps_value)

    def round_epsilon(self, round_index: int) -> float:
        """What a device spends on its report in round ``round_index`` (0-based), by
        sequential composition: key budget of the round plus eps/(2c) on the value."""
        return float(self.eps_key[round_index]) + self.eps_value

    def next_means(self, counts: FloatArray, round_index: int, previous: FloatArray) -> FloatArray:
        """m^(r+1), published when round ``round_index`` closes: the PrivKV calibration of
        that round's counts (keys without key-bit-1 reports keep ``previous``)."""
        return calibrated_mean(np.asarray(counts[round_index], dtype=np.float64), self.p2, previous)

    def stops_after(self, round_index: int, counts: FloatArray) -> bool:
        """Whether no round follows ``round_index``: it was the last, or the adaptive rule
        says the means have settled (mean_k |m^(r) - m^(r-1)| <= a0)."""
        if round_index + 1 >= self.rounds:
            return True
        if not self.adaptive:
            return False
        means = self.published_means(counts)
        return bool(np.mean(np.abs(means[round_index + 1] - means[round_index])) <= self.a0)

    def through_round(self, stats: Stats, rounds: int) -> Stats:
        """The statistics of the first ``rounds`` rounds only (later rounds zeroed)."""
        counts = stats.arrays["counts"].copy()
        counts[rounds:] = 0
        return Stats(self, {"counts": counts, "n": np.array([int(counts.sum())], dtype=np.int64)})

    def published_means(self, counts: FloatArray) -> FloatArray:
        """m^(0..c): m^(0) = 0 and m^(r) from round r's counts (the server's recursion); the
        keys are ``counts``' second axis."""
        means = np.zeros((self.rounds + 1, counts.shape[1]))
        for r in range(self.rounds):
            means[r + 1] = self.next_means(counts, r, means[r])
        return means

    def round_transitions(self, published: FloatArray) -> FloatArray:
        """P_r[z | x] per round and key: (c, d, 3, 3), fake value = the published mean."""
        return np.stack(
            [lpp_transition(float(self.p1[r]), self.p2, published[r]) for r in range(self.rounds)]
        )
