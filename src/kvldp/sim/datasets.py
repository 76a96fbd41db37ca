"""Synthetic populations of the papers' experiments, as :class:`KVData` (docs/mechanisms.md,
*Synthetic populations*).

Each generator is deterministic given its seed and returns users whose values already
lie in [-1, 1]. The same generators drive ``kvldp evaluate`` and the simulated devices.

* ``gaussian``, ``linear``, ``powerlaw`` — Horigome et al. 2023: key k is held
  independently with probability f_k, with value m_k; f and m reconstructed from the
  paper's Table 2 (the power law is kvldp's moment-matched surrogate). For d != 50 the
  Gaussian bump keeps its shape (centre d/2, sigma d/5).
* ``uniform``, ``gaussian_pckv`` — PCKV's UU and GG (Gu et al. 2020): one pair per user.
* ``zipf`` — Zhao et al. 2022's Zipf data: one item per user from numpy's Zipf(a = 1.12)
  truncated to the d keys; values are per-key constants as in UU.
* ``sun_uniform``, ``sun_gaussian`` — Sun et al. 2019's synthetic data (kvldp's
  generator; the paper gives none): per key f_k ~ U(0, 1), m_k ~ U(-1, 1) (or truncated N(0.5, 0.2^2) and
  N(0, 0.5^2)); a user holds key k with probability f_k, v = clip(N(m_k, 0.2^2)).
* ``csv:PATH`` — a ratings file (:mod:`kvldp.sim.ratings`): the d most-rated items are
  the keys, ratings scaled into [-1, 1] from the file's rating range, every user kept.
* ``conditional`` — correlated keys for conditional analysis (the paper leaves the
  generator open): a user-level factor z ~ N(0, 1) drives both presence (key k is held
  when 0.5 z + sqrt(0.75) e_k falls below the 50% quantile, so every pair of keys is
  positively correlated) and values (v = clip(-0.5 + 0.3 z + 0.2 e', -1, 1)), so
  conditional frequencies and means really differ from the unconditional ones. Each
  key is held by half the users, so conditioning on presence or absence keeps about
  half the population (Sun et al. 2019's f = 0.8 would leave a fifth on the absent side).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.primitives import FloatArray
from kvldp.sim.ratings import read_ratings

POWERLAW_A = 0.5063029806
POWERLAW_B = 1.5795733620
ZIPF_A = 1.12


@dataclass(frozen=True)
class Dataset:
    """A generated population and the parameters it came from."""

    name: str
    users: KVData
    seed: int


def _independent_keys(n: int, f: FloatArray, m: FloatArray, rng: np.random.Generator) -> KVData:
    """Users hold key k independently with probability f_k, all with value m_k (Horigome et al. 2023)."""
    present = rng.random((n, f.shape[0])) < f[None, :]
    values = np.broadcast_to(m[None, :], present.shape)
    return KVData.from_dense(present, np.asarray(values, dtype=np.float64))


def horigome_profile(name: str, d: int) -> tuple[FloatArray, FloatArray]:
    """Per-key (f_k, m_k) of Horigome et al. 2023's Gaussian, linear and power-law models."""
    k = np.arange(1, d + 1, dtype=np.float64)
    if name == "gaussian":
        centre, sigma = d / 2.0, d / 5.0
        f = np.exp(-((k - centre) ** 2) / (2 * sigma**2))
        return f, 2 * f - 1
    if name == "linear":
        f = k / d
        m = -1 + 2 * (k - 1) / (d - 1) if d > 1 else np.zeros(1)
        return f, m
    if name == "powerlaw":
        f = (1 + 0.1 * POWERLAW_A * (k - 1) ** POWERLAW_B) ** -1.1
        return f, 2 * f - 1
    raise ValueError(f"unknown Horigome profile {name!r}")


def _per_key_means(d: int, rng: np.random.Generator) -> FloatArray:
    return rng.uniform(-1.0, 1.0, size=d)


def uniform_pairs(n: int, d: int, rng: np.random.Generator) -> KVData:
    """PCKV UU: key uniform over the d keys, mu_k ~ U[-1, 1], every holder has v = mu_k."""
    mu = _per_key_means(d, rng)
    keys = rng.integers(0, d, size=n, dtype=np.int64)
    return KVData.from_single_key(d, keys, mu[keys])


def gaussian_pairs(n: int, d: int, rng: np.random.Generator) -> KVData:
    """PCKV GG: key = ceil(|sigma z|) (sigma = d/2, i.e. 50 for d = 100), keys > d discarded,
    the list 1..d prepended once so every key occurs, first n kept; mu_k ~ N(0, 1)
    rejection-sampled into [-1, 1] (as the PCKV authors' reference code generates it)."""
    sigma = d / 2.0
    keys = np.arange(1, d + 1, dtype=np.int64)
    parts = [keys]
    have = d
    while have < n:
        draw = np.ceil(np.abs(sigma * rng.standard_normal(2 * (n - have) + 16))).astype(np.int64)
        draw = draw[(draw >= 1) & (draw <= d)]
        parts.append(draw)
        have += draw.shape[0]
    sample = np.concatenate(parts)[:n] - 1
    mu = np.empty(0)
    while mu.shape[0] < d:
        z = rng.standard_normal(4 * d)
        mu = np.concatenate([mu, z[np.abs(z) <= 1.0]])
    mu = mu[:d]
    return KVData.from_single_key(d, sample, mu[sample])


