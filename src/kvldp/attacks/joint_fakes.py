"""Fakes against the joint-state mechanisms: IOH, IOH with OUE bits, low-order Hadamard.

IOH (and ``ioh_oue``) reports one bit per joint state of all d keys; the calibrated cell
A_c = (C_c - n q) / (p - q) counts the users in state c, and key t's frequency (mean
numerator) sums the cells where t is held (+1 minus -1). A fake with set bits S moves
t's frequency numerator by sum over t's held cells of (1[c in S] - q) / (p - q): every cell
left unset costs q / (p - q), because the fake also raises n. The maximal-gain report
therefore sets the bit of every cell in which at least one target is <1, +1> (<1, -1>
for m* < 0): all of each target's favoured cells count for its frequency and its mean,
and no cell is set that helps no target. (Setting only the cells where *every* target
is favoured, 3^(d - r) bits, lowers the targets' frequencies: the baseline n q wins.)
RMA: every bit a fair coin.
Adaptive: the number of set bits K is that of the genuine client's report of a device
holding <t, m*> for every target (the genuine draw itself), placed first on uniformly
chosen favourable cells and the rest on uniform other cells: the one statistic the
probability of a one-hot unary report depends on keeps its genuine law.

``ioh_hrr`` reports (j, b): a coefficient j of the 4^d Hadamard transform and b the
randomized sign of H[x, j]. A key's estimate uses only the coefficients whose support is
that key (base-4 digit 1: frequency; digits 2 and 3: mean), each weighted by the sign
H[x*, j] of the state x* holding <t, +1> (<t, -1>), so the maximal-gain report picks j
uniformly among the coefficients supported on one target and sends b = H[x*, j] with no
randomization. RMA: j uniform, b a fair coin. Adaptive: the same coefficients, b by the
genuine randomized response of a device in state x* (the +/- split of every
coefficient stays one a genuine population could produce).
"""

from __future__ import annotations

import numpy as np

from kvldp.attacks.target import FakeGenerator, Target
from kvldp.common.data.kvdata import KVData
from kvldp.common.estimation.conditional.cells import ABSENT, NEG, POS
from kvldp.common.mechanisms import Mechanism
from kvldp.common.mechanisms.ioh import IOH
from kvldp.common.mechanisms.ioh_hrr import IOHHRR, state_codes
from kvldp.common.primitives import FloatArray, IntArray, hadamard_entry, pack_bits

#: bits handled at once when placing the adaptive attack's bits (bounds memory)
BLOCK_CELLS = 1 << 22


def _ioh(mech: Mechanism) -> IOH:
    assert isinstance(mech, IOH)
    return mech


def favourable_cells(d: int, target: Target) -> np.ndarray:
    """Mask over the 3^d cells: some target key in the favoured state (key 0 the most
    significant base-3 digit)."""
    cells = np.arange(3**d, dtype=np.int64)
    state = POS if target.sign > 0 else NEG
    ok = np.zeros(cells.shape[0], dtype=bool)
    for k in target.keys:
        ok |= (cells // 3 ** (d - 1 - int(k))) % 3 == state
    return ok


def unary_m2ga(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> dict[str, np.ndarray]:
    row = pack_bits(favourable_cells(mech.d, target)[None, :])
    return {"a": np.repeat(row, n, axis=0)}


def unary_rma(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> dict[str, np.ndarray]:
    cells = _ioh(mech).n_cells
    out = np.empty((n, (cells + 7) // 8), dtype=np.uint8)
    block = max(1, BLOCK_CELLS // cells)
    for start in range(0, n, block):
        stop = min(n, start + block)
        out[start:stop] = pack_bits(rng.random((stop - start, cells)) < 0.5)
    return {"a": out}


def unary_adaptive(
    mech: Mechanism, n: int, target: Target, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    m = _ioh(mech)
    cells = m.n_cells
    holders = KVData.from_pairs(m.d, [{int(k): target.mean for k in target.keys}] * n)
    genuine = m.perturb_many(holders, rng)["a"]
    good = np.flatnonzero(favourable_cells(m.d, target))
    bad = np.flatnonzero(~favourable_cells(m.d, target))
    out = np.empty_like(genuine)
    block = max(1, BLOCK_CELLS // cells)
    for start in range(0, n, block):
        stop = min(n, start + block)
        rows = stop - start
        k = np.unpackbits(genuine[start:stop], axis=1, count=cells, bitorder="little").sum(axis=1)
        on_good = np.minimum(k, good.size)
        # a uniform random subset of each size: the cells of smallest random priority
        g_rank = np.argsort(np.argsort(rng.random((rows, good.size)), axis=1), axis=1)
        b_rank = np.argsort(np.argsort(rng.random((rows, bad.size)), axis=1), axis=1)
        bits = np.zeros((rows, cells), dtype=bool)
        bits[:, good] = g_rank < on_good[:, None]
        bits[:, bad] = b_rank < (k - on_good)[:, None]
        out[start:stop] = pack_bits(bits)
    return {"a": out}


UNARY_GENERATORS: dict[str, FakeGenerator] = {
    "m2ga": unary_m2ga,
    "rma": unary_rma,
    "adaptive": unary_adaptive,
}


# ---------------------------------------------------------------------- ioh_hrr
def _hrr(mech: Mechanism) -> IOHHRR:
    assert isinstance(mech, IOHHRR)
    return mech


def target_coefficients(m: IOHHRR, target: Target) -> IntArray:
    """Ranks of the coefficients whose base-4 support is exactly one target key."""
    shifts = 2 * (m.d - 1 - np.arange(m.d, dtype=np.int64))
    digits = (m.coefficients[:, None] >> shifts[None, :]) & 3  # (K, d)
    support = digits != 0
    on_target = support[:, target.keys].sum(axis=1)
    return np.flatnonzero((support.sum(axis=1) == 1) & (on_target == 1)).astype(np.int64)


def favoured_state(m: IOHHRR, target: Target) -> IntArray:
    """The 4-ary joint index x*: every target in the favoured state, other keys absent."""
    states = np.full((1, m.d), ABSENT, dtype=np.int64)
    states[0, target.keys] = POS if target.sign > 0 else NEG
    return state_codes(states)


def _signs(m: IOHHRR, target: Target, rank: IntArray) -> FloatArray:
    return hadamard_entry(favoured_state(m, target), m.coefficients[rank]).astype(np.int64)


def hrr_m2ga(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> dict[str, np.ndarray]:
    m = _hrr(mech)
    ranks = target_coefficients(m, target)
    rank = ranks[rng.integers(0, ranks.size, size=n)]
    return {"j": rank, "b": (_signs(m, target, rank) > 0).astype(np.int64)}


def hrr_rma(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> dict[str, np.ndarray]:
    m = _hrr(mech)
    return {
        "j": rng.integers(0, m.k, size=n, dtype=np.int64),
        "b": rng.integers(0, 2, size=n, dtype=np.int64),
    }


def hrr_adaptive(mech: Mechanism, n: int, target: Target, rng: np.random.Generator) -> dict[str, np.ndarray]:
    m = _hrr(mech)
    ranks = target_coefficients(m, target)
    rank = ranks[rng.integers(0, ranks.size, size=n)]
    sign = _signs(m, target, rank)
    kept = rng.random(n) < m.p
    return {"j": rank, "b": (np.where(kept, sign, -sign) > 0).astype(np.int64)}


HADAMARD_GENERATORS: dict[str, FakeGenerator] = {"m2ga": hrr_m2ga, "rma": hrr_rma, "adaptive": hrr_adaptive}
