"""Memoized reports: a device's report as a keyed function of its secret and its state.

RAPPOR's permanent randomized response and Ding et al.'s memoization with alpha-point
rounding, for key-value data. A device holds a permanent random ``secret`` (never sent).

* **State.** What the mechanism actually randomizes over, per mechanism family. Every
  key-value mechanism sees a value only through Disc(v) (+1 with probability (1+v)/2),
  so the state of a device is its key set and one sign per key; a frequency oracle
  (``collects_values = False``) ignores values, so its state is the key set alone.
* **Alpha-point rounding.** The sign of key k is +1 iff ``alpha_k < (1 + v_k) / 2``,
  with ``alpha`` drawn once per device and key from the secret. Over devices alpha is
  uniform, so Pr[+1] = (1+v)/2 exactly as with a fresh Disc: estimates stay unbiased. A
  device's value may drift without changing its state until it crosses alpha_k.
* **Keyed randomness.** The report of a state is the mechanism's own client run on the
  rounded pairs with a generator keyed by ``HMAC-SHA256(secret, tag || digest || state)``
  — never by the device id, which the server may know (RAPPOR's reference client seeds
  with ``user_id + word``). Given the state, the randomness is independent of everything
  the server sees, so the report has exactly the mechanism's distribution: the same
  per-report audit holds.

* **Public randomness.** Some report fields do not depend on the input (the key a
  key-sampled mechanism reports on, OLH's hash seed: ``Mechanism.public_fields``). Keyed
  by the state, they change with it, which is harmless while identical payloads already
  show the server every change. With instantaneous randomization
  (``[privacy] instantaneous_epsilon``) every send is randomized again and a change must
  not show otherwise: the public fields are then drawn from a generator keyed by the
  secret alone, permanent for the device (RAPPOR's cohorts are permanent alike).

Devices store the payload they derived (``kvldp.producer.device_state``), so an unchanged
state is re-sent byte for byte even if numpy's generator streams change between
versions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct

import numpy as np

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import Report, row
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.primitives import FloatArray, IntArray

SECRET_BYTES = 32
_ALPHA_TAG = b"kvldp/alpha/v1"
_REPORT_TAG = b"kvldp/memo/v1"
_PUBLIC_TAG = b"kvldp/public/v1"


def new_secret() -> bytes:
    """A device secret from the OS entropy pool."""
    return secrets.token_bytes(SECRET_BYTES)


def _keyed_generator(secret: bytes, tag: bytes, digest: int, message: bytes) -> np.random.Generator:
    mac = hmac.new(secret, tag + struct.pack(">I", digest) + message, hashlib.sha256).digest()
    return np.random.Generator(np.random.Philox(key=int.from_bytes(mac[:16], "little")))


def alphas(secret: bytes, digest: int, d: int) -> FloatArray:
    """The device's permanent rounding offsets, one uniform [0, 1) per key."""
    return _keyed_generator(secret, _ALPHA_TAG, digest, b"").random(d)


def round_values(keys: IntArray, values: FloatArray, alpha: FloatArray) -> FloatArray:
    """Alpha-point rounding: +1.0 where ``alpha[k] < (1 + v) / 2``, else -1.0."""
    return np.where(alpha[keys] < (1.0 + values) / 2.0, 1.0, -1.0)


def state_of(mechanism: Mechanism, keys: IntArray, values: FloatArray, alpha: FloatArray) -> State:
    """A device's memoization state from its normalised pairs (keys sorted, values in [-1, 1])."""
    order = np.argsort(keys, kind="stable")
    keys = np.asarray(keys, dtype=np.int64)[order]
    if mechanism.collects_values:
        signs = round_values(keys, np.asarray(values, dtype=np.float64)[order], alpha)
    else:
        signs = np.ones(keys.shape[0], dtype=np.float64)
    return State(keys, signs)


class State:
    """Sorted key indices and their rounded signs; ``encoded`` is its canonical bytes."""

    __slots__ = ("encoded", "keys", "signs")

    def __init__(self, keys: IntArray, signs: FloatArray) -> None:
        self.keys = keys
        self.signs = signs
        packed = (keys.astype("<u8") << np.uint64(1)) | (signs > 0).astype("<u8")
        self.encoded = packed.astype("<u8").tobytes()

    def users(self, d: int) -> KVData:
        """The state as one user of normalised data (values +-1)."""
        return KVData(d, np.array([0, self.keys.shape[0]], dtype=np.int64), self.keys, self.signs)

    @property
    def fingerprint(self) -> str:
        """A short hex name of the state (for the device's memo table)."""
        return hashlib.sha256(self.encoded).hexdigest()[:32]


def memoized_report(
    mechanism: Mechanism, secret: bytes, digest: int, state: State, permanent_public: bool = False
) -> Report:
    """The report of ``state``: the mechanism's client with randomness keyed by the secret
    and the state. With ``permanent_public`` (a collection with instantaneous
    randomization) the mechanism's public fields come from a generator keyed by the secret
    alone, so they are the same for every state of the device."""
    rng = _keyed_generator(secret, _REPORT_TAG, digest, state.encoded)
    public = _keyed_generator(secret, _PUBLIC_TAG, digest, b"") if permanent_public else None
    batch = mechanism.perturb_many(state.users(mechanism.d), rng, public)
    return row(batch, mechanism.fields(), 0)
