"""``kvldp gateway`` against the embedded broker: a report through the gateway is the
record the SDK would have produced; every status of the HTTP contract; Kafka paused or
gone answers 503; hostile clients neither crash it nor keep others from being served;
tokens and keys appear in no log, answer or metric; the command line's first line, flag
errors and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer

from kvldp.aggregator.ingest import plan
from kvldp.aggregator.state import AggregatorState
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.common.messages.wire import WireFormat
from kvldp.gateway.endpoint import Gateway, GatewaySettings
from kvldp.gateway.signing import PrivateKey, generate, load_private_key, sign_token
from kvldp.gateway.tokens import KeySource, TokenVerifier
from kvldp.gateway.validation import BodyCheck, BodyRefused
from kvldp.kafka.client_config import KafkaConfig
from kvldp.producer.collector import Collector

from support import Rec, run_kvldp
from support.pipeline import collection_toml, eventually, unique_collection, wait_for
from support.tls import TlsFiles

AUDIENCE = "kvldp-gateway-test"
MSGPACK = {"Content-Type": "application/msgpack"}


class Keys:
    """A signing key and its JWKS file; :meth:`token` signs one device's token."""

    def __init__(self, directory: Path) -> None:
        generate(directory)
        self.directory = directory
        self.jwks = directory / "jwks.json"
        key, self.kid = load_private_key(directory / "private.pem")
        self.key: PrivateKey = key

    def token(self, device: str, audience: str = AUDIENCE, ttl: float = 300, now: float | None = None) -> str:
        return sign_token(self.key, self.kid, device, audience, ttl, now)

    def auth(self, device: str, **kw: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(device, **kw)}", **MSGPACK}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"))


class CapturingProducer:
    """Stands in for the SDK's aiokafka producer: keeps what it would have sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, topic: str, **record: Any) -> asyncio.Future[None]:
        self.sent.append({"topic": topic, "headers": None, **record})
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


@asynccontextmanager
async def gateway(
    collections: list[Collection], bootstrap: str, keys: Keys, **settings: Any
) -> AsyncIterator[tuple[Gateway, str]]:
    verifier = TokenVerifier(KeySource.open(str(keys.jwks)), AUDIENCE)
    running = Gateway(
        collections, KafkaConfig.plaintext(bootstrap), verifier, "127.0.0.1", 0, GatewaySettings(**settings)
    )
    stop = asyncio.Event()
    task = asyncio.create_task(running.run(stop))
    await wait_for(lambda: running.bound_port is not None or task.done(), 30, "the gateway to start")
    if task.done():
        await task
    try:
        yield running, f"http://127.0.0.1:{running.bound_port}"
    finally:
        stop.set()
        await task


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, Any], Any]:
    async with session.post(url, data=body, headers=headers) as response:
        return response.status, dict(response.headers), await response.json(content_type=None)


async def topic_records(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    records: list[Any] = []
    try:
        deadline = time.monotonic() + 20
        while len(records) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
    finally:
        await consumer.stop()
    return records


def sdk_messages(collection: Collection, devices: list[str], batch_size: int = 1) -> list[dict[str, Any]]:
    """What the SDK publishes for ``devices`` (one pair each), captured before Kafka."""
    producer = CapturingProducer()
    collector = Collector(collection, "127.0.0.1:9", producer=producer)  # type: ignore[arg-type]
    pairs = [{collection.keys[i % collection.d]: float(i % 10)} for i in range(len(devices))]
    asyncio.run(collector.report_many(pairs, devices, batch_size=batch_size))
    return producer.sent


def folded(collection: Collection, records: list[Rec]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The reports the aggregator's ingest folds from ``records``, in report-id order."""
    made = plan(AggregatorState(collection), WireFormat(collection), 0, records)
    assert made is not None and not made.rejected
    order = np.argsort(made.tagged)
    return made.tagged[order], {k: v[order] for k, v in made.reports.items()}


