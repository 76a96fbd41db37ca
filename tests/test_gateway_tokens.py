"""Device tokens: what the gateway's verifier accepts and refuses (every refusal names the
problem and nothing of the token), the key sets it reads (file and https URL), the
per-device rate limiter, and ``kvldp devices keygen`` / ``token``."""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import ssl
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import trustme

from kvldp.common.errors import KvldpError
from kvldp.gateway.rate_limit import RateLimiter, retry_after
from kvldp.gateway.signing import generate, load_private_key, sign_token
from kvldp.gateway.tokens import (
    LEEWAY_S,
    MAX_DEVICE_ID,
    VERIFIED_FOR_S,
    KeySource,
    TokenRefused,
    TokenVerifier,
)

from support import run_kvldp

AUDIENCE = "kvldp-test"


def verifier_for(directory: Path) -> TokenVerifier:
    return TokenVerifier(KeySource.open(str(directory / "jwks.json")), AUDIENCE)


def verify(verifier: TokenVerifier, token: str | None) -> str:
    return asyncio.run(verifier.device(None if token is None else f"Bearer {token}"))


def refusal(verifier: TokenVerifier, token: str | None) -> TokenRefused:
    with pytest.raises(TokenRefused) as caught:
        verify(verifier, token)
    if token is not None:
        assert token not in caught.value.detail
    return caught.value


@pytest.mark.parametrize("algorithm", ["EdDSA", "ES256", "RS256"])
def test_a_token_of_each_algorithm_names_its_device(tmp_path: Path, algorithm: str) -> None:
    generate(tmp_path, algorithm)
    key, kid = load_private_key(tmp_path / "private.pem")
    assert verify(verifier_for(tmp_path), sign_token(key, kid, "phone-42", AUDIENCE, 60)) == "phone-42"
    assert jwt.get_unverified_header(sign_token(key, kid, "phone-42", AUDIENCE, 60))["alg"] == algorithm


def test_refused_tokens_are_401_or_403_with_a_detail_that_leaks_nothing(tmp_path: Path) -> None:
    generate(tmp_path / "mine")
    generate(tmp_path / "other")
    key, kid = load_private_key(tmp_path / "mine" / "private.pem")
    other, other_kid = load_private_key(tmp_path / "other" / "private.pem")
    verifier = verifier_for(tmp_path / "mine")
    now = time.time()

    assert refusal(verifier, None).status == 401
    with pytest.raises(TokenRefused):
        asyncio.run(verifier.device("Basic dXNlcjpwYXNz"))
    assert refusal(verifier, "not.a.jwt").status == 401
    expired = sign_token(key, kid, "d1", AUDIENCE, 60, now=now - 60 - LEEWAY_S - 5)
    assert refusal(verifier, expired).detail == "token expired"
    within_leeway = sign_token(key, kid, "d1", AUDIENCE, 60, now=now - 60 - LEEWAY_S + 5)
    assert verify(verifier, within_leeway) == "d1"
    early = sign_token(key, kid, "d1", AUDIENCE, 600, now=now + LEEWAY_S + 60)
    assert refusal(verifier, early).detail == "token not yet valid (nbf)"
    # signed by another key that claims this key's kid, and by an unknown kid
    assert (
        refusal(verifier, sign_token(other, kid, "d1", AUDIENCE, 60)).detail
        == "token signature does not verify"
    )
    assert (
        refusal(verifier, sign_token(other, other_kid, "d1", AUDIENCE, 60)).detail
        == "token signed by an unknown key"
    )
    wrong_audience = refusal(verifier, sign_token(key, kid, "d1", "another-service", 60))
    assert (wrong_audience.status, wrong_audience.detail) == (403, "token is for another audience")

    claims = {"sub": "d1", "aud": AUDIENCE, "exp": int(now) + 60}
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": kid})
    assert refusal(verifier, unsigned).status == 401
    hmac = jwt.encode(claims, "a shared secret of thirty-two bytes!", algorithm="HS256", headers={"kid": kid})
    assert refusal(verifier, hmac).detail.startswith("token algorithm not accepted")
    # an alg=none header on a real signature does not select "no verification"
    _, payload, signature = sign_token(key, kid, "d1", AUDIENCE, 60).split(".")
    none_header = base64.urlsafe_b64encode(json.dumps({"alg": "none", "kid": kid}).encode()).rstrip(b"=")
    assert refusal(verifier, f"{none_header.decode()}.{payload}.{signature}").status == 401
    for missing in ("exp", "aud", "sub"):
        partial = {k: v for k, v in claims.items() if k != missing}
        token = jwt.encode(partial, key, algorithm="EdDSA", headers={"kid": kid})
        assert refusal(verifier, token).detail == f"token has no {missing!r} claim"
    for device in ("", "a" * (MAX_DEVICE_ID + 1), "has space", "tab\there"):
        token = jwt.encode({**claims, "sub": device}, key, algorithm="EdDSA", headers={"kid": kid})
        assert refusal(verifier, token).status == 401
    assert verify(verifier, sign_token(key, kid, "a" * MAX_DEVICE_ID, AUDIENCE, 60)) == "a" * MAX_DEVICE_ID
    assert refusal(verifier, "x" * 5000).detail.startswith("token longer than")


