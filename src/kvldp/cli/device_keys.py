"""``kvldp devices``: signing keys and device tokens for the gateway (development and
tests; production tokens come from the operator's identity provider).

``keygen --out DIR`` writes ``DIR/private.pem`` (mode 0600) and ``DIR/jwks.json``;
``token --key DIR/private.pem --device ID --audience AUD --ttl 1h`` prints one token."""

from __future__ import annotations

import argparse
import re

from kvldp.cli.flags import DirectoryToWrite, FileToRead, Subparsers

_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> int:
    """Seconds of a duration like ``90``, ``90s``, ``15m``, ``1h`` or ``7d`` (positive)."""
    match = _DURATION.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive duration like 90s, 15m, 1h or 7d, got {text!r}"
        )
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def register(sub: Subparsers) -> None:
    p = sub.add_parser("devices", help="signing keys and device tokens for the gateway (development, tests)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    keygen = actions.add_parser("keygen", help="write a private key (PEM, 0600) and its jwks.json")
    keygen.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        type=DirectoryToWrite,
        help="directory for private.pem and jwks.json",
    )
    keygen.add_argument(
        "--algorithm", choices=("EdDSA", "ES256", "RS256"), default="EdDSA", help="key type (default EdDSA)"
    )
    keygen.set_defaults(func=cmd_keygen)
    token = actions.add_parser("token", help="print one signed token for one device")
    token.add_argument(
        "--key", required=True, metavar="PEM", type=FileToRead, help="private key written by keygen"
    )
    token.add_argument("--device", required=True, help="the device id (the token's sub)")
    token.add_argument("--audience", required=True, help="the gateway's --audience")
    token.add_argument("--ttl", type=duration, default=3600, help="lifetime: 90s, 15m, 1h, 7d (default 1h)")
    token.set_defaults(func=cmd_token)


def cmd_keygen(args: argparse.Namespace) -> int:
    from kvldp.gateway.signing import generate

    private, public = generate(args.out, args.algorithm)
    print(f"private_key={private}")
    print(f"jwks={public}")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from kvldp.gateway.signing import load_private_key, sign_token

    key, kid = load_private_key(args.key)
    print(sign_token(key, kid, args.device, args.audience, args.ttl))
    return 0
