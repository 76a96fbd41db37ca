"""Randomisation primitives shared by the mechanisms (docs/mechanisms.md, *Primitives*).

Each function is vectorised over users: the simulators perturb millions of reports
per call and the single-device path is the same code on arrays of length one, so the
device and the simulator can never disagree about a distribution.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def rr_keep(epsilon: float) -> float:
    """Probability that binary randomized response at budget ``epsilon`` keeps the bit."""
    if epsilon == 0.0:
        return 0.5
    return 1.0 / (1.0 + math.exp(-epsilon))


def grr_probs(epsilon: float, m: int) -> tuple[float, float]:
    """(p, q) of generalized randomized response over ``m`` symbols (docs/mechanisms.md, *Primitives*)."""
    denom = math.exp(epsilon) + m - 1
    return math.exp(epsilon) / denom, 1.0 / denom


def disc(values: FloatArray, rng: np.random.Generator) -> NDArray[np.int8]:
    """Disc(v): +1 with probability (1+v)/2, else -1, so that E[Disc(v)] = v.

    Disc(1) = +1 and Disc(-1) = -1 deterministically because the uniform draw lies
    in [0, 1).
    """
    up = rng.random(values.shape[0]) < (1.0 + values) / 2.0
    return np.where(up, 1, -1).astype(np.int8)


def flip(signs: NDArray[np.int8], keep: float, rng: np.random.Generator) -> NDArray[np.int8]:
    """Randomized response on +-1 values: keep with probability ``keep``, else negate."""
    kept = rng.random(signs.shape[0]) < keep
    return np.where(kept, signs, -signs).astype(np.int8)


def popcount(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """Bit count of unsigned 64-bit integers (SWAR, vectorised)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


def hadamard_entry(rows: NDArray[np.integer], cols: NDArray[np.integer]) -> NDArray[np.int8]:
    """Sylvester Hadamard entries H[i, j] = (-1)^popcount(i AND j), broadcasting."""
    anded = np.bitwise_and(np.asarray(rows, dtype=np.uint64), np.asarray(cols, dtype=np.uint64))
    parity = popcount(anded) & np.uint64(1)
    return (1 - 2 * parity.astype(np.int8)).astype(np.int8)


