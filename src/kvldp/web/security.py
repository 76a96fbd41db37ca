"""TLS and HTTP basic auth for a kvldp endpoint (both off unless configured).

TLS takes a certificate chain and its key from PEM files (TLS 1.2 at least). Basic auth
compares the credentials a client presents with the configured ``user:password`` in
constant time (:func:`hmac.compare_digest`), as their base64 token: the expected token is
encoded once, the presented one is never decoded. The credentials come from a file
(:func:`load_basic_auth`), which keeps the password off the command line.
"""

from __future__ import annotations

import base64
import hmac
import ssl
from dataclasses import dataclass
from pathlib import Path

from kvldp.common.errors import KvldpError


@dataclass(frozen=True)
class HttpSecurity:
    """Optional TLS (certificate and key files) and HTTP basic auth for an endpoint."""

    certfile: str | None = None
    keyfile: str | None = None
    username: str | None = None
    password: str | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context, or None for plain HTTP."""
        if self.certfile is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.certfile, self.keyfile)
        except OSError as exc:  # ssl.SSLError included: not PEM, or a key that does not match
            raise KvldpError(
                f"TLS certificate {self.certfile!r} with key {self.keyfile!r} cannot be loaded: {exc}"
            ) from None
        return context

    def authorised(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries the configured credentials (always
        true without basic auth)."""
        if self.username is None:
            return True
        if header is None:
            return False
        scheme, _, token = header.partition(" ")
        expected = base64.b64encode(f"{self.username}:{self.password}".encode())
        presented = token.strip().encode("utf-8", "surrogateescape")
        return scheme.lower() == "basic" and hmac.compare_digest(presented, expected)


def load_basic_auth(path: str) -> tuple[str, str]:
    """``user:password`` on the first line of a file (keeps the password off the command line)."""
    try:
        line = Path(path).read_text(encoding="utf-8").splitlines()[0].strip()
    except (OSError, UnicodeDecodeError, IndexError):
        raise KvldpError(f"basic-auth file {path!r} cannot be read or is empty") from None
    user, sep, password = line.partition(":")
    if not sep or not user or not password:
        raise KvldpError(f"basic-auth file {path!r} must hold one line user:password")
    return user, password
