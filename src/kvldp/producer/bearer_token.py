"""The bearer tokens the SDK presents to the gateway, and where it gets them.

A token is a device's credential (a JWT whose ``sub`` is the device id). The SDK asks
its provider for one before every request, so a provider that refreshes tokens is
always current; after a 401 it asks once more (the refreshed token) and retries once.
A provider is a string, a callable returning a string or an awaitable string, or — for a
process that reports for many devices — a callable of the device id. :class:`TokenFile`
reads tokens from a file (one token, or a JSON object of device id to token) and reads
it again whenever it changes, so a token rotated on disk is picked up.

Tokens are secrets: they never appear in a log line or an exception message; a token
that is not a bearer token (RFC 6750: letters, digits and ``-._~+/``, then ``=`` padding)
is refused without being repeated.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from kvldp.common.errors import KvldpError

#: a token for the collector's device (a fixed string, or a provider called per request)
TokenProvider = Callable[[], str | Awaitable[str]]
#: a token for any device id a collector reports for
DeviceTokenProvider = Callable[[str], str | Awaitable[str]]

_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class InvalidToken(KvldpError):
    """No usable bearer token: the provider returned something else, or the token file
    is unreadable (the message never contains a token)."""


class BearerTokens:
    """The token to present for a device, from ``token`` (one device) or ``token_for``
    (any device id): exactly one of them."""

    def __init__(self, token: str | TokenProvider | None, token_for: DeviceTokenProvider | None) -> None:
        if (token is None) == (token_for is None):
            raise InvalidToken("an endpoint needs a bearer token: give token or token_for (one of them)")
        if isinstance(token, str):
            check_token(token, "token")
        self._token = token
        self._token_for = token_for

    async def get(self, device: str) -> str:
        """The token to send now for reports of ``device``."""
        if self._token_for is not None:
            found: str | Awaitable[str] = self._token_for(device)
            where = "token_for"
        elif isinstance(self._token, str):
            return self._token
        else:
            assert self._token is not None
            found, where = self._token(), "the token provider"
        token = await found if inspect.isawaitable(found) else found
        return check_token(token, where)


def check_token(token: object, where: str) -> str:
    """``token`` if it is a bearer token, else :class:`InvalidToken` naming ``where``."""
    if not isinstance(token, str):
        raise InvalidToken(f"{where} returned a {type(token).__name__}, not a token string")
    if not _B64TOKEN.fullmatch(token):
        raise InvalidToken(
            f"{where} gave no bearer token ({'empty' if not token else 'characters a token cannot hold'})"
        )
    return token


class TokenFile:
    """Tokens in a file, read again when it changes: the whole file (stripped) is one
    token for every device, or a JSON object maps device ids to their tokens."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int] | None = None
        self._one: str | None = None
        self._by_device: dict[str, str] = {}
        self._load()

    def __call__(self, device: str) -> str:
        self._load()
        if self._one is not None:
            return self._one
        token = self._by_device.get(device)
        if token is None:
            raise InvalidToken(f"token file {str(self.path)!r} has no token for device {device!r}")
        return token

    def _load(self) -> None:
        try:
            info = self.path.stat()
            seen = (info.st_mtime_ns, info.st_size)
            if seen == self._seen:
                return
            text = self.path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise InvalidToken(f"cannot read token file {str(self.path)!r}: {reason}") from None
        where = f"token file {str(self.path)!r}"
        if text.startswith("{"):
            try:
                table = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidToken(f"{where}: not a JSON object ({exc.msg}, line {exc.lineno})") from None
            if not isinstance(table, dict) or not table:
                raise InvalidToken(f"{where}: the JSON object maps no device to a token")
            self._by_device = {str(d): check_token(t, f"{where}, device {d!r},") for d, t in table.items()}
            self._one = None
        else:
            self._one = check_token(text, where)
            self._by_device = {}
        self._seen = seen
