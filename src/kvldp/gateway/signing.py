"""Signing keys and tokens for devices, for development and tests (``kvldp devices``).

:func:`generate` writes a new private key (PEM, PKCS#8, unencrypted, mode 0600) and the
matching public key set ``jwks.json`` (one key, with its ``kid``, ``alg`` and ``use``),
which the gateway's ``--jwks`` reads. :func:`sign_token` signs one token for one device with
such a key: ``sub`` the device, ``aud`` the gateway's audience, ``iat`` and ``nbf`` (the
time of signing), ``exp`` (that time + ttl), a random ``jti``, and the key's ``kid`` in
the header. An operator's
own identity provider takes this role in production; the tokens are the same standard
JWTs. Keys come from the ``cryptography`` package, tokens from PyJWT.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from kvldp.common.errors import KvldpError
from kvldp.common.files.atomic_file import create_once, write_atomically
from kvldp.gateway.tokens import valid_device_id

PRIVATE_KEY = "private.pem"
JWKS = "jwks.json"
#: the algorithms ``kvldp devices keygen`` makes keys for
KEY_ALGORITHMS = ("EdDSA", "ES256", "RS256")
RSA_BITS = 3072

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _new_key(algorithm: str) -> PrivateKey:
    if algorithm == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    if algorithm == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
    raise KvldpError(f"key algorithm {algorithm!r}: choose one of {', '.join(KEY_ALGORITHMS)}")


def _algorithm_of(key: object) -> str:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "EdDSA"
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return "ES256"
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    raise KvldpError(f"the key is a {type(key).__name__}: use an Ed25519, P-256 or RSA key")


def public_jwk(key: PrivateKey, kid: str) -> dict[str, Any]:
    """The public half of ``key`` as a JSON Web Key with its ``kid``, ``alg`` and ``use``."""
    algorithm = _algorithm_of(key)
    jwk: dict[str, Any] = json.loads(jwt.get_algorithm_by_name(algorithm).to_jwk(key.public_key()))
    jwk.update(kid=kid, alg=algorithm, use="sig")
    return jwk


def generate(out: str | Path, algorithm: str = "EdDSA") -> tuple[Path, Path]:
    """A new key in ``out``: ``private.pem`` (mode 0600) and ``jwks.json``; refuses to
    overwrite an existing private key. Each file is written whole or not at all, and a key
    whose ``jwks.json`` could not be written is removed again. Returns both paths."""
    directory = Path(out)
    key = _new_key(algorithm)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KvldpError(f"cannot create {str(directory)!r}: {exc.strerror or exc}") from None
    private, public = directory / PRIVATE_KEY, directory / JWKS
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    kid = secrets.token_hex(8)
    jwks = json.dumps({"keys": [public_jwk(key, kid)]}, indent=2) + "\n"
    try:
        created = create_once(private, pem, mode=0o600)
    except OSError as exc:
        raise KvldpError(f"cannot write {str(private)!r}: {exc.strerror or exc}") from None
    if not created:
        raise KvldpError(f"{str(private)!r} exists: choose another --out or remove it first")
    try:
        write_atomically(public, jwks.encode("utf-8"), mode=0o644)
    except OSError as exc:
        private.unlink()
        raise KvldpError(f"cannot write {str(public)!r}: {exc.strerror or exc}") from None
    return private, public


def load_private_key(path: str | Path) -> tuple[PrivateKey, str]:
    """A private key written by :func:`generate` and its ``kid`` (from the ``jwks.json``
    beside it); one line naming the problem otherwise."""
    where = Path(path)
    try:
        data = where.read_bytes()
    except OSError as exc:
        raise KvldpError(f"cannot read key {str(where)!r}: {exc.strerror or exc}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KvldpError(f"{str(where)!r} is not an unencrypted PEM private key") from None
    algorithm = _algorithm_of(key)
    assert isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
    return key, _kid_beside(where, key, algorithm)


def _kid_beside(path: Path, key: PrivateKey, algorithm: str) -> str:
    """The ``kid`` of ``key``'s entry in the ``jwks.json`` next to it."""
    jwks = path.with_name(JWKS)
    try:
        entries = json.loads(jwks.read_text(encoding="utf-8"))["keys"]
    except (OSError, ValueError, KeyError, TypeError):
        raise KvldpError(f"{str(jwks)!r} (the key's JWKS, for its kid) cannot be read") from None
    mine = public_jwk(key, "")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and all(entry.get(k) == v for k, v in mine.items() if k != "kid"):
            kid = entry.get("kid")
            if isinstance(kid, str) and kid:
                return kid
    raise KvldpError(f"{str(jwks)!r} has no entry for the {algorithm} key {str(path)!r}")


def sign_token(
    key: PrivateKey, kid: str, device: str, audience: str, ttl_s: float, now: float | None = None
) -> str:
    """One signed token for ``device`` at ``audience``, valid for ``ttl_s`` seconds."""
    if not valid_device_id(device):
        raise KvldpError(f"device id {device!r}: 1 to 128 visible ASCII characters")
    if not audience:
        raise KvldpError("the audience must not be empty")
    issued = int(time.time() if now is None else now)
    claims = {
        "sub": device,
        "aud": audience,
        "iat": issued,
        "nbf": issued,
        "exp": issued + max(1, int(ttl_s)),
        "jti": secrets.token_hex(12),
    }
    return jwt.encode(claims, key, algorithm=_algorithm_of(key), headers={"kid": kid})