def test_key_sets_that_cannot_be_used_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    for content, words in [
        ("{not json", "cannot be read as JSON"),
        ('{"keys": []}', "not a JSON Web Key Set"),
        ('{"keys": [{"kty": "oct", "k": "c2VjcmV0", "alg": "HS256", "kid": "h"}]}', "HS256"),
    ]:
        bad.write_text(content)
        with pytest.raises(KvldpError, match=words):
            KeySource.open(str(bad))
    with pytest.raises(KvldpError, match="cannot be read as JSON"):
        KeySource.open(str(tmp_path / "missing.json"))
    with pytest.raises(KvldpError, match="https:// only"):
        KeySource.open("http://127.0.0.1:1/jwks.json")


@pytest.fixture
def jwks_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    """An https server on loopback serving ``tmp_path/keys/jwks.json`` (its CA trusted via
    SSL_CERT_FILE); yields its URL and the list of paths it was asked for."""
    generate(tmp_path / "keys")
    document = (tmp_path / "keys" / "jwks.json").read_bytes()
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(document)))
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, *args: object) -> None:
            pass

    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/jwks.json", asked
    finally:
        server.shutdown()
        server.server_close()


def test_keys_from_an_https_url_are_cached_and_unknown_kids_do_not_refetch_each_time(
    tmp_path: Path, jwks_server: tuple[str, list[str]]
) -> None:
    url, asked = jwks_server
    key, kid = load_private_key(tmp_path / "keys" / "private.pem")
    verifier = TokenVerifier(KeySource.open(url), AUDIENCE)
    for device in ("d1", "d2", "d3"):
        assert verify(verifier, sign_token(key, kid, device, AUDIENCE, 60)) == device
    assert len(asked) == 1
    for _ in range(5):  # a client inventing kids makes the gateway fetch at most once per cooldown
        assert refusal(verifier, sign_token(key, "invented", "d1", AUDIENCE, 60)).status == 401
    assert len(asked) <= 2


def test_rate_limiter_refills_refuses_with_a_wait_and_stays_bounded() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, max_devices=100, clock=lambda: now[0])
    assert [limiter.take("d") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("d") == pytest.approx(0.5)
    assert retry_after(0.5) == "1" and retry_after(2.2) == "3"
    assert limiter.take("other") == 0.0  # one device's flood is its own
    now[0] += 0.5
    assert limiter.take("d") == 0.0
    assert limiter.take("d") > 0
    for i in range(1000):
        limiter.take(f"device-{i}")
    assert len(limiter) == 100


def test_keygen_and_token_commands_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "keys"
    done = run_kvldp("devices", "keygen", "--out", str(out), "--algorithm", "ES256")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE((out / "private.pem").stat().st_mode) == 0o600
    jwks = json.loads((out / "jwks.json").read_text())
    assert [k["alg"] for k in jwks["keys"]] == ["ES256"] and jwks["keys"][0]["kid"]
    assert "d" not in jwks["keys"][0]  # the public half only
    again = run_kvldp("devices", "keygen", "--out", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "exists" in again.stderr
    token = run_kvldp(
        "devices",
        "token",
        "--key",
        str(out / "private.pem"),
        "--device",
        "phone-7",
        "--audience",
        AUDIENCE,
        "--ttl",
        "15m",
    )
    assert token.returncode == 0, token.stderr
    claims = jwt.decode(token.stdout.strip(), options={"verify_signature": False})
    assert claims["sub"] == "phone-7" and claims["exp"] - claims["iat"] == 900
    assert verify(verifier_for(out), token.stdout.strip()) == "phone-7"
    base = {"--key": str(out / "private.pem"), "--device": "phone-7", "--audience": AUDIENCE}
    for flag, value in (("--ttl", "0"), ("--ttl", "1y"), ("--device", "has space")):
        args = [word for pair in {**base, flag: value}.items() for word in pair]
        done = run_kvldp("devices", "token", *args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    missing = run_kvldp(
        "devices", "token", "--key", str(tmp_path / "none.pem"), "--device", "d", "--audience", "a"
    )
    assert missing.returncode == 2 and f"--key {tmp_path / 'none.pem'}: does not exist" in missing.stderr


def test_a_verified_token_is_remembered_for_a_bounded_time_only(tmp_path: Path) -> None:
    generate(tmp_path / "old")
    generate(tmp_path / "new")
    key, kid = load_private_key(tmp_path / "old" / "private.pem")
    clock = [time.time()]
    verifier = TokenVerifier(
        KeySource.open(str(tmp_path / "old" / "jwks.json")), AUDIENCE, clock=lambda: clock[0]
    )
    token = sign_token(key, kid, "d1", AUDIENCE, 3600)
    assert verify(verifier, token) == "d1"
    verifier.keys = KeySource.open(str(tmp_path / "new" / "jwks.json"))  # the old key is withdrawn
    assert verify(verifier, token) == "d1"  # remembered ...
    clock[0] += VERIFIED_FOR_S + 1
    assert refusal(verifier, token).detail == "token signed by an unknown key"  # ... for a while only
    assert refusal(verifier, token).status == 401  # and a refusal is not remembered as a success