def test_a_report_through_the_gateway_is_the_record_the_sdk_produces(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    collection = unique_collection("kvue", d=4)
    devices = [f"phone-{i}" for i in range(12)]
    singles = sdk_messages(collection, devices)
    batch = sdk_messages(collection, devices[:5], batch_size=5)
    assert len(singles) == 12 and len(batch) == 1

    async def scenario() -> list[Any]:
        async with gateway([collection], broker.bootstrap_servers, keys) as (_, base):
            url = f"{base}/v1/collections/{collection.name}/reports"
            async with aiohttp.ClientSession() as session:
                for message in [*singles, *batch]:
                    device = message["key"].decode()
                    headers = {**keys.auth(device), "Kvldp-Device": device}
                    status, _, answer = await post(session, url, message["value"], headers)
                    assert (status, answer) == (202, {"accepted": 5 if message in batch else 1})
                async with session.get(f"{base}/metrics") as response:
                    text = await response.text()
            assert f'kvldp_gateway_reports_total{{collection="{collection.name}"}} 17.0' in text
            assert f'kvldp_gateway_requests_total{{collection="{collection.name}",status="202"}} 13.0' in text
        return await topic_records(broker.bootstrap_servers, collection.reports_topic, 13)

    records = asyncio.run(scenario())
    sent = {(m["key"], m["value"]) for m in [*singles, *batch]}
    assert {(r.key, r.value) for r in records} == sent
    assert all(not r.headers for r in records) and all(m["headers"] is None for m in singles)
    through_gateway = folded(collection, [Rec(r.offset, r.timestamp, r.key, r.value) for r in records])
    through_sdk = folded(
        collection,
        [Rec(i, m["timestamp_ms"], m["key"], m["value"]) for i, m in enumerate([*singles, *batch])],
    )
    assert through_gateway[0].size == 17
    np.testing.assert_array_equal(through_gateway[0], through_sdk[0])
    for name, column in through_sdk[1].items():
        np.testing.assert_array_equal(through_gateway[1][name], column)


def test_metrics_on_a_listener_of_their_own_are_off_the_devices_listener(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    collection = unique_collection("kvue", d=4)
    body = sdk_messages(collection, ["d1"])[0]["value"]

    async def scenario() -> None:
        async with gateway(
            [collection], broker.bootstrap_servers, keys, metrics_address=("127.0.0.1", 0)
        ) as (running, base):
            assert running.metrics_port not in (None, running.bound_port)
            async with aiohttp.ClientSession() as session:
                url = f"{base}/v1/collections/{collection.name}/reports"
                assert (await post(session, url, body, keys.auth("d1")))[0] == 202
                async with session.get(f"{base}/metrics") as response:
                    assert response.status == 404
                async with session.get(f"http://127.0.0.1:{running.metrics_port}/metrics") as response:
                    assert response.status == 200
                    text = await response.text()
                async with session.post(f"http://127.0.0.1:{running.metrics_port}/metrics") as response:
                    assert response.status == 405
            assert f'kvldp_gateway_requests_total{{collection="{collection.name}",status="202"}} 1.0' in text

    asyncio.run(scenario())


def test_every_status_of_the_contract(
    broker: EmbeddedBroker, keys: Keys, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    plain = unique_collection("kvue", d=4, max_message_bytes=4096)
    memoized = unique_collection("kvue", d=4, privacy={"memoize": True})
    good = sdk_messages(plain, ["d1"])[0]["value"]
    wire = WireFormat(plain)
    out_of_range = wire.encode_report({"j": plain.d + 3, "s": 1}, ts_ms=int(time.time() * 1000), rid=7)
    expected_reason = wire.decode([out_of_range]).rejected[0][1]
    envelope = msgpack.unpackb(good)
    other_digest = msgpack.packb({**envelope, "cfg": (envelope["cfg"] + 1) % 2**32})
    memo_batch = sdk_messages(memoized, ["m1", "m2"], batch_size=1)
    memo_wire = WireFormat(memoized)
    two_reports = memo_wire.encode_batch(
        memo_wire.decode([m["value"] for m in memo_batch]).reports, ts_ms=int(time.time() * 1000)
    )
    other_keys = Keys(tmp_path / "other")
    tokens_seen: list[str] = []

    def auth(device: str, signer: Keys = keys, **kw: Any) -> dict[str, str]:
        headers = signer.auth(device, **kw)
        tokens_seen.append(headers["Authorization"].split()[1])
        return headers

    async def scenario() -> tuple[list[tuple[str, int, str | None]], str]:
        seen: list[tuple[str, int, str | None]] = []
        async with gateway(
            [plain, memoized], broker.bootstrap_servers, keys, device_rate=0.01, device_burst=3
        ) as (_, base):
            url = f"{base}/v1/collections/{plain.name}/reports"
            async with aiohttp.ClientSession() as session:

                async def expect(
                    what: str,
                    status: int,
                    code: str | None,
                    body: bytes,
                    headers: dict[str, str],
                    target: str = url,
                ) -> dict[str, str]:
                    got, answer_headers, answer = await post(session, target, body, headers)
                    assert got == status, (what, got, answer)
                    assert (answer.get("error") if status != 202 else None) == code, (what, answer)
                    seen.append((what, got, code))
                    return answer_headers

                await expect("accepted", 202, None, good, auth("d1"))
                await expect("malformed", 400, "undecodable", b"\x93garbage", auth("d2"))
                await expect("out of range", 400, expected_reason, out_of_range, auth("d2"))
                await expect(
                    "batch in a memoized collection",
                    400,
                    "invalid_report",
                    two_reports,
                    auth("d3"),
                    f"{base}/v1/collections/{memoized.name}/reports",
                )
                challenge = await expect("no token", 401, "unauthorized", good, MSGPACK)
                assert challenge["WWW-Authenticate"] == 'Bearer error="invalid_token"'
                await expect("expired", 401, "unauthorized", good, auth("d4", ttl=60, now=time.time() - 3600))
                await expect("wrong key", 401, "unauthorized", good, auth("d4", signer=other_keys))
                unsigned = keys.token("d4").rsplit(".", 1)[0] + "."
                none_header = "eyJhbGciOiJub25lIn0"  # {"alg":"none"}
                await expect(
                    "alg=none",
                    401,
                    "unauthorized",
                    good,
                    {"Authorization": f"Bearer {none_header}.{unsigned.split('.')[1]}.", **MSGPACK},
                )
                await expect("device mismatch", 403, "forbidden", good, {**auth("d5"), "Kvldp-Device": "d6"})
                await expect("wrong audience", 403, "forbidden", good, auth("d5", audience="elsewhere"))
                await expect(
                    "unknown collection",
                    404,
                    "unknown_collection",
                    good,
                    auth("d5"),
                    f"{base}/v1/collections/no-such/reports",
                )
                await expect("config digest", 409, "config_mismatch", other_digest, auth("d5"))
                await expect("declared too large", 413, "too_large", b"x" * 5000, auth("d5"))
                await expect(
                    "wrong content type",
                    415,
                    "unsupported_media_type",
                    good,
                    {**auth("d5"), "Content-Type": "application/json"},
                )
                flood = auth("d7")
                for _ in range(3):
                    await expect("within burst", 202, None, good, flood)
                limited = await expect("flooding device", 429, "rate_limited", good, flood)
                assert int(limited["Retry-After"]) >= 1
                await expect("another device still served", 202, None, good, auth("d8"))
                async with session.get(url) as response:
                    assert response.status == 405 and (await response.json())["error"] == "method_not_allowed"
                async with session.get(f"{base}/metrics") as response:
                    metrics = await response.text()
        return seen, metrics

    seen, metrics = asyncio.run(scenario())
    assert {status for _, status, _ in seen} >= {202, 400, 401, 403, 404, 409, 413, 415, 429}
    logs = caplog.text
    key_pem = (keys.directory / "private.pem").read_text()
    for secret in [*tokens_seen, key_pem.splitlines()[1]]:
        assert secret not in logs and secret not in metrics
    assert 'collection="no-such"' not in metrics


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(0) as running:
        yield running


def test_kafka_paused_or_gone_is_503_with_retry_after(own_broker: EmbeddedBroker, keys: Keys) -> None:
    collection = unique_collection("kvue", d=4)
    body = sdk_messages(collection, ["d1"])[0]["value"]
    assert own_broker.process is not None
    pid = own_broker.process.pid

    async def scenario() -> None:
        async with gateway([collection], own_broker.bootstrap_servers, keys, produce_timeout=1.0) as (
            running,
            base,
        ):
            url = f"{base}/v1/collections/{collection.name}/reports"
            async with aiohttp.ClientSession() as session:
                assert (await post(session, url, body, keys.auth("d1")))[0] == 202
                os.kill(pid, signal.SIGSTOP)
                try:
                    status, headers, answer = await post(session, url, body, keys.auth("d2"))
                    assert (status, answer.get("error")) == (503, "unavailable") and int(
                        headers["Retry-After"]
                    ) >= 1
                    async with session.get(f"{base}/readyz") as response:
                        assert response.status == 503
                    async with session.get(f"{base}/healthz") as response:
                        assert response.status == 200
                finally:
                    os.kill(pid, signal.SIGCONT)
                async with session.get(f"{base}/readyz") as response:
                    assert response.status == 200
                assert (await post(session, url, body, keys.auth("d3")))[0] == 202
                own_broker.stop()
                status, headers, answer = await post(session, url, body, keys.auth("d4"))
                assert (status, answer.get("error")) == (503, "unavailable") and "Retry-After" in headers
            text = running.metrics.exposition().decode()
            assert f'kvldp_gateway_produce_errors_total{{collection="{collection.name}"}} 2.0' in text

    asyncio.run(scenario())


#: the hostile-clients test's deadlines (seconds): a head is due within HEAD_TIMEOUT of
#: connecting; from a complete head the answer is due within BODY_TIMEOUT + PRODUCE_TIMEOUT
#: (the gateway's response deadline, see :class:`kvldp.gateway.endpoint.Gateway`)
HEAD_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
PRODUCE_TIMEOUT = 1.0
#: how late a loaded 2-core machine may run the gateway's timer, or the test's own task,
#: beyond a deadline: a cut must come within its deadline plus this margin
LOADED_MARGIN = 3.0


async def raw_exchange(port: int, data: bytes, within: float) -> bytes:
    """Send ``data`` on a fresh connection: the first bytes of the answer, or b"" when the
    server closes or cuts the connection without one; fails if neither happens ``within``
    seconds."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536), within)
    except ConnectionError:
        return b""
    except TimeoutError:
        pytest.fail(f"the gateway neither answered nor closed the connection within {within} s")
    finally:
        writer.close()


def test_hostile_clients_do_not_crash_it_and_others_keep_being_served(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    collection = unique_collection("kvue", d=4, max_message_bytes=4096)
    body = sdk_messages(collection, ["d1"])[0]["value"]
    rng = np.random.default_rng(28)

    async def scenario() -> None:
        async with gateway(
            [collection],
            broker.bootstrap_servers,
            keys,
            head_timeout=HEAD_TIMEOUT,
            body_timeout=BODY_TIMEOUT,
            produce_timeout=PRODUCE_TIMEOUT,
        ) as (
            running,
            base,
        ):
            port = running.bound_port
            assert port is not None
            url = f"{base}/v1/collections/{collection.name}/reports"
            path = f"/v1/collections/{collection.name}/reports"
            token = keys.token("good")
            async with aiohttp.ClientSession() as session:

                async def served() -> None:
                    assert (await post(session, url, body, keys.auth("good")))[0] == 202

                # oversized heads are answered (or cut) at once, at the latest by the head deadline
                head_cut = HEAD_TIMEOUT + LOADED_MARGIN
                huge = await raw_exchange(
                    port,
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * 20000}\r\n\r\n".encode(),
                    head_cut,
                )
                assert huge[:12] in (b"HTTP/1.0 400", b"HTTP/1.1 400", b"HTTP/1.1 431") or huge == b""
                await served()
                many = "".join(f"X-{i}: v\r\n" for i in range(200))
                refused = await raw_exchange(
                    port, f"GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n".encode(), head_cut
                )
                assert refused[:12] in (b"HTTP/1.0 400", b"HTTP/1.1 400", b"HTTP/1.1 431")
                await served()
                # a slow client: half a head, then silence; cut by the head deadline (which
                # counts from the accept, after ``started``), not before it
                started = time.monotonic()
                assert (
                    await raw_exchange(port, f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode(), head_cut) == b""
                )
                assert time.monotonic() - started >= HEAD_TIMEOUT
                # a body promised and never sent: cut by the response deadline, which counts
                # from the complete head
                response_deadline = BODY_TIMEOUT + PRODUCE_TIMEOUT
                slow = (
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/msgpack\r\nContent-Length: 100\r\n\r\nab"
                ).encode()
                started = time.monotonic()
                assert await raw_exchange(port, slow, response_deadline + LOADED_MARGIN) == b""
                assert time.monotonic() - started >= response_deadline
                await served()
                for size in (1, 7, 64, 900):  # random bytes and random msgpack-looking batches
                    garbage = rng.integers(0, 256, size=size, dtype=np.uint8).tobytes()
                    status, _, answer = await post(session, url, garbage, keys.auth(f"g{size}"))
                    assert status == 400 and answer["error"] in ("undecodable", "bad_envelope"), answer
                    bomb = msgpack.packb({**msgpack.unpackb(body), "n": 2**40, "cols": {"j": b"", "s": b""}})
                    status, _, answer = await post(session, url, bomb, keys.auth(f"b{size}"))
                    assert status == 400, answer
                chunked_headers = keys.auth("chunky")  # an async generator body goes out chunked

                async def chunks() -> AsyncIterator[bytes]:
                    for _ in range(10):
                        yield b"z" * 1000

                async with session.post(url, data=chunks(), headers=chunked_headers) as response:
                    assert response.status == 413
                await served()
                async with session.get(f"{base}/healthz") as response:
                    assert response.status == 200

    asyncio.run(scenario())


def test_command_line_prints_its_address_first_and_finishes_requests_in_flight_on_sigterm(
    own_broker: EmbeddedBroker, keys: Keys, tmp_path: Path
) -> None:
    collection = unique_collection("kvue", d=4)
    toml = collection_toml(collection, tmp_path / "c.toml")
    body = sdk_messages(collection, ["d1"])[0]["value"]
    argv = [
        sys.executable,
        "-P",
        "-m",
        "kvldp",
        "gateway",
        "--collection",
        str(toml),
        "--jwks",
        str(keys.jwks),
    ]
    argv += ["--audience", AUDIENCE, "--port", "0", "--bootstrap-servers", own_broker.bootstrap_servers]
    assert own_broker.process is not None
    broker_pid = own_broker.process.pid
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        first = child.stdout.readline().strip()
        assert first.startswith("gateway=http://127.0.0.1:"), first
        base = first.split("=", 1)[1]
        request = (
            f"POST /v1/collections/{collection.name}/reports HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {keys.token('d1')}\r\nContent-Type: application/msgpack\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        read_body = f'kvldp_gateway_request_bytes_total{{collection="{collection.name}"}} {float(len(body))}'

        async def in_flight_at_sigterm() -> bytes:
            async with aiohttp.ClientSession() as session:
                assert (
                    await post(
                        session, f"{base}/v1/collections/{collection.name}/reports", body, keys.auth("d0")
                    )
                )[0] == 202
                os.kill(broker_pid, signal.SIGSTOP)  # Kafka stalls: the next request stays in flight
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", int(base.rsplit(":", 1)[1]))
                    writer.write(request)
                    await writer.drain()

                    async def body_read() -> bool:
                        async with session.get(f"{base}/metrics") as response:
                            return (
                                read_body.replace(f"{float(len(body))}", f"{float(2 * len(body))}")
                                in await response.text()
                            )

                    await eventually(body_read, 10, "the gateway to read the request in flight")
                    child.send_signal(signal.SIGTERM)
                finally:
                    os.kill(broker_pid, signal.SIGCONT)
                answer = await asyncio.wait_for(reader.read(), 15)
                writer.close()
                return answer

        answer = asyncio.run(in_flight_at_sigterm())
        assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
        _, errors = child.communicate(timeout=20)
        assert child.returncode == 0, errors
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()


def test_with_its_own_certificate_it_serves_https_and_says_so(
    broker: EmbeddedBroker, keys: Keys, tls_files: TlsFiles, tmp_path: Path
) -> None:
    collection = unique_collection("kvue", d=4)
    toml = collection_toml(collection, tmp_path / "c.toml")
    body = sdk_messages(collection, ["d1"])[0]["value"]
    argv = [
        sys.executable,
        "-P",
        "-m",
        "kvldp",
        "gateway",
        "--collection",
        str(toml),
        "--jwks",
        str(keys.jwks),
    ]
    argv += ["--audience", AUDIENCE, "--port", "0", "--bootstrap-servers", broker.bootstrap_servers]
    argv += ["--tls-cert", str(tls_files.server_cert_pem), "--tls-key", str(tls_files.server_key_pem)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            first = child.stdout.readline().strip()
            assert first.startswith("gateway=https://127.0.0.1:"), first
            base = first.split("=", 1)[1]

            async def over_tls() -> int:
                trusted = ssl.create_default_context(cafile=str(tls_files.ca_pem))
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as session:
                    url = f"{base}/v1/collections/{collection.name}/reports"
                    return (await post(session, url, body, keys.auth("d1")))[0]

            assert asyncio.run(over_tls()) == 202
            child.send_signal(signal.SIGTERM)
            assert child.wait(timeout=20) == 0
        finally:
            if child.poll() is None:
                child.kill()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--jwks", "missing.json"], "--jwks missing.json: does not exist"),
        (["--jwks", "http://127.0.0.1:1/jwks.json"], "https:// only"),
        (["--tls-cert", "c.toml"], "--tls-cert and --tls-key go together"),
        (["--port", "70000"], "expected 0 to 65535"),
        (["--metrics-port", "-1"], "argument --metrics-port: expected 0 to 65535, got -1"),
        (["--device-rate", "0"], "--device-rate"),
        (["--audience", " "], "--audience must not be empty"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(keys: Keys, tmp_path: Path, flags: list[str], words: str) -> None:
    toml = collection_toml(unique_collection("kvue", d=4), tmp_path / "c.toml")
    base = {
        "--collection": str(toml),
        "--jwks": str(keys.jwks),
        "--audience": AUDIENCE,
        "--bootstrap-servers": "127.0.0.1:1",
        "--port": "0",  # any free one, were a check to come after the bind
    }
    base.update(dict(zip(flags[::2], flags[1::2], strict=True)))
    done = run_kvldp("gateway", *[word for pair in base.items() for word in pair], cwd=tmp_path, timeout=30)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
    assert (
        done.stderr.strip().splitlines()[-1].startswith(("kvldp: error:", "usage:", "kvldp gateway: error:"))
    )
    if not done.stderr.startswith("usage:"):
        assert done.stderr.count("\n") == 1, done.stderr


def test_each_body_gets_its_own_verdict() -> None:
    collection = unique_collection("kvue", d=4)
    check = BodyCheck(collection)
    good = sdk_messages(collection, ["d1", "d2"])
    batch = sdk_messages(collection, ["d1", "d2", "d3"], batch_size=3)[0]["value"]
    envelope = msgpack.unpackb(good[0]["value"])
    mismatch = msgpack.packb({**envelope, "cfg": (envelope["cfg"] + 1) % 2**32})
    now = int(time.time() * 1000)
    bodies = [good[0]["value"], b"\xc1", batch, mismatch, good[1]["value"]]
    verdicts: list[Any] = []
    for body in bodies:
        try:
            verdicts.append(check.reports(body, now))
        except BodyRefused as exc:
            verdicts.append(exc)
    assert verdicts[0] == 1 and verdicts[2] == 3 and verdicts[4] == 1
    assert isinstance(verdicts[1], BodyRefused) and (verdicts[1].status, verdicts[1].code) == (
        400,
        "undecodable",
    )
    assert isinstance(verdicts[3], BodyRefused) and (verdicts[3].status, verdicts[3].code) == (
        409,
        "config_mismatch",
    )
