"""The SDK over HTTPS: ``Collector(endpoint=..., token=...)`` against a scripted gateway.

The peer is :class:`support.gateway_double.GatewayDouble` (the contract's status codes,
no Kafka). What is checked: the 202 path and the request's headers; 429/503/502 and a
refused connection are retried with the same bytes (same report ids) and epsilon is
spent once; ``Retry-After`` is honoured; final refusals reach the caller with the
gateway's code and detail; a 401 makes the SDK ask its provider for a new token once;
memoized re-sends are unchanged; tokens never reach a log or an exception; TLS with a
``ca_file``; and every setting the collector refuses.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import re
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from kvldp.cli import main
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.wire import WireFormat
from kvldp.producer import (
    Collector,
    GatewayUnavailable,
    ReportRefused,
    ReportStatus,
    RetryPolicy,
)
from kvldp.producer.bearer_token import InvalidToken, TokenFile
from kvldp.producer.gateway_client import InvalidEndpoint, reports_url
from kvldp.producer.retry_policy import parse_retry_after

from support import run_kvldp
from support.gateway_double import Answer, GatewayDouble
from support.pipeline import wait_for
from support.producer import phones
from support.tls import TlsFiles

TOKEN = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJwaG9uZS0xIn0.c2lnbmF0dXJl"
#: retries in milliseconds, so that a test waits only where a Retry-After says so
FAST = RetryPolicy(initial_backoff=0.01, max_backoff=0.05, deadline=10.0)


collection = phones


def sdk(c: Collection, url: str, token: Any = TOKEN, **options: Any) -> Collector:
    options.setdefault("retry", FAST)
    return Collector(c, endpoint=url, token=token, rng=np.random.default_rng(1), **options)


def payload(body: bytes) -> dict[str, Any]:
    return {k: v for k, v in msgpack.unpackb(body, raw=False).items() if k not in ("ts", "rid")}


async def served(double: GatewayDouble, work: Callable[[str], Awaitable[None]]) -> None:
    url = await double.start()
    try:
        await work(url)
    finally:
        await double.stop()


@pytest.mark.asyncio
async def test_reports_are_posted_with_the_contracts_headers() -> None:
    c = collection()
    double = GatewayDouble()

    async def work(url: str) -> None:
        async with sdk(c, url + "/edge/") as phone:
            for value in (1.0, 5.0, 9.0):
                assert await phone.report({"a": value}) is ReportStatus.SENT
        async with sdk(c, url, device_id="phone-1") as named:
            await named.report({"b": 2.0})
        async with sdk(c, url) as gateway:
            summary = await gateway.report_many([{"c": 1.0}] * 5, [f"d{i}" for i in range(5)], batch_size=2)
            assert summary.sent == 5

    await served(double, work)
    first = double.received[0]
    assert [r.path for r in double.received[:3]] == ["/edge/v1/collections/phones/reports"] * 3
    assert first.headers["Content-Type"] == "application/msgpack"
    assert first.headers["Authorization"] == f"Bearer {TOKEN}"
    assert "Kvldp-Device" not in first.headers  # the collector's own random id is claimed by no one
    assert double.received[3].path == "/v1/collections/phones/reports"
    assert double.received[3].headers["Kvldp-Device"] == "phone-1"
    batches = double.received[4:]
    assert [r.headers["Kvldp-Device"] for r in batches] == ["d0", "d2", "d4"]
    assert [msgpack.unpackb(r.body)["n"] for r in batches[:2]] == [2, 2]
    bodies = double.bodies()[:4]
    decoded = WireFormat(c).decode(bodies, [msgpack.unpackb(b)["ts"] for b in bodies])
    assert not decoded.rejected and len(decoded.message) == 4


@pytest.mark.asyncio
async def test_429_and_503_resend_the_same_bytes_honour_retry_after_and_spend_once(tmp_path: Path) -> None:
    c = collection({"lifetime_epsilon": 10.0})
    double = GatewayDouble(
        [
            Answer(429, "rate_limited", "slow down", retry_after="1"),
            Answer(503, "unavailable", "Kafka is not acknowledging", retry_after="0"),
            Answer(502, raw="<html>bad gateway</html>"),
        ]
    )

    async def work(url: str) -> None:
        async with sdk(c, url, state_path=tmp_path / "state") as phone:
            assert await phone.report({"a": 4.0}) is ReportStatus.SENT
            await phone.flush()
            assert phone.privacy_spent() == pytest.approx(c.epsilon)

    await served(double, work)
    bodies = double.bodies()
    assert len(bodies) == 4 and len(set(bodies)) == 1  # the same report id every time
    assert double.received[1].at - double.received[0].at >= 1.0  # Retry-After: 1
    again = Collector(c, endpoint="http://127.0.0.1:9", token=TOKEN, state_path=tmp_path / "state")
    assert again.state.charged == 1 and again.privacy_spent() == pytest.approx(c.epsilon)


@pytest.mark.asyncio
async def test_a_refused_connection_is_retried_until_the_gateway_listens() -> None:
    c = collection({"lifetime_epsilon": 10.0})
    double = GatewayDouble()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with sdk(c, url) as phone:
        await phone.report({"b": 3.0})
        transport = phone.transport
        await wait_for(lambda: getattr(transport, "retries", 0) >= 2, 30, "two refused connections")
        assert double.received == []
        await double.start(sock)
        try:
            await phone.flush()
        finally:
            await double.stop()
    assert len(double.received) == 1
    assert phone.privacy_spent() == pytest.approx(c.epsilon)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (Answer(400, "implausible_report", "a unary report with impossible bits"), "implausible_report"),
        (Answer(403, "forbidden", "the token's device is not Kvldp-Device"), "forbidden"),
        (Answer(409, "config_mismatch", "cfg 0badc0de is not the collection's"), "config_mismatch"),
        (Answer(404, "unknown_collection", "no collection phones"), "unknown_collection"),
        (Answer(413, raw="<html>413 Request Entity Too Large</html>"), "http_413"),
        (Answer(500, "internal", "boom"), "internal"),
    ],
)
async def test_a_final_refusal_reaches_the_caller_with_its_reason(answer: Answer, error: str) -> None:
    c = collection({"lifetime_epsilon": 10.0})
    double = GatewayDouble([answer])
    refused: list[ReportRefused] = []

    async def work(url: str) -> None:
        phone = sdk(c, url, device_id="phone-1")
        await phone.start()
        assert await phone.report({"a": 1.0}) is ReportStatus.SENT
        with pytest.raises(ReportRefused) as caught:
            await phone.stop()
        refused.append(caught.value)
        assert phone.privacy_spent() == pytest.approx(c.epsilon)  # paid for, as a report Kafka never took

    await served(double, work)
    exc = refused[0]
    assert len(double.received) == 1  # never sent again
    assert (exc.status, exc.error, exc.device, exc.reports) == (answer.status, error, "phone-1", 1)
    assert exc.detail == (answer.detail or "Request Entity Too Large" if answer.raw else answer.detail)
    assert str(exc).startswith(f"gateway refused 1 report(s) of device phone-1: {answer.status} {error}")


@pytest.mark.asyncio
async def test_other_messages_are_settled_before_the_refusal_is_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = collection()
    double = GatewayDouble([Answer(400, "malformed", "not msgpack"), Answer(409, "config_mismatch", "cfg")])

    async def work(url: str) -> None:
        phone = sdk(c, url, max_connections=1)
        await phone.start()
        for value in range(5):
            await phone.report({"a": float(value)})
        with pytest.raises(ReportRefused, match="400 malformed: not msgpack"):
            await phone.flush()
        await phone.report({"a": 1.0})
        await phone.stop()  # the transport stays usable after a refusal

    await served(double, work)
    assert len(double.received) == 6
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "collection phones: gateway refused 1 report(s) of device " + warned[0].split("device ")[1]
    ]
    assert warned[0].endswith(": 409 config_mismatch: cfg")


@pytest.mark.asyncio
async def test_401_asks_the_provider_for_a_new_token_once() -> None:
    c = collection()
    issued: list[str] = []

    async def provider() -> str:
        issued.append(f"token-{len(issued)}")
        return issued[-1]

    double = GatewayDouble(tokens={"token-1", "token-2", "token-3"})

    async def work(url: str) -> None:
        async with sdk(c, url, token=provider) as phone:
            await phone.report({"a": 1.0})
            await phone.flush()
            await phone.report({"a": 2.0})
        with pytest.raises(ReportRefused) as caught:
            async with sdk(c, url, token="expired.token") as stale:
                await stale.report({"a": 1.0})
        assert (caught.value.status, caught.value.error) == (401, "unauthorized")

    await served(double, work)
    auth = [r.headers["Authorization"] for r in double.received]
    # token-0 refused, token-1 taken; the next request asks again (token-2); a fixed token: twice, then final
    assert auth == ["Bearer token-0", "Bearer token-1", "Bearer token-2", *["Bearer expired.token"] * 2]
    assert double.received[0].body == double.received[1].body


@pytest.mark.asyncio
async def test_token_for_gives_each_device_its_own_token() -> None:
    c = collection()
    double = GatewayDouble()

    async def work(url: str) -> None:
        async with Collector(c, endpoint=url, token_for=lambda device: f"jwt-of-{device}") as gateway:
            await gateway.report_many([{"a": 1.0}, {"b": 2.0}], ["d0", "d1"])

    await served(double, work)
    assert sorted((r.headers["Kvldp-Device"], r.headers["Authorization"]) for r in double.received) == [
        ("d0", "Bearer jwt-of-d0"),
        ("d1", "Bearer jwt-of-d1"),
    ]


@pytest.mark.asyncio
async def test_memoized_resends_are_unchanged_through_the_gateway() -> None:
    c = collection({"memoize": True})
    double = GatewayDouble([Answer(200), Answer(503, "unavailable", "", retry_after="0")])

    async def work(url: str) -> None:
        async with sdk(c, url, device_id="phone-1") as phone:
            statuses = [await phone.report({"a": 4.0, "c": 9.0}) for _ in range(4)]
            assert statuses == [ReportStatus.SENT] + [ReportStatus.RESENT] * 3
            assert phone.privacy_spent() == pytest.approx(c.epsilon)

    await served(double, work)
    bodies = double.bodies()
    assert len(bodies) == 5  # four reports, one of them sent twice
    assert all(payload(b) == payload(bodies[0]) for b in bodies)
    rids = [msgpack.unpackb(b)["rid"] for b in bodies]
    assert len(set(rids)) == 4  # each re-send has its own id; the retry repeats its message's


@pytest.mark.asyncio
async def test_retries_give_up_at_the_deadline() -> None:
    c = collection()
    double = GatewayDouble([Answer(503, "unavailable", "Kafka down", retry_after="0")] * 1000)

    async def work(url: str) -> None:
        phone = sdk(c, url, retry=RetryPolicy(initial_backoff=0.02, max_backoff=0.05, deadline=0.3))
        await phone.start()
        await phone.report({"a": 1.0})
        with pytest.raises(GatewayUnavailable, match=r"within 0\.3 s .*last: 503 unavailable"):
            await phone.stop()

    await served(double, work)
    assert 3 <= len(double.received) < 40
    assert len(set(double.bodies())) == 1


@pytest.mark.asyncio
async def test_tokens_never_reach_logs_or_exceptions(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    c = collection()
    secret = "s3cr3t-token.never.logged"
    double = GatewayDouble(
        [Answer(503, "unavailable", "", retry_after="0"), Answer(403, "forbidden", "mismatch")],
        tokens={secret},
    )
    errors: list[str] = []

    async def work(url: str) -> None:
        with pytest.raises(ReportRefused) as refused:
            async with sdk(c, url, token=secret) as phone:
                await phone.report({"a": 1.0})
        errors.append(str(refused.value))
        with pytest.raises(ReportRefused) as unauthorized:
            async with sdk(c, url, token=secret + "x") as phone:
                await phone.report({"a": 1.0})
        errors.append(str(unauthorized.value))
        with pytest.raises(InvalidToken) as invalid:
            async with sdk(c, url, token=lambda: secret + "\r\nX-Evil: 1") as phone:
                await phone.report({"a": 1.0})
        errors.append(str(invalid.value))

    await served(double, work)
    again = [r for r in caplog.records if "sending again" in r.getMessage()]
    assert [r.levelno for r in again] == [logging.WARNING]  # the first retry after a success warns
    assert secret not in caplog.text
    assert all(secret not in e for e in errors), errors
    assert errors[2] == "the token provider gave no bearer token (characters a token cannot hold)"


@pytest.mark.asyncio
async def test_tls_with_a_ca_file_and_an_untrusted_certificate(tls_files: TlsFiles) -> None:
    c = collection()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls_files.server_cert_pem, tls_files.server_key_pem)
    double = GatewayDouble()
    url = await double.start(ssl_context=context)
    try:
        async with sdk(c, url, ca_file=str(tls_files.ca_pem)) as phone:
            await phone.report({"a": 1.0})
        phone = sdk(c, url, ca_file=str(tls_files.other_ca_pem))
        await phone.start()
        await phone.report({"a": 1.0})
        with pytest.raises(
            GatewayUnavailable,
            match=r"certificate is not trusted.*kvldp produce --ca-file, the SDK.s ca_file",
        ):
            await phone.stop()
    finally:
        await double.stop()
    assert len(double.received) == 1  # the untrusted attempt never reached the server, and was not retried


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bootstrap_servers": "kafka:9092"}, "bootstrap_servers is a Kafka setting"),
        ({"kafka_config": {"bootstrap.servers": "k:9092"}}, "kafka_config is a Kafka setting"),
        ({"acks": 1}, "acks is a Kafka setting"),
        ({"token": None}, "give token or token_for"),
        ({"token_for": str}, "give token or token_for"),
        ({"token": ""}, "token gave no bearer token (empty)"),
        ({"endpoint": "ftp://gw"}, "expected https://host"),
        ({"endpoint": "https://gw/?x=1"}, "no query, fragment or credentials"),
        ({"endpoint": "http://gateway.example"}, "plain http would send the device's token in clear"),
        ({"ca_file": "/nonexistent/ca.pem"}, "ca_file '/nonexistent/ca.pem': cannot load it"),
        ({"max_connections": 0}, "max_connections must be a positive integer"),
        ({"request_timeout": -1}, "request_timeout must be a positive number"),
    ],
)
def test_settings_the_endpoint_refuses(options: dict[str, Any], message: str) -> None:
    settings: dict[str, Any] = {"endpoint": "https://gateway.example", "token": TOKEN, **options}
    with pytest.raises(KvldpError, match=re.escape(message)):
        Collector(collection(), **settings)


def test_http_settings_without_an_endpoint_and_rounds_are_refused() -> None:
    with pytest.raises(KvldpError, match="token goes with endpoint"):
        Collector(collection(), "kafka:9092", token=TOKEN)
    with pytest.raises(KvldpError, match="retry goes with endpoint"):
        Collector(collection(), "kafka:9092", retry=FAST)
    rounds = parse_collection(
        {
            "name": "r",
            "mechanism": "privkvm",
            "epsilon": 1.0,
            "keys": ["a"],
            "value_range": [0.0, 1.0],
            "params": {"rounds": 2},
        }
    )
    with pytest.raises(KvldpError, match=r"reports in rounds.*cannot report through an endpoint"):
        Collector(rounds, endpoint="https://gw", token=TOKEN)
    # plain http is fine to this machine, and elsewhere when asked for
    Collector(collection(), endpoint="http://localhost:8080", token=TOKEN)
    Collector(collection(), endpoint="http://gateway:8080", token=TOKEN, allow_http=True)


def test_the_reports_url_and_retry_policy() -> None:
    assert str(reports_url("https://gw.example:8443/kvldp/", "phones")) == (
        "https://gw.example:8443/kvldp/v1/collections/phones/reports"
    )
    with pytest.raises(InvalidEndpoint, match="expected https://host"):
        reports_url("gw.example", "phones")
    with pytest.raises(KvldpError, match=r"initial_backoff .* exceeds max_backoff"):
        RetryPolicy(initial_backoff=2, max_backoff=1)
    with pytest.raises(KvldpError, match="deadline must be a positive number"):
        RetryPolicy(deadline=float("nan"))
    policy = RetryPolicy(initial_backoff=1.0, max_backoff=8.0)
    rng = random.Random(0)
    waits = [policy.delay(retry, None, rng) for retry in range(1, 7)]
    ceilings = [1, 2, 4, 8, 8, 8]
    assert all(c / 2 <= w <= c for w, c in zip(waits, ceilings, strict=True))
    after = [policy.delay(retry, 30.0, rng) for retry in (1, 4)]
    assert 30.0 <= after[0] <= 30.5 and 30.0 <= after[1] <= 34.0 and len(set(after)) == 2
    assert parse_retry_after("7") == 7.0
    assert (
        parse_retry_after(" x ") is None
        and parse_retry_after(None) is None
        and parse_retry_after("-1") is None
    )
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert parse_retry_after("Thu, 01 Jan 2026 00:00:05 GMT", now) == 5.0


def test_token_file_one_token_a_table_and_rotation(tmp_path: Path) -> None:
    one = tmp_path / "token"
    one.write_text(TOKEN + "\n")
    tokens = TokenFile(one)
    assert tokens("any-device") == TOKEN
    one.write_text("rotated.token.value\n")
    assert tokens("any-device") == "rotated.token.value"
    table = tmp_path / "tokens.json"
    table.write_text('{"d0": "t0", "d1": "t1"}')
    fleet = TokenFile(table)
    assert (fleet("d0"), fleet("d1")) == ("t0", "t1")
    with pytest.raises(InvalidToken, match="has no token for device 'd2'"):
        fleet("d2")
    for content, message in [
        ("", "gave no bearer token \\(empty\\)"),
        ("two words", "characters a token cannot hold"),
        ("{not json", "not a JSON object"),
        ("{}", "maps no device to a token"),
        ('{"d0": 5}', "device 'd0', returned a int"),
    ]:
        bad = tmp_path / "bad"
        bad.write_text(content)
        with pytest.raises(InvalidToken, match=message):
            TokenFile(bad)
    with pytest.raises(InvalidToken, match=r"cannot read token file .*No such file"):
        TokenFile(tmp_path / "missing")


COLLECTION_TOML = """
name = "phones"
mechanism = "pckv_grr"
epsilon = 1.5
keys = ["a", "b", "c", "d"]
value_range = [0.0, 10.0]
"""


def produce_files(tmp_path: Path, tokens: str) -> tuple[Path, Path, Path]:
    toml = tmp_path / "phones.toml"
    toml.write_text(COLLECTION_TOML)
    csv = tmp_path / "devices.csv"
    csv.write_text("device,key,value\nd0,a,1.5\nd0,b,2\nd1,c,9\nd2,a,3\n")
    token_file = tmp_path / "tokens"
    token_file.write_text(tokens)
    return toml, csv, token_file


@pytest.mark.asyncio
async def test_kvldp_produce_sends_a_csv_through_the_gateway(tmp_path: Path) -> None:
    toml, csv, token_file = produce_files(tmp_path, '{"d0": "t0", "d1": "t1", "d2": "t2"}')
    double = GatewayDouble(tokens={"t0", "t1", "t2"})
    url = await double.start()
    try:
        done = await asyncio.to_thread(
            run_kvldp,
            "produce",
            "--collection",
            str(toml),
            "--from-csv",
            str(csv),
            "--endpoint",
            url,
            "--token-file",
            str(token_file),
            unset=["KVLDP_BOOTSTRAP_SERVERS", "KVLDP_KAFKA_CONFIG"],
        )
        refused = await asyncio.to_thread(
            run_kvldp,
            "produce",
            "--collection",
            str(toml),
            "--from-csv",
            str(csv),
            "--endpoint",
            url,
            "--token-file",
            str(token_file.with_name("one")),
        )
    finally:
        await double.stop()
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"published 3 reports to {url} (phones)"
    sent = sorted((r.headers["Kvldp-Device"], r.headers["Authorization"]) for r in double.received[:3])
    assert sent == [("d0", "Bearer t0"), ("d1", "Bearer t1"), ("d2", "Bearer t2")]
    assert refused.returncode == 2
    assert (
        refused.stderr.strip() == f"kvldp: error: --token-file {token_file.with_name('one')}: does not exist"
    )


@pytest.mark.asyncio
async def test_kvldp_produce_counts_refused_reports_apart_from_unacknowledged(tmp_path: Path) -> None:
    """Reports the gateway refused (its 401 after a token refresh) were never stored: the
    error line counts them as refused, not as sent but not acknowledged."""
    toml, csv, token_file = produce_files(tmp_path, '{"d0": "t0", "d1": "t1", "d2": "t2"}')
    double = GatewayDouble(tokens={"other"})
    url = await double.start()
    try:
        done = await asyncio.to_thread(
            run_kvldp,
            "produce", "--collection", str(toml), "--from-csv", str(csv),
            "--endpoint", url, "--token-file", str(token_file),
            unset=["KVLDP_BOOTSTRAP_SERVERS", "KVLDP_KAFKA_CONFIG"],
        )  # fmt: skip
    finally:
        await double.stop()
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("kvldp: error: gateway refused 1 report(s) of device d"), last
    assert last.endswith(
        "; 0 reports acknowledged by the gateway, 3 refused by it (not stored), 0 sent but not acknowledged, "
        "the rest not sent"
    ), last


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--token-file", "TOKENS"], "--token-file goes with --endpoint URL"),
        (["--ca-file", "TOKENS"], "--ca-file goes with --endpoint URL"),
        (["--endpoint", "https://gw"], "--endpoint needs --token-file FILE"),
        (
            ["--endpoint", "https://gw", "--token-file", "TOKENS", "--bootstrap-servers", "k:9092"],
            "--endpoint sends through the gateway: --bootstrap-servers is for Kafka, give one of them",
        ),
        (
            ["--endpoint", "https://gw", "--token-file", "TOKENS", "-X", "client.id=x"],
            "--endpoint sends through the gateway: -X is for Kafka, give one of them",
        ),
        (["--endpoint", "gw:8443", "--token-file", "TOKENS"], "endpoint 'gw:8443': expected https://host"),
        (
            ["--endpoint", "http://gw.example", "--token-file", "TOKENS"],
            "plain http would send the device's token in clear",
        ),
        (
            ["--endpoint", "https://gw", "--token-file", "TOKENS", "--ca-file", "missing.pem"],
            "--ca-file missing.pem: does not exist",
        ),
    ],
)
def test_kvldp_produce_refuses_endpoint_flags_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    toml, csv, token_file = produce_files(tmp_path, TOKEN)
    argv = ["produce", "--collection", str(toml), "--from-csv", str(csv)]
    argv += [str(token_file) if flag == "TOKENS" else flag for flag in flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("kvldp: error: ") and message in err, err


def test_kvldp_produce_refuses_a_collection_in_rounds_and_a_bad_token_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rounds = tmp_path / "rounds.toml"
    rounds.write_text(
        'name = "r"\nmechanism = "privkvm"\nepsilon = 1.0\nkeys = ["a"]\nvalue_range = [0.0, 1.0]\n'
        "[params]\nrounds = 2\n"
    )
    _, _, token_file = produce_files(tmp_path, "not a token")
    base = ["produce", "--simulate", "uniform", "--users", "5", "--endpoint", "https://gw", "--token-file"]
    assert main([*base, str(token_file), "--collection", str(rounds)]) == 2
    assert (
        "collection r reports in rounds, which devices follow on its control topic" in capsys.readouterr().err
    )
    assert main([*base, str(token_file), "--collection", str(tmp_path / "phones.toml")]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"kvldp: error: token file {str(token_file)!r} gave no bearer token (characters a token cannot hold)\n"
    )