def zipf_items(n: int, d: int, rng: np.random.Generator) -> KVData:
    """Zhao et al. 2022's Zipf data: numpy Zipf(a = 1.12) draws <= d (one item per user), values mu_k."""
    mu = _per_key_means(d, rng)
    parts: list[np.ndarray] = []
    have = 0
    while have < n:
        draw = rng.zipf(ZIPF_A, size=2 * (n - have) + 16)
        draw = draw[draw <= d]
        parts.append(draw)
        have += draw.shape[0]
    keys = np.concatenate(parts)[:n].astype(np.int64) - 1
    return KVData.from_single_key(d, keys, mu[keys])


def _truncated_normal(
    mu: float, sigma: float, lo: float, hi: float, size: int, rng: np.random.Generator
) -> FloatArray:
    out = np.empty(0)
    while out.shape[0] < size:
        z = rng.normal(mu, sigma, 4 * size + 16)
        out = np.concatenate([out, z[(z >= lo) & (z <= hi)]])
    return out[:size]


def sun_synthetic(n: int, d: int, rng: np.random.Generator, gaussian: bool) -> KVData:
    """Sun et al. 2019's "uniform" / "Gaussian" data (see the module docstring)."""
    if gaussian:
        f = _truncated_normal(0.5, 0.2, 0.0, 1.0, d, rng)
        m = _truncated_normal(0.0, 0.5, -1.0, 1.0, d, rng)
    else:
        f = rng.uniform(0.0, 1.0, d)
        m = rng.uniform(-1.0, 1.0, d)
    present = rng.random((n, d)) < f[None, :]
    values = np.clip(rng.normal(m[None, :], 0.2, (n, d)), -1.0, 1.0)
    return KVData.from_dense(present, values)


def correlated_keys(n: int, d: int, rng: np.random.Generator, rho: float = 0.5) -> KVData:
    """The ``conditional`` dataset (see the module docstring)."""
    z = rng.standard_normal(n)
    latent = rho * z[:, None] + math.sqrt(1 - rho * rho) * rng.standard_normal((n, d))
    present = latent < NormalDist().inv_cdf(0.5)
    values = np.clip(-0.5 + 0.3 * z[:, None] + 0.2 * rng.standard_normal((n, d)), -1.0, 1.0)
    return KVData.from_dense(present, values)


GENERATORS: dict[str, Callable[[int, int, np.random.Generator], KVData]] = {
    "gaussian": lambda n, d, rng: _independent_keys(n, *horigome_profile("gaussian", d), rng),
    "linear": lambda n, d, rng: _independent_keys(n, *horigome_profile("linear", d), rng),
    "powerlaw": lambda n, d, rng: _independent_keys(n, *horigome_profile("powerlaw", d), rng),
    "uniform": uniform_pairs,
    "gaussian_pckv": gaussian_pairs,
    "zipf": zipf_items,
    "conditional": correlated_keys,
    "sun_uniform": lambda n, d, rng: sun_synthetic(n, d, rng, gaussian=False),
    "sun_gaussian": lambda n, d, rng: sun_synthetic(n, d, rng, gaussian=True),
}
CSV_PREFIX = "csv:"


def names() -> list[str]:
    return sorted(GENERATORS)


def describe() -> str:
    """The dataset names for help texts, the ratings-file form included."""
    return f"{', '.join(names())}, or {CSV_PREFIX}PATH (a user,item,rating file)"


def generate(name: str, n: int | None, d: int | None, seed: int = 0) -> Dataset:
    """Build the population ``name`` with ``n`` users over ``d`` keys.

    ``csv:PATH`` reads a ratings file instead: its users (``n`` must be None) over its
    ``d`` most-rated items (None: every item it rates).
    """
    if name.startswith(CSV_PREFIX):
        if n is not None:
            raise ValueError(f"{name} brings its own users; drop the user count")
        ratings = read_ratings(Path(name[len(CSV_PREFIX) :]))
        items = len(ratings.item_ids)
        if d is not None and d > items:
            raise ValueError(
                f"{name} rates {items} items, fewer than the {d} keys asked for "
                f"(ask for {items} or fewer, or leave the key count out to take them all)"
            )
        return Dataset(name=name, users=ratings.to_population(ratings.top_items(d or items)), seed=seed)
    if d is None:
        raise ValueError(f"dataset {name} needs a key count")
    if name not in GENERATORS:
        raise ValueError(f"unknown dataset {name!r} (known: {describe()})")
    if n is None:
        raise ValueError(f"dataset {name} needs a user count")
    if n < 1 or d < 1:
        raise ValueError("a dataset needs at least one user and one key")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6B76]))
    return Dataset(name=name, users=GENERATORS[name](n, d, rng), seed=seed)
