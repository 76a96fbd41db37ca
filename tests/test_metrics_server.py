"""The metrics endpoint against hostile clients on real sockets: each limit of
:class:`kvldp.web.limits.Limits` (sizes, no body, deadlines, the connection bound) cuts
the client it is for, the contract of /metrics (paths, methods, content types, TLS, basic
auth) holds, and closing the server leaves nothing open. Limits are small here so that
every wait is short; each wait is for a condition (a response, a closed socket), bounded."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import socket
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from kvldp.aggregator.exporter import Exporter
from kvldp.aggregator.state import AggregatorState
from kvldp.common.errors import KvldpError
from kvldp.web.limits import Limits
from kvldp.web.security import HttpSecurity
from kvldp.web.server import WebServer

from support.pipeline import unique_collection, wait_for
from support.prometheus import get
from support.tls import TlsFiles

pytestmark = pytest.mark.asyncio

#: generous upper bound of every wait for something that must happen at once
PROMPT = 5.0
#: slack on a deadline: a shared 2-core machine may run the server's timer late
SLACK = 3.0


# ------------------------------------------------------------------ helpers
@contextlib.asynccontextmanager
async def serving(
    limits: Limits, security: HttpSecurity | None = None
) -> AsyncIterator[tuple[WebServer, int]]:
    """An exporter of an empty collection serving /metrics within ``limits``."""
    collection = unique_collection("kvue", 3)
    state = AggregatorState(collection)
    exporter = Exporter(collection, lambda: state)
    port = await exporter.serve("127.0.0.1", 0, security, limits)
    assert exporter.server is not None
    try:
        yield exporter.server, port
    finally:
        await exporter.close()


@contextlib.asynccontextmanager
async def client(
    port: int, tls: ssl.SSLContext | None = None, sock: socket.socket | None = None
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """One client connection, closed at the end whatever the server did to it."""
    if sock is not None:
        reader, writer = await asyncio.open_connection(sock=sock)
    else:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1" if tls else None
        )
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


async def until_closed(reader: asyncio.StreamReader, bound: float) -> bytes:
    """Everything the server sends until it closes the connection (end of file or a
    reset); fails if the connection is still open after ``bound`` seconds."""
    data = bytearray()
    try:
        async with asyncio.timeout(bound):
            while chunk := await reader.read(1 << 16):
                data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the connection is still open after {bound} s")
    return bytes(data)


class _Recorded:
    """Bytes read from a socket, for http.client's response parser."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def makefile(self, *_: Any) -> io.BytesIO:
        return io.BytesIO(self.raw)


def parse(raw: bytes) -> http.client.HTTPResponse:
    response = http.client.HTTPResponse(_Recorded(raw))  # type: ignore[arg-type]
    response.begin()
    return response