def fwht(values: FloatArray) -> FloatArray:
    """Unnormalised fast Walsh-Hadamard transform: returns H @ values, O(L log L).

    The last axis must have a power-of-two length; leading axes are batched.
    """
    x = np.array(values, dtype=np.float64, copy=True)
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")
    lead = x.shape[:-1]
    h = 1
    while h < n:
        x = x.reshape((*lead, n // (2 * h), 2, h))
        a = x[..., 0, :] + x[..., 1, :]
        b = x[..., 0, :] - x[..., 1, :]
        x = np.stack((a, b), axis=-2)
        h *= 2
    return x.reshape((*lead, n))


_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(seeds: NDArray[np.uint64], items: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """A 64-bit hash of (seed, item): splitmix64's finaliser over seed XOR golden*(item+1).

    Used as OLH's hash family (seed chosen by the device). Deterministic, documented in
    the wire format, and computed with wrapping uint64 arithmetic so devices and the
    aggregator agree bit for bit.
    """
    with np.errstate(over="ignore"):
        z = np.bitwise_xor(seeds, (items + np.uint64(1)) * _GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        out: NDArray[np.uint64] = z ^ (z >> np.uint64(31))
        return out


def ceil_log2(x: int) -> int:
    """Smallest r with 2**r >= x (x >= 1)."""
    return max(0, (x - 1).bit_length())


#: bits unpacked per block when summing bitset columns (bounds temporary memory)
_BIT_BLOCK = 1 << 24


def pack_bits(bits: NDArray[np.bool_]) -> NDArray[np.uint8]:
    """(n, L) booleans -> (n, ceil(L/8)) bytes, bit i in byte i>>3 at position i&7 (docs/wire-format.md).

    The rows are padded to whole bytes and packed as one flat run of bits: on narrow rows
    several times faster than packing row by row, and never much slower."""
    n, width = bits.shape
    nbytes = (width + 7) // 8
    padded = np.zeros((n, 8 * nbytes), dtype=bool)
    padded[:, :width] = bits
    return np.packbits(padded.reshape(-1), bitorder="little").reshape(n, nbytes)


#: bits drawn per block by :func:`bernoulli_bits` (bounds its temporary memory to ~10 MiB)
_DRAW_BLOCK_BITS = 1 << 22


def bernoulli_bits(n: int, nbits: int, prob: float, rng: np.random.Generator) -> NDArray[np.uint8]:
    """Packed (n, ceil(nbits / 8)) bits (:func:`pack_bits`'s order, padding bits 0), each 1
    with probability ``prob``, all independently.

    A bit costs one random byte instead of a float64 uniform (about 6x faster over the
    3^d bits of IOH): it is 1 when its byte is below t = min(floor(256 prob), 255), and
    where the byte equals t (1 in 256) with probability r = 256 prob - t, drawn as a
    uniform. So Pr[1] = t / 256 + r / 256 = prob exactly, and bits stay independent.
    """
    out = np.empty((n, (nbits + 7) // 8), dtype=np.uint8)
    threshold = min(math.floor(256.0 * prob), 255)
    rest = 256.0 * prob - threshold
    block = max(1, _DRAW_BLOCK_BITS // max(nbits, 1))
    for start in range(0, n, block):
        rows = min(block, n - start)
        words = rng.integers(0, 2**64, size=-(-rows * nbits // 8), dtype=np.uint64)
        draws = words.view(np.uint8)[: rows * nbits].reshape(rows, nbits)
        bits = draws < threshold
        ties = np.flatnonzero(draws == threshold)
        bits.flat[ties] = rng.random(ties.size) < rest
        out[start : start + rows] = pack_bits(bits)
    return out


def one_hot_bits(
    index: IntArray, nbits: int, p: float, q: float, rng: np.random.Generator
) -> NDArray[np.uint8]:
    """Unary encoding's client: packed (n, ceil(nbits / 8)) bits (:func:`pack_bits`'s order)
    where bit ``index[i]`` of row i is 1 with probability ``p`` and every other bit with
    probability ``q``, all independently: every bit drawn at ``q`` by
    :func:`bernoulli_bits`, then the true bits redrawn, one uniform each."""
    n = index.shape[0]
    if n and (int(index.min()) < 0 or int(index.max()) >= nbits):
        raise ValueError(f"one_hot_bits: a true bit's index lies outside 0..{nbits - 1}")
    out = bernoulli_bits(n, nbits, q, rng)
    flat = out.reshape(-1)
    at = np.arange(n) * out.shape[1] + (index >> 3)
    mask = np.left_shift(1, index & 7).astype(np.uint8)
    flat[at] = np.where(rng.random(n) < p, flat[at] | mask, flat[at] & ~mask)
    return out


#: the bits of every byte value, little bit order: (256, 8)
_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(
    np.int64
)
#: from this many rows on, per-byte histograms beat unpacking every bit ...
_HISTOGRAM_ROWS = 1024
#: ... of rows narrower than this many bytes
_HISTOGRAM_BYTES = 32
#: unpacked rows added up in uint8 before a count could overflow
_UINT8_ROWS = 255
#: bits unpacked per block (a block stays in cache)
_UNPACK_BITS = 1 << 21


def bit_column_sums(packed: NDArray[np.uint8], nbits: int) -> NDArray[np.int64]:
    """Per-bit counts over the rows of a packed bitset matrix (vectorised).

    Many narrow rows: a 256-bin histogram of each byte column times the bits of each byte
    value — one pass over the bytes instead of unpacking 8 bits each and summing them
    (about 5x faster at 1e5 rows of 100 bits). Wide rows (IOH's 3^d bits) or few rows:
    unpack, and add the rows 255 at a time in uint8 before widening to int64 (about 3x
    faster than int64 sums, and than a histogram per byte column of wide rows). Rows
    are taken in blocks that bound the temporary memory.
    """
    total = np.zeros(nbits, dtype=np.int64)
    nbytes = max(packed.shape[1], 1)
    if packed.shape[0] >= _HISTOGRAM_ROWS and nbytes < _HISTOGRAM_BYTES:
        step = _BIT_BLOCK // (8 * nbytes)  # a block is at most 2 MiB of bytes
        for start in range(0, packed.shape[0], step):
            block = np.ascontiguousarray(packed[start : start + step].T)
            counts = np.stack([np.bincount(column, minlength=256) for column in block])
            total += (counts @ _BYTE_BITS).reshape(-1)[:nbits]
        return total
    step = max(1, _UNPACK_BITS // max(nbits, 1) // _UINT8_ROWS) * _UINT8_ROWS
    for start in range(0, packed.shape[0], step):
        bits = np.unpackbits(packed[start : start + step], axis=1, count=nbits, bitorder="little")
        groups = bits.shape[0] // _UINT8_ROWS
        grouped = bits[: groups * _UINT8_ROWS].reshape(groups, _UINT8_ROWS, nbits)
        total += grouped.sum(axis=1, dtype=np.uint8).sum(axis=0, dtype=np.int64)
        total += bits[groups * _UINT8_ROWS :].sum(axis=0, dtype=np.int64)
    return total
