"""Device identity: bearer JWTs (RFC 7519) verified against a JWKS file or URL.

A token is accepted when it is signed with one of :data:`ALGORITHMS` (EdDSA, ES256,
RS256: asymmetric, so the gateway holds no secret that mints tokens; ``none`` and the
HMAC algorithms are refused) by a key of the configured key set, matching the key's own
algorithm; it carries ``exp`` (in the future), ``aud`` (the gateway's audience) and
``sub`` (the device id: 1 to :data:`MAX_DEVICE_ID` visible ASCII characters), and its
``nbf``, when present, has passed. Clock differences of up to :data:`LEEWAY_S` seconds are
forgiven on ``exp`` and ``nbf``.

Keys come from a JWKS document: a file, read once at start, or an ``https://`` URL,
fetched with PyJWT's :class:`jwt.PyJWKClient`, which caches the key set for
:data:`JWKS_LIFESPAN_S` seconds and refetches it on an unknown ``kid`` at most once per
:data:`JWKS_COOLDOWN_S` seconds (the fetch runs off the event loop).

A device sends the same token with every report until it expires, so a verified token is
remembered (by its SHA-256 digest, in an LRU table of at most :data:`VERIFIED_CACHE`
entries) until its ``exp`` plus the leeway or for :data:`VERIFIED_FOR_S` seconds, whichever
comes first: a key removed from the key set stops admitting its tokens within that time.
Refused tokens are never remembered.

A refusal is a :class:`TokenRefused` with the HTTP status (401: missing, malformed,
expired, not yet valid, unknown key or bad signature; 403: another audience) and a fixed
one-line detail: never the token, never a key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt

from kvldp.common.errors import KvldpError

#: the signature algorithms a token may use
ALGORITHMS = ("EdDSA", "ES256", "RS256")
#: seconds of clock difference forgiven on ``exp`` and ``nbf``
LEEWAY_S = 30
#: longest device id (the ``sub`` claim, the Kafka record key)
MAX_DEVICE_ID = 128
#: longest token accepted (a JWT of these algorithms with a few claims is well under 2 KiB)
MAX_TOKEN = 4096
#: seconds a key set fetched from a URL is kept
JWKS_LIFESPAN_S = 300.0
#: least seconds between two fetches of a URL's key set forced by unknown ``kid`` values
JWKS_COOLDOWN_S = 30.0
#: seconds a fetch of a URL's key set may take
JWKS_TIMEOUT_S = 10.0
#: verified tokens remembered, and for how long at most
VERIFIED_CACHE = 50_000
VERIFIED_FOR_S = 60.0
_DEVICE_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_DEVICE_ID}}}")


class TokenRefused(Exception):
    """A token that does not authenticate its device: ``status`` 401 or 403, ``detail`` one
    line that names the problem and nothing of the token."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def valid_device_id(device: str) -> bool:
    """Whether ``device`` is a device id the gateway keys records by."""
    return _DEVICE_ID.fullmatch(device) is not None


def _key_set(data: Any, where: str) -> jwt.PyJWKSet:
    try:
        keys = jwt.PyJWKSet.from_dict(data)
    except (jwt.PyJWKSetError, jwt.InvalidKeyError, jwt.PyJWKError, TypeError, AttributeError):
        raise KvldpError(f"JWKS {where}: not a JSON Web Key Set with a usable key") from None
    for key in keys.keys:
        if key.algorithm_name not in ALGORITHMS:
            raise KvldpError(
                f"JWKS {where}: key {key.key_id!r} is for {key.algorithm_name}; the gateway takes "
                f"{', '.join(ALGORITHMS)} keys only"
            )
    return keys


