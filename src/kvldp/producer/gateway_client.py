"""The SDK's HTTPS transport: every message a ``POST`` to ``kvldp gateway``.

``POST {endpoint}/v1/collections/{name}/reports`` with the message's bytes as the body
(``Content-Type: application/msgpack``), ``Authorization: Bearer <token>`` and, for a
device id the caller gave, ``Kvldp-Device: <id>`` (the gateway refuses it with 403 when
it is not the token's device). All requests share one aiohttp ``ClientSession``: keep-alive
connections, at most ``max_connections`` of them, a timeout per request, TLS verified
against the system's trusted CAs, a ``ca_file`` or a caller's ``ssl.SSLContext``.
Redirects are not followed (the token would go with them).

What an answer means:

* 2xx: delivered (the gateway answers 202 once Kafka acknowledged the reports).
* 429, 503 (the gateway), 502, 504 (a load balancer in front of it), a refused or broken
  connection, a timeout: sent again — the **same bytes**, so the same report ids, which
  the aggregator counts once — after the backoff of :class:`RetryPolicy`, never sooner
  than the answer's ``Retry-After``; given up after ``RetryPolicy.deadline`` with
  :class:`GatewayUnavailable`. A TLS failure (an untrusted certificate) is not retried.
* 401: the token provider is asked again and the message sent once more; a second 401
  is final.
* anything else: final, :class:`ReportRefused` with the gateway's ``error`` code and
  ``detail`` (400 with the aggregator's validation reason, 403, 404, 409, 413, 415).

The privacy spend of a report is written before it reaches this transport, and a retry
spends nothing: a report that is never delivered has still been paid for, as with Kafka.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import random
import secrets
import ssl
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import aiohttp
from yarl import URL

from kvldp.common.errors import KvldpError
from kvldp.producer.bearer_token import BearerTokens
from kvldp.producer.retry_policy import RetryPolicy, parse_retry_after
from kvldp.producer.transport import Message

#: answers after which the same message is sent again
RETRIED = frozenset({429, 502, 503, 504})
#: bytes of an error answer read (the contract's answers are one short JSON object)
MAX_ANSWER_BYTES = 16 * 1024
#: characters of a server's ``detail`` kept in an exception
MAX_DETAIL = 300
#: concurrent requests (and open connections) by default
MAX_CONNECTIONS = 16
#: seconds one request may take, connecting included
REQUEST_TIMEOUT_S = 30.0

logger = logging.getLogger("kvldp.producer")


class InvalidEndpoint(KvldpError):
    """The gateway's address cannot be used (not http(s), plain http to another host, a
    query or fragment)."""


class DeliveryError(KvldpError):
    """A message the gateway did not take; ``device`` keyed it, it held ``reports``
    reports; ``not_stored`` when it is known that no attempt stored it (every answer was
    a refusal, or TLS failed before any request went out), else the gateway may have
    forwarded an attempt that it then failed to acknowledge."""

    def __init__(self, message: str, device: str, reports: int, not_stored: bool = False) -> None:
        super().__init__(message)
        self.device = device
        self.reports = reports
        self.not_stored = not_stored


class ReportRefused(DeliveryError):
    """The gateway refused a message for good: HTTP ``status``, the answer's ``error`` code
    and one-line ``detail``. Sending it again would be refused again."""

    def __init__(
        self, device: str, reports: int, status: int, error: str, detail: str, not_stored: bool = True
    ) -> None:
        super().__init__(
            f"gateway refused {reports} report(s) of device {device}: {status} {error}"
            + (f": {detail}" if detail else ""),
            device,
            reports,
            not_stored,
        )
        self.status = status
        self.error = error
        self.detail = detail


class GatewayUnavailable(DeliveryError):
    """The gateway could not be reached or kept answering "later" until the retry
    deadline, or its TLS certificate is not trusted."""


@dataclass(frozen=True)
class _Answer:
    """What the gateway answered to one request (status, ``error``, ``detail``, ``Retry-After``)."""

    status: int
    error: str
    detail: str
    retry_after: float | None


def reports_url(endpoint: str, collection: str, *, allow_http: bool = False) -> URL:
    """``{endpoint}/v1/collections/{collection}/reports``; :class:`InvalidEndpoint` for an
    address that is not https (plain http only to this machine, or with ``allow_http``),
    has no host, or carries a query, fragment or credentials."""
    try:
        base = URL(endpoint)
    except (TypeError, ValueError) as exc:
        raise InvalidEndpoint(f"endpoint {endpoint!r}: not a URL ({exc})") from None
    if base.scheme not in ("http", "https") or not base.host:
        raise InvalidEndpoint(f"endpoint {endpoint!r}: expected https://host[:port][/path]")
    if base.query_string or base.fragment or base.user or base.password:
        raise InvalidEndpoint(f"endpoint {endpoint!r}: no query, fragment or credentials in the address")
    if base.scheme == "http" and not allow_http and not _loopback(base.host):
        raise InvalidEndpoint(
            f"endpoint {endpoint!r}: plain http would send the device's token in clear; use https "
            "(plain http goes to this machine only, unless an SDK caller passes allow_http=True)"
        )
    return base.with_path(base.path.rstrip("/")) / "v1" / "collections" / collection / "reports"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _user_agent() -> str:
    try:
        return f"kvldp-sdk/{version('kvldp')}"
    except PackageNotFoundError:
        return "kvldp-sdk"


class GatewayTransport:
    """Posts messages to one collection's reports on a gateway, retrying as the module
    says; one aiohttp ``ClientSession`` from :meth:`start` to :meth:`stop`."""

    def __init__(
        self,
        url: URL,
        tokens: BearerTokens,
        *,
        retry: RetryPolicy | None = None,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT_S,
        ca_file: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if ca_file is not None and ssl_context is not None:
            raise KvldpError("give ca_file or ssl_context, not both")
        if not (isinstance(max_connections, int) and max_connections >= 1):
            raise KvldpError(f"max_connections must be a positive integer, got {max_connections!r}")
        self.url = url
        self.tokens = tokens
        self.retry = retry or RetryPolicy()
        self.max_connections = max_connections
        self.request_timeout = float(request_timeout)
        self._ssl = ssl_context
        if ca_file is not None:
            try:
                self._ssl = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise KvldpError(f"ca_file {ca_file!r}: cannot load it ({exc})") from None
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(max_connections)
        self._jitter = random.Random(secrets.randbits(64))
        #: attempts that will be (or were) followed by another one (for tests and metrics)
        self.retries = 0
        #: whether the current run of retries was logged as a warning (once until a success)
        self._warned = False

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.max_connections, ssl=self._ssl if self._ssl is not None else True
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.request_timeout),
            headers={"Content-Type": "application/msgpack", "User-Agent": _user_agent()},
        )

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, message: Message) -> Awaitable[object]:
        if self._session is None:
            raise KvldpError("the collector is not started (use `async with Collector(...)` or start())")
        return asyncio.ensure_future(self._deliver(message, self._session))

    async def _deliver(self, message: Message, session: aiohttp.ClientSession) -> None:
        device = message.key.decode(errors="replace")
        started = time.monotonic()
        refreshed = False
        retry = 0
        #: whether an attempt may have reached Kafka (no answer, or the gateway's 5xx)
        maybe_stored = False
        while True:
            try:
                answer = await self._post(session, message, device)
            except aiohttp.ClientSSLError as exc:
                raise GatewayUnavailable(
                    f"TLS with the gateway at {self.url.origin()} failed: {_tls_reason(exc)}",
                    device,
                    message.reports,
                    not_stored=not maybe_stored,
                ) from None
            except aiohttp.ClientConnectorError as exc:  # refused before a byte of the request went out
                why, retry_after = _connection_failure(exc, self.request_timeout), None
            except (aiohttp.ClientError, TimeoutError) as exc:
                why, retry_after = _connection_failure(exc, self.request_timeout), None
                maybe_stored = True
            else:
                if answer.status < 300:
                    self._warned = False
                    return
                if answer.status == 401 and not refreshed:
                    refreshed = True
                    logger.info("gateway refused the token of device %s (401): asking for a new one", device)
                    continue
                if answer.status not in RETRIED:
                    raise ReportRefused(
                        device, message.reports, answer.status, answer.error, answer.detail, not maybe_stored
                    )
                why, retry_after = f"{answer.status} {answer.error}", answer.retry_after
                maybe_stored = maybe_stored or answer.status >= 500
            retry += 1
            wait = self.retry.delay(retry, retry_after, self._jitter)
            elapsed = time.monotonic() - started
            if elapsed + wait > self.retry.deadline:
                raise GatewayUnavailable(
                    f"gateway at {self.url.origin()} did not take {message.reports} report(s) of device "
                    f"{device} within {self.retry.deadline:g} s ({retry} attempts; last: {why})",
                    device,
                    message.reports,
                    not_stored=not maybe_stored,
                )
            self.retries += 1
            level = logging.INFO if self._warned else logging.WARNING
            self._warned = True
            logger.log(
                level,
                "gateway at %s: %s; sending again in %.2f s (device %s)",
                self.url.origin(),
                why,
                wait,
                device,
            )
            await asyncio.sleep(wait)

    async def _post(self, session: aiohttp.ClientSession, message: Message, device: str) -> _Answer:
        token = await self.tokens.get(device)
        headers = {"Authorization": f"Bearer {token}"}
        if message.claimed:
            headers["Kvldp-Device"] = device
        async with (
            self._slots,
            session.post(self.url, data=message.value, headers=headers, allow_redirects=False) as response,
        ):
            if response.status < 300:
                await response.read()
                return _Answer(response.status, "", "", None)
            body = await response.content.read(MAX_ANSWER_BYTES)
            error, detail = _error_of(response.status, response.reason, body)
            return _Answer(
                response.status, error, detail, parse_retry_after(response.headers.get("Retry-After"))
            )


def _error_of(status: int, reason: str | None, body: bytes) -> tuple[str, str]:
    """The ``error`` code and one-line ``detail`` of an answer; for a body that is not the
    contract's JSON (a proxy's page), ``http_<status>`` and the reason phrase."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get("error"), str):
        detail = obj.get("detail")
        return obj["error"][:64], _one_line(detail if isinstance(detail, str) else "")
    return f"http_{status}", _one_line(reason or "")


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_DETAIL else line[: MAX_DETAIL - 1] + "…"


def _connection_failure(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.strerror or exc.os_error})"
    return f"connection failed ({type(exc).__name__}{': ' + str(exc) if str(exc) else ''})"


def _tls_reason(exc: aiohttp.ClientSSLError) -> str:
    cause = getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None) or exc
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (
            f"its certificate is not trusted ({cause.verify_message}); trust the CA that signed it "
            "(kvldp produce --ca-file, the SDK's ca_file)"
        )
    return str(getattr(cause, "reason", None) or cause)
