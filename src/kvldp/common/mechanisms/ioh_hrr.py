"""IOH with OUE bits, and the low-order Hadamard joint-state mechanism.

``ioh_oue`` is IOH with optimised unary encoding (Sun, Ping and Ye 2021's recommendation;
docs/mechanisms.md, *IOH with OUE bits*):
p = 1/2, q = 1/(e^eps + 1) per bit — the same 3^d-bit report, lower variance at every
eps, still eps-LDP and tight.

``ioh_hrr`` answers the same conditional queries with a report of about 10 bits
(kvldp's own; docs/mechanisms.md, *Low-order Hadamard responses*). Each key's state s in {0, 1, 2} is a 2-bit digit; the joint state is
x = sum_i s_i 4^(d-1-i) (key 0 the leading digit, as in IOH). The Hadamard matrix of
order 4^d factorises per digit, H[x, j] = prod_i h(x_i, j_i) = (-1)^popcount(x AND j).
The device draws j uniformly from T_L \\ {0}, the coefficients with at most L (``order``)
non-zero digits (j = 0 carries no information: Phi(0) = n is known), and sends its rank
in that set with b = RR_eps(H[x, j]). Folding adds one count; the state is
2 (|T_L| - 1) integers whatever d is.

Estimation: Phi(j) = sum_u H[x_u, j] is estimated by K c z_j with K = |T_L| - 1,
c = (e^eps + 1)/(e^eps - 1) and z_j = #(+1) - #(-1) of reports of coefficient j. A
product set that constrains the keys Q (|Q| <= L) counts

    Count(T) = 4^-|Q| sum_{j : supp(j) in Q} Phi(j) prod_{i in Q} w_i(j_i),  w_i(b) = sum_{a in T_i} h(a, b),

exactly, since free keys sum over all four codes and the unused code 3 holds nobody.
A query touching more than L keys cannot be answered and is refused.

Covariance (exact given the users' joint states): every user contributes one report,
so for sets T1, T2 with weights W1, W2 and r = W(0)/4^|Q|,

    Cov = n K c^2 4^-(|Q1|+|Q2|) sum_{j != 0} W1(j) W2(j)
          - [A(T1 ∩ T2) - r2 A(T1) - r1 A(T2) + n r1 r2],

the second line being sum_u E[Y1_u] E[Y2_u] with E[Y_u] = 1[x_u in T] - r; A(.) are the
(plug-in) counts. Sets of one query are nested, so their intersections are counts the
mechanism can estimate too.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

from kvldp.common.channel.instantaneous import SymbolOutput
from kvldp.common.channel.output_model import DenseModel, OutputModel, PatternLayout, discrete_users
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import Field, ReportBatch
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.conditional import (
    ALL_STATES,
    CellSums,
    InvalidQuery,
    ProductSet,
    expected_joint_counts,
    joint_state_probabilities,
    joint_states,
)
from kvldp.common.mechanisms.base import IntArray
from kvldp.common.mechanisms.ioh import IOH, JointStateMechanism
from kvldp.common.mechanisms.registry import register
from kvldp.common.primitives import FloatArray, hadamard_entry, rr_keep
from kvldp.common.spec.params import InvalidParameter, Param

#: 2 bits per key must fit a signed 64-bit index
MAX_D = 31
#: joint states enumerated at once when computing expected statistics
_EXPECTED_CELLS = 1 << 22


@register
class IOHOUE(IOH):
    """IOH whose bits use optimised unary encoding (p = 1/2, q = 1/(e^eps + 1)): the same report,
    lower variance."""

    name = "ioh_oue"
    summary = "IOH with optimised unary encoding bits (p = 1/2, q = 1/(e^eps+1)): same report, lower variance"

    def ue_probabilities(self, epsilon: float) -> tuple[float, float]:
        return 0.5, 1.0 / (math.exp(epsilon) + 1.0)


def digit_weights(states: Sequence[int]) -> FloatArray:
    """w(b) = sum_{a in T} h(a, b) for b = 0..3, h(a, b) = (-1)^popcount(a AND b)."""
    b = np.arange(4)
    return np.asarray(
        sum(hadamard_entry(np.full(4, a), b).astype(np.float64) for a in states), dtype=np.float64
    )


def coefficient_set(d: int, order: int) -> IntArray:
    """T_L: the indices j in [0, 4^d) with at most ``order`` non-zero base-4 digits, ascending."""
    codes = [0]
    for count in range(1, order + 1):
        for keys in itertools.combinations(range(d), count):
            for digits in itertools.product((1, 2, 3), repeat=count):
                codes.append(sum(b << (2 * (d - 1 - k)) for k, b in zip(keys, digits, strict=True)))
    return np.asarray(sorted(codes), dtype=np.int64)


def state_codes(states: IntArray) -> IntArray:
    """(n, d) state codes -> 4-ary joint index x (2 bits per key, key 0 most significant)."""
    d = states.shape[1]
    shifts = 2 * (d - 1 - np.arange(d, dtype=np.int64))
    return np.asarray((states.astype(np.int64) << shifts[None, :]).sum(axis=1), dtype=np.int64)


@register
class IOHHRR(JointStateMechanism):
    """Low-order Hadamard responses over the joint state: a few bits per report, queries over at
    most ``order`` keys."""

    name = "ioh_hrr"
    summary = "low-order Hadamard joint-state reports: ~10 bits, O(1) fold, queries over <= order keys"
    estimator_names = ("unbiased",)
    max_keys = MAX_D
    params_spec = (
        Param(
            "order",
            int,
            2,
            "L: largest number of keys one query may touch (target + conditions)",
            check=lambda v: int(v) >= 1,
            check_doc="must be at least 1",
        ),
    )

    def _setup(self) -> None:
        # no query can touch more keys than exist: the order is at most d
        self.order = min(int(self.params["order"]), self.d)
        self.coefficients = coefficient_set(self.d, self.order)[1:]  # j = 0 is never sent
        self.k = int(self.coefficients.shape[0])
        self.p = rr_keep(self.epsilon)
        self.c = (math.exp(self.epsilon) + 1.0) / (math.exp(self.epsilon) - 1.0)

    # --------------------------------------------------------------- client
    def fields(self) -> tuple[Field, ...]:
        return (Field("j", "uint", 0, self.k), Field("b", "uint", 0, 2))

    def public_fields(self) -> tuple[str, ...]:
        """The coefficient is drawn independently of the joint state."""
        return ("j",)

    def randomized_output(self) -> SymbolOutput:
        return SymbolOutput(("b",), 2)

    def _contrast(self, epsilon: float) -> float:
        return 2.0 * rr_keep(epsilon) - 1.0

    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        x = state_codes(joint_states(users, rng))
        rank = np.asarray(public.integers(0, self.k, size=users.n_users), dtype=np.int64)
        sign = hadamard_entry(x, self.coefficients[rank]).astype(np.int64)
        kept = rng.random(users.n_users) < self.p
        reported = np.where(kept, sign, -sign)
        return {"j": rank, "b": (reported > 0).astype(np.int64)}

    # --------------------------------------------------------------- statistics
    def stats_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"counts": (self.k, 2)}

    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        codes = batch["j"].astype(np.int64) * 2 + batch["b"].astype(np.int64)
        arrays["counts"] += np.bincount(codes, minlength=2 * self.k).reshape(self.k, 2)

    def expected_stats(self, users: KVData) -> Stats:
        """E[counts(j, +1)] = n/(2K) + (2p - 1) Phi(j)/(2K) with Phi(j) = sum_x E[A(x)] H[x, j]."""
        if self.d > 12:
            raise InvalidParameter("expected statistics enumerate 3^d joint states; d <= 12")
        n = float(users.n_users)
        counts3 = expected_joint_counts(users)  # over base-3 indices
        states = np.array(list(itertools.product(ALL_STATES, repeat=self.d)), dtype=np.int64)
        x = state_codes(states)
        phi = np.zeros(self.k)
        step = max(1, _EXPECTED_CELLS // self.k)
        for start in range(0, x.shape[0], step):
            h = hadamard_entry(x[start : start + step, None], self.coefficients[None, :]).astype(np.float64)
            phi += counts3[start : start + step] @ h
        plus = n / (2 * self.k) + (2 * self.p - 1) * phi / (2 * self.k)
        counts = np.stack([n / self.k - plus, plus], axis=1)
        return Stats.expected(self, {"counts": counts, "n": np.array([n])})

    # --------------------------------------------------------------- estimation
    def _constrained(self, s: ProductSet) -> tuple[int, ...]:
        """Keys whose states the set restricts (free keys allow all three)."""
        if s.d != self.d:
            raise InvalidQuery(f"product set over {s.d} keys asked of {self!r}")
        keys = tuple(i for i, states in enumerate(s.allowed) if states != ALL_STATES)
        if len(keys) > self.order:
            raise InvalidQuery(
                f"the query touches {len(keys)} keys but ioh_hrr with order {self.order} answers queries "
                f"over at most {self.order} keys (raise params.order, at a cost in accuracy)"
            )
        return keys

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - product sets recur across queries and refits
    def _weights(
        self, s: ProductSet, keys: tuple[int, ...], support: tuple[int, ...]
    ) -> tuple[IntArray, FloatArray]:
        """Coefficients j with support in ``support`` (subset of ``keys``) and W(j) for set ``s``."""
        per_key = {k: digit_weights(s.allowed[k]) for k in keys}
        codes, weights = [], []
        for digits in itertools.product(range(4), repeat=len(support)):
            on = dict(zip(support, digits, strict=True))
            codes.append(sum(b << (2 * (self.d - 1 - k)) for k, b in on.items()))
            weights.append(math.prod(per_key[k][on.get(k, 0)] for k in keys))
        return np.asarray(codes, dtype=np.int64), np.asarray(weights, dtype=np.float64)

    def _phi(self, stats: Stats) -> FloatArray:
        counts = stats.arrays["counts"].astype(np.float64)
        return np.asarray(self.k * self.c * (counts[:, 1] - counts[:, 0]), dtype=np.float64)

    def _count(self, phi: FloatArray, n: float, s: ProductSet) -> float:
        keys = self._constrained(s)
        codes, weights = self._weights(s, keys, keys)
        coeff = np.where(codes == 0, n, phi[np.searchsorted(self.coefficients, np.maximum(codes, 1))])
        return float(coeff @ weights) / 4.0 ** len(keys)

    def _covariance(self, n: float, a: ProductSet, b: ProductSet, counts: dict[ProductSet, float]) -> float:
        qa, qb = self._constrained(a), self._constrained(b)
        common = tuple(k for k in qa if k in qb)
        codes, wa = self._weights(a, qa, common)
        _, wb = self._weights(b, qb, common)
        nonzero = codes != 0
        noise = n * self.k * self.c**2 * float(wa[nonzero] @ wb[nonzero]) / 4 ** (len(qa) + len(qb))
        ra = math.prod(len(a.allowed[k]) for k in qa) / 4 ** len(qa)
        rb = math.prod(len(b.allowed[k]) for k in qb) / 4 ** len(qb)
        both = a.intersection(b)
        a_b = 0.0 if both is None else counts.get(both, counts[a] * counts[b] / n if n > 0 else 0.0)
        return float(noise - (a_b - rb * counts[a] - ra * counts[b] + n * ra * rb))

    def cell_sums(
        self, stats: Stats, groups: Sequence[Sequence[ProductSet]], estimator: str
    ) -> list[CellSums]:
        self.check_stats(stats, estimator)
        n = float(stats.arrays["n"][0])
        phi = self._phi(stats)
        out = []
        for group in groups:
            sets = list(group)
            counts = {s: self._count(phi, n, s) for s in sets}
            for x, y in itertools.combinations(sets, 2):
                both = x.intersection(y)
                if both is not None and both not in counts:
                    # a set touching more than L keys: _covariance falls back to independence
                    with contextlib.suppress(InvalidQuery):
                        counts[both] = self._count(phi, n, both)
            plug = {s: min(max(v, 0.0), n) for s, v in counts.items()}  # plug-in counts in [0, n]
            cov = np.array([[self._covariance(n, x, y, plug) for y in sets] for x in sets])
            out.append(CellSums(np.array([counts[s] for s in sets]), cov))
        return out

    # --------------------------------------------------------------- privacy
    def exhaustive_feasible(self) -> bool:
        return self.d <= 4

    def audit_model(self, exhaustive: bool) -> OutputModel:
        """Pr[(rank, b) | x] = (1/K)(p if b matches H[x, j] else 1 - p). Reduced: the users with
        joint states 0 and 'last key absent' — any two joint states are told apart by some
        single-digit coefficient, at ratio exactly e^eps, and never by more."""
        if exhaustive:
            users, labels = discrete_users(self.d)
            probs_state = joint_state_probabilities(users)  # (users, 3^d) one-hot for discrete users
            states = np.array(list(itertools.product(ALL_STATES, repeat=self.d)), dtype=np.int64)
            x = state_codes(states)[np.argmax(probs_state, axis=1)]
        else:
            x = np.array([0, 1], dtype=np.int64)  # all <1,-1>; the same with the last key absent
            neg = [f"{k}:-1" for k in range(self.d)]
            labels = ("{" + ", ".join(neg) + "}", "{" + ", ".join(neg[:-1]) + "}")
        sign = hadamard_entry(x[:, None], self.coefficients[None, :])
        plus = np.where(sign > 0, self.p, 1.0 - self.p) / self.k
        probs = np.stack([1.0 / self.k - plus, plus], axis=2).reshape(x.shape[0], -1)
        return DenseModel(np.asarray(probs, dtype=np.float64), tuple(labels), PatternLayout(self.k, 1, 2))