async def read_response(reader: asyncio.StreamReader) -> http.client.HTTPResponse:
    """One response with a Content-Length, the connection left open."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PROMPT)
    length = int(parse(head).getheader("Content-Length", "0"))
    return parse(head + await asyncio.wait_for(reader.readexactly(length), PROMPT))


def request(path: str = "/metrics", *headers: str, method: str = "GET", body: bytes = b"") -> bytes:
    lines = "".join(f"{header}\r\n" for header in headers)
    return f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{lines}\r\n".encode() + body


async def answer_and_close(port: int, raw: bytes) -> http.client.HTTPResponse:
    """Send ``raw``; the server must answer and close the connection."""
    async with client(port) as (reader, writer):
        writer.write(raw)
        return parse(await until_closed(reader, PROMPT))


# ------------------------------------------------------------------ the contract
async def test_paths_methods_and_content_types() -> None:
    async with serving(Limits()) as (_, port):
        async with client(port) as (reader, writer):  # one kept-alive connection for all
            writer.write(request("/metrics"))
            metrics = await read_response(reader)
            assert metrics.status == 200 and metrics.getheader("Content-Type") == CONTENT_TYPE_LATEST
            assert b"kvldp_reports_total" in metrics.read()
            writer.write(request("/estimates"))
            estimates = await read_response(reader)
            assert estimates.status == 200 and estimates.getheader("Content-Type") == "application/json"
            writer.write(request("/nowhere"))
            assert (await read_response(reader)).status == 404
            writer.write(request("/metrics", method="HEAD"))
            head = parse(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PROMPT))
            assert head.status == 200 and int(head.getheader("Content-Length", "0")) > 0
        for method in ("POST", "PUT", "DELETE", "OPTIONS"):
            for path in ("/metrics", "/nowhere"):
                refused = await answer_and_close(port, request(path, "Connection: close", method=method))
                assert refused.status == 405 and refused.getheader("Allow") == "GET, HEAD", (method, path)


async def test_tls_and_basic_auth(tls_files: TlsFiles) -> None:
    security = HttpSecurity(
        str(tls_files.server_cert_pem), str(tls_files.server_key_pem), "prometheus", "pw:1"
    )
    async with serving(Limits(), security) as (_, port):
        context = ssl.create_default_context(cafile=str(tls_files.ca_pem))
        url = f"https://127.0.0.1:{port}/metrics"
        for auth in (None, ("prometheus", "wrong"), ("someone", "pw:1"), ("prometheus", "pw:")):
            assert (await asyncio.to_thread(get, url, context, auth))[0] == 401, auth
        async with client(port, context) as (reader, writer):
            writer.write(request("/metrics", "Authorization: Bearer cHJvbWV0aGV1czpwdzox"))
            challenged = await read_response(reader)
            assert challenged.status == 401
            assert challenged.getheader("WWW-Authenticate") == 'Basic realm="kvldp"'
        status, body = await asyncio.to_thread(get, url, context, ("prometheus", "pw:1"))
        assert status == 200 and b"kvldp_reports_total" in body
        with pytest.raises(OSError):  # plain HTTP to the TLS port
            await asyncio.to_thread(get, f"http://127.0.0.1:{port}/metrics")


async def test_a_failing_handler_answers_500_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    server = WebServer([web.get("/broken", broken)], ("GET",))
    port = await server.start("127.0.0.1", 0)
    try:
        async with client(port) as (reader, writer):
            writer.write(request("/broken"))
            assert (await read_response(reader)).status == 500
            writer.write(request("/broken", "Connection: close"))  # the connection still serves
            assert parse(await until_closed(reader, PROMPT)).status == 500
    finally:
        await server.close()
    failures = [r for r in caplog.records if r.name == "kvldp.web" and r.exc_info]
    assert len(failures) == 2 and "GET /broken failed" in failures[0].getMessage()


# ------------------------------------------------------------------ sizes and bodies
SIZES = Limits(max_line_size=256, max_field_size=256, max_headers=8)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (request("/metrics?" + "a" * 300), 400),  # request line above max_line_size
        (request("/metrics", "X-Big: " + "b" * 300), 400),  # header above max_field_size
        (request("/metrics", *(f"X-{i}: {i}" for i in range(12))), 400),  # above max_headers
        (request("/metrics", *(f"X-{i}: {i}" for i in range(6)), "Connection: close"), 200),  # at it
        (request("/metrics?" + "a" * 200, "Connection: close"), 200),  # a long line below the bound
        (request("/metrics", "Content-Length: 0", "Connection: close"), 200),  # no body
        (request("/metrics", "Content-Length: 5", body=b"hello"), 413),  # a body
        (request("/metrics", "Transfer-Encoding: chunked", body=b"5\r\nhello\r\n0\r\n\r\n"), 413),
        (request("/metrics", "Content-Length: 1000000"), 413),  # refused before it is sent
    ],
)
async def test_request_sizes_and_bodies(raw: bytes, status: int) -> None:
    async with serving(SIZES) as (_, port):
        assert (await answer_and_close(port, raw)).status == status


# ------------------------------------------------------------------ deadlines
@pytest.mark.parametrize("kept_alive", [False, True], ids=["first-request", "after-a-request"])
async def test_a_slowloris_client_is_cut_at_the_head_deadline(kept_alive: bool) -> None:
    """One header byte every 50 ms: the head never completes and the connection is cut
    ``head_timeout`` after it opened (or, kept alive, after the first byte of the next
    request), however many bytes keep arriving."""
    limits = Limits(head_timeout=1.5, keepalive_timeout=60.0, response_timeout=60.0)
    async with serving(limits) as (server, port), client(port) as (reader, writer):
        if kept_alive:
            writer.write(request("/metrics"))
            assert (await read_response(reader)).status == 200
        started = time.monotonic()
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        sent = 0

        async def drip() -> None:
            nonlocal sent
            with contextlib.suppress(ConnectionError):
                while not writer.is_closing():
                    await asyncio.sleep(0.05)  # the client's pace, not a wait of the test
                    writer.write(b"z")
                    await writer.drain()
                    sent += 1

        dripping = asyncio.create_task(drip())
        data = await until_closed(reader, limits.head_timeout + SLACK)
        elapsed = time.monotonic() - started
        dripping.cancel()
        await asyncio.gather(dripping, return_exceptions=True)
        assert data == b""  # no answer: the head never completed
        assert limits.head_timeout * 0.9 <= elapsed, elapsed
        assert sent >= 10, sent  # bytes kept coming until the cut
        await wait_for(lambda: server.open_connections == 0, PROMPT, "the server to drop the connection")


async def test_a_tls_client_that_never_shakes_hands_is_cut_at_the_head_deadline(tls_files: TlsFiles) -> None:
    security = HttpSecurity(str(tls_files.server_cert_pem), str(tls_files.server_key_pem))
    limits = Limits(head_timeout=1.0, keepalive_timeout=60.0)
    async with serving(limits, security) as (server, port), client(port) as (reader, _):
        opened = time.monotonic()
        await wait_for(lambda: server.open_connections == 1, PROMPT, "the connection to be counted")
        assert await until_closed(reader, limits.head_timeout + SLACK) == b""
        assert time.monotonic() - opened >= limits.head_timeout * 0.9
        await wait_for(lambda: server.open_connections == 0, PROMPT, "the server to drop the connection")


async def test_an_idle_kept_alive_connection_is_closed_after_the_keepalive_timeout() -> None:
    limits = Limits(keepalive_timeout=1.0, head_timeout=60.0)
    async with serving(limits) as (server, port), client(port) as (reader, writer):
        writer.write(request("/metrics"))
        assert (await read_response(reader)).status == 200
        idle_since = time.monotonic()
        assert await until_closed(reader, limits.keepalive_timeout + SLACK) == b""
        assert time.monotonic() - idle_since >= limits.keepalive_timeout * 0.9
        await wait_for(lambda: server.open_connections == 0, PROMPT, "the server to drop the connection")


BIG = 32 << 20


@contextlib.asynccontextmanager
async def serving_big(limits: Limits) -> AsyncIterator[tuple[WebServer, int]]:
    """A server whose /big answers BIG bytes (more than the sockets' buffers hold)."""

    async def big(_: web.Request) -> web.Response:
        return web.Response(body=b"x" * BIG)

    server = WebServer([web.get("/big", big)], ("GET",), limits)
    port = await server.start("127.0.0.1", 0)
    try:
        yield server, port
    finally:
        await server.close()


async def not_reading(port: int) -> socket.socket:
    """A connected socket with a small receive buffer, for a client that stops reading."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def test_a_reader_that_does_not_read_is_cut_at_the_response_deadline() -> None:
    """A 32 MiB answer to a client that stops reading: the connection is cut
    ``response_timeout`` after the request, with most of the answer never sent."""
    limits = Limits(response_timeout=1.0, head_timeout=60.0, keepalive_timeout=60.0)
    async with serving_big(limits) as (server, port), client(port, sock=await not_reading(port)) as stream:
        reader, writer = stream
        asked = time.monotonic()
        writer.write(request("/big"))  # the client's buffer fills (64 KiB) and it stops reading
        await wait_for(lambda: server.open_connections == 0, limits.response_timeout + SLACK, "the cut")
        assert time.monotonic() - asked >= limits.response_timeout * 0.9
        received = await until_closed(reader, PROMPT)
        assert len(received) < BIG // 2


async def test_a_response_outlasting_the_head_deadline_is_bound_by_its_own_deadline() -> None:
    """The connection's timer still points at the (earlier) head deadline while the
    response is written: when it fires, the later response deadline holds, and a client
    that pauses reading for several head deadlines receives the whole answer."""
    limits = Limits(head_timeout=0.3, response_timeout=60.0, keepalive_timeout=60.0)
    async with serving_big(limits) as (_, port), client(port, sock=await not_reading(port)) as stream:
        reader, writer = stream
        writer.write(request("/big", "Connection: close"))
        await asyncio.sleep(limits.head_timeout * 4)  # the client pauses: part of the scenario
        received = await until_closed(reader, PROMPT + SLACK)
        assert received.startswith(b"HTTP/1.1 200") and received.endswith(b"x" * 1024)
        assert len(received) > BIG


# ------------------------------------------------------------------ connections
async def test_a_flood_of_connections_is_refused_beyond_the_bound_and_scrapes_work_after() -> None:
    limits = Limits(max_connections=4, head_timeout=60.0)
    async with serving(limits) as (server, port), contextlib.AsyncExitStack() as stack:
        flood = [await stack.enter_async_context(client(port)) for _ in range(200)]
        watches = [asyncio.create_task(until_closed(reader, 60.0)) for reader, _ in flood]
        await wait_for(lambda: sum(w.done() for w in watches) == 196, PROMPT, "196 connections refused")
        assert server.open_connections == 4
        assert all(w.result() == b"" for w in watches if w.done())
        # a scrape during the flood is refused as well
        assert await answer_and_close_raw(port, request("/metrics")) == b""
        await stack.aclose()  # the flood stops
        await asyncio.gather(*watches, return_exceptions=True)
        await wait_for(lambda: server.open_connections == 0, PROMPT, "the flood's connections to close")
        scraped = await answer_and_close(port, request("/metrics", "Connection: close"))
        assert scraped.status == 200


async def answer_and_close_raw(port: int, raw: bytes) -> bytes:
    async with client(port) as (reader, writer):
        writer.write(raw)
        return await until_closed(reader, PROMPT)


async def test_at_the_bound_an_idle_kept_alive_connection_makes_room() -> None:
    limits = Limits(max_connections=2, keepalive_timeout=60.0, head_timeout=60.0)
    async with serving(limits) as (server, port), client(port) as first, client(port) as second:
        for reader, writer in (first, second):
            writer.write(request("/metrics"))
            assert (await read_response(reader)).status == 200
        assert server.open_connections == 2
        scraped = await answer_and_close(port, request("/metrics", "Connection: close"))
        assert scraped.status == 200
        watches = [asyncio.create_task(until_closed(reader, 60.0)) for reader, _ in (first, second)]
        done, pending = await asyncio.wait(watches, timeout=PROMPT, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        assert len(done) == 1, "one idle connection was cut to make room"


# ------------------------------------------------------------------ start and stop
async def test_closing_cuts_every_connection_promptly(tls_files: TlsFiles) -> None:
    """Kept alive, half a head, no TLS handshake yet: close() returns at once and every
    client sees its connection end. close() waits (at most the grace) only for answers in
    flight, and there is none: it must return before the grace could have passed, which
    is longer than a loaded machine takes to cut three connections (milliseconds)."""
    limits = Limits(head_timeout=60.0, keepalive_timeout=60.0, shutdown_grace=10.0)
    security = HttpSecurity(str(tls_files.server_cert_pem), str(tls_files.server_key_pem))
    context = ssl.create_default_context(cafile=str(tls_files.ca_pem))
    collection = unique_collection("kvue", 3)
    state = AggregatorState(collection)
    exporter = Exporter(collection, lambda: state)
    port = await exporter.serve("127.0.0.1", 0, security, limits)
    assert exporter.server is not None
    server = exporter.server
    async with client(port, context) as kept, client(port, context) as half, client(port) as shaking:
        kept[1].write(request("/metrics"))
        assert (await read_response(kept[0])).status == 200
        half[1].write(b"GET /metrics HTTP/1.1\r\n")
        await wait_for(lambda: server.open_connections == 3, PROMPT, "three connections")
        started = time.monotonic()
        await exporter.close()
        assert time.monotonic() - started < limits.shutdown_grace
        assert server.open_connections == 0
        for reader, _ in (kept, half, shaking):
            await until_closed(reader, PROMPT)


async def test_closing_cuts_a_reader_that_does_not_read_after_the_grace() -> None:
    limits = Limits(response_timeout=60.0, shutdown_grace=1.0)
    async with serving_big(limits) as (server, port), client(port, sock=await not_reading(port)) as stream:
        reader, writer = stream
        writer.write(request("/big"))
        await wait_for(lambda: server.open_connections == 1, PROMPT, "the connection")
        await reader.readexactly(1 << 16)  # the answer is being written
        started = time.monotonic()
        await server.close()
        # the answer in flight is given the grace, then cut: not left to its response
        # deadline (60 s)
        closing = time.monotonic() - started
        assert limits.shutdown_grace <= closing < limits.shutdown_grace + SLACK, closing
        assert server.open_connections == 0
        assert len(await until_closed(reader, PROMPT)) < BIG // 2


async def test_a_busy_port_is_one_clear_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = WebServer([], ("GET",))
        with pytest.raises(KvldpError, match=f"cannot listen on 127.0.0.1:{port}"):
            await server.start("127.0.0.1", port)
        await server.close()


async def test_unreadable_tls_files_are_one_clear_error(tls_files: TlsFiles) -> None:
    security = HttpSecurity(str(tls_files.server_key_pem), str(tls_files.server_key_pem))
    with pytest.raises(KvldpError, match="cannot be loaded"):
        await WebServer([], ("GET",), security=security).start("127.0.0.1", 0)


@pytest.mark.parametrize("name", ["max_headers", "head_timeout", "max_connections", "max_body"])
async def test_limits_refuse_nonsense(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Limits(**{name: -1})
    if name != "max_body":
        with pytest.raises(ValueError, match=name):
            Limits(**{name: 0})