def load_jwks_file(path: str | Path) -> jwt.PyJWKSet:
    """The key set of a JWKS file (one line naming the problem if it cannot be used)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise KvldpError(f"JWKS file {str(path)!r} cannot be read as JSON ({reason})") from None
    return _key_set(data, f"file {str(path)!r}")


class KeySource:
    """The verification keys: a fixed key set (a file) or a URL's, cached."""

    def __init__(self, keys: jwt.PyJWKSet | None = None, url: str | None = None) -> None:
        if (keys is None) == (url is None):
            raise ValueError("give a key set or a URL")
        self.keys = keys
        self.client = (
            None
            if url is None
            else jwt.PyJWKClient(
                url,
                cache_keys=True,
                lifespan=JWKS_LIFESPAN_S,
                timeout=JWKS_TIMEOUT_S,
                cooldown_duration=JWKS_COOLDOWN_S,
            )
        )

    @classmethod
    def open(cls, where: str) -> KeySource:
        """Keys from ``where``: an ``https://`` URL or a file path (``http://`` is refused:
        keys fetched in the clear could be anyone's)."""
        if where.startswith("https://"):
            return cls(url=where)
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", where):
            raise KvldpError(f"--jwks {where.split('://')[0]}:// URL: keys are fetched over https:// only")
        return cls(keys=load_jwks_file(where))

    async def key_for(self, token: str, kid: str | None) -> jwt.PyJWK:
        """The key that should have signed ``token`` (by its ``kid``; the only key of a set
        of one when the token names none)."""
        if self.client is not None:
            client = self.client
            try:
                return await asyncio.to_thread(client.get_signing_key_from_jwt, token)
            except jwt.PyJWKClientConnectionError:
                raise TokenRefused(401, "the key set cannot be fetched") from None
            except (jwt.PyJWKClientError, jwt.PyJWKError, jwt.DecodeError):
                raise TokenRefused(401, "token signed by an unknown key") from None
        assert self.keys is not None
        if kid is None:
            if len(self.keys.keys) == 1:
                return self.keys.keys[0]
            raise TokenRefused(401, "token names no key (kid)")
        try:
            return self.keys[kid]
        except KeyError:
            raise TokenRefused(401, "token signed by an unknown key") from None


class TokenVerifier:
    """Checks bearer tokens for one audience against :class:`KeySource` keys."""

    def __init__(
        self,
        keys: KeySource,
        audience: str,
        leeway: float = LEEWAY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.audience = audience
        self.leeway = leeway
        self.clock = clock
        #: digest of a verified token -> (its device, until when it is taken unverified)
        self._verified: OrderedDict[bytes, tuple[str, float]] = OrderedDict()

    async def device(self, authorization: str | None) -> str:
        """The device id of a request's ``Authorization`` header (:class:`TokenRefused`
        otherwise)."""
        token = _bearer(authorization)
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        now = self.clock()
        known = self._verified.get(digest)
        if known is not None:
            if now < known[1]:
                self._verified.move_to_end(digest)
                return known[0]
            del self._verified[digest]
        device, expires = await self._verify(token)
        self._verified[digest] = (device, min(expires + self.leeway, now + VERIFIED_FOR_S))
        if len(self._verified) > VERIFIED_CACHE:
            self._verified.popitem(last=False)
        return device

    async def _verify(self, token: str) -> tuple[str, float]:
        """The device and expiry of a token, verified in full."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise TokenRefused(401, "malformed token") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise TokenRefused(401, f"token algorithm not accepted (use {', '.join(ALGORITHMS)})")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused(401, "malformed token")
        key = await self.keys.key_for(token, kid)
        if key.algorithm_name != algorithm:
            raise TokenRefused(401, "token algorithm does not match its key")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.audience,
                leeway=self.leeway,
                options={"require": ["exp", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRefused(401, "token expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRefused(401, "token not yet valid (nbf)") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused(403, "token is for another audience") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused(401, f"token has no {exc.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise TokenRefused(401, "token signature does not verify") from None
        except jwt.InvalidTokenError:
            raise TokenRefused(401, "invalid token") from None
        device = claims.get("sub")
        if not isinstance(device, str) or not valid_device_id(device):
            raise TokenRefused(
                401, f"token subject must be a device id of 1 to {MAX_DEVICE_ID} visible ASCII characters"
            )
        return device, float(claims["exp"])


def _bearer(authorization: str | None) -> str:
    if authorization is None:
        raise TokenRefused(401, "no bearer token (Authorization: Bearer <JWT>)")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise TokenRefused(401, "no bearer token (Authorization: Bearer <JWT>)")
    if len(token) > MAX_TOKEN:
        raise TokenRefused(401, f"token longer than {MAX_TOKEN} characters")
    return token
