"""Starting a Kafka client: close it when the start fails, and say in one line why.

aiokafka leaves a client whose ``start()`` raised open (Python then warns "Unclosed
AIOKafkaProducer" at exit), and its errors do not say what the user should change: a TLS
handshake refused for an untrusted certificate surfaces as "Unable to bootstrap from
[...]", a SCRAM login with a wrong password on some brokers as ``KeyError: 'v'``.
:func:`start_or_close` closes the client whatever happened, and turns TLS and SASL
failures into :class:`KafkaStartError`, one line naming the setting to check;
:func:`start_reachable` also turns a cluster that does not answer into
:class:`KafkaUnreachable`, naming its address. The TLS
cause, which aiokafka only logs, is recovered by one connection and TLS handshake of our
own with the first bootstrap server (only after a failure); when that works, a client
with SASL settings was refused its login.

Pure (stdlib only): clients are duck-typed (``start()`` and ``stop()`` or ``close()``), and
aiokafka's SASL and connection errors are recognised by class name, so the device SDK and the aggregator
share this without the pure library importing aiokafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any, Protocol

from kvldp.common.errors import KvldpError
from kvldp.kafka.client_config import KafkaConfig

#: aiokafka's errors for a refused SASL login (a mechanism the broker lacks is told apart)
_SASL_ERRORS = {"SaslAuthenticationFailedError", "IllegalSaslStateError"}
#: how long the diagnostic TLS handshake may take
PROBE_TIMEOUT_S = 5.0


class KafkaStartError(KvldpError):
    """A Kafka client could not start for a reason the user can fix (TLS or SASL settings)."""


class KafkaUnreachable(KafkaStartError):
    """No broker of the bootstrap servers answered (a device SDK's client could not start)."""


def unreachable_message(where: str, exc: BaseException) -> str:
    """One line for a connection to Kafka that failed: ``where`` names the cluster."""
    if "Unable to bootstrap" in str(exc):
        return f"cannot reach Kafka at {where}: no broker answered (is it running, is the address right?)"
    return f"cannot reach Kafka at {where}: {exc}"


class _Client(Protocol):
    """What :func:`start_or_close` needs of a client: aiokafka producers, consumers and admin
    clients all fit."""

    async def start(self) -> None: ...


async def start_or_close(client: _Client, config: KafkaConfig) -> None:
    """``await client.start()``; when it fails, close the client and re-raise — as a
    :class:`KafkaStartError` when the cause is a TLS or SASL setting."""
    try:
        await client.start()
    except BaseException as exc:
        await close_quietly(client)
        if not isinstance(exc, Exception):
            raise
        message = await explain_failure(exc, config)
        if message is None:
            raise
        raise KafkaStartError(message) from None


async def start_reachable(client: _Client, config: KafkaConfig) -> None:
    """:func:`start_or_close`, with aiokafka's connection error (no broker answered) raised
    as :class:`KafkaUnreachable` naming the bootstrap servers: what the device SDK raises,
    so that an application catches one kvldp error instead of the Kafka client's."""
    try:
        await start_or_close(client, config)
    except Exception as exc:
        if type(exc).__name__ != "KafkaConnectionError":
            raise
        raise KafkaUnreachable(unreachable_message(config.describe(), exc)) from None


async def close_quietly(client: object) -> None:
    """Stop or close an aiokafka client, ignoring errors of a client that never started."""
    closer: Any = getattr(client, "stop", None) or getattr(client, "close", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()


async def explain_failure(exc: BaseException, config: KafkaConfig) -> str | None:
    """One line saying which setting to check, or None when the failure is not TLS or
    SASL (the caller keeps the original error)."""
    where = config.describe()
    for cause in _chain(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return _untrusted(cause, where)
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake with {where} failed: {cause.reason or cause}"
        name = type(cause).__name__
        if name == "UnsupportedSaslMechanismError":
            return f"Kafka at {where}: the broker does not offer sasl.mechanism={config.sasl_mechanism}"
        if name in _SASL_ERRORS or _scram_refused(cause, config):
            return (
                f"Kafka at {where}: SASL authentication failed: check sasl.username and sasl.password "
                f"in {config.source}"
            )
    if not (config.uses_tls or config.uses_sasl) or "bootstrap" not in str(exc).lower():
        return None
    probe = await _probe(config)
    if isinstance(probe, ssl.SSLCertVerificationError):
        return _untrusted(probe, where)
    if isinstance(probe, ssl.SSLError):
        return f"TLS handshake with {where} failed: {probe.reason or probe}"
    if probe is None and config.uses_sasl:
        return (
            f"Kafka at {where}: the broker accepts connections but the client could not start: check "
            f"sasl.username, sasl.password and sasl.mechanism in {config.source}"
        )
    return None


def _untrusted(exc: ssl.SSLCertVerificationError, where: str) -> str:
    reason = exc.verify_message or exc.reason or "certificate verify failed"
    return (
        f"TLS: the certificate of Kafka at {where} is not trusted ({reason}): set ssl.ca.location to the "
        "CA that signed it"
    )


def _scram_refused(exc: BaseException, config: KafkaConfig) -> bool:
    """aiokafka's SCRAM client raises ``KeyError('v')`` when the server's final message is
    an error (``e=...``) instead of its signature: the login was refused."""
    return (
        isinstance(exc, KeyError)
        and exc.args == ("v",)
        and bool(config.sasl_mechanism and config.sasl_mechanism.startswith("SCRAM"))
    )


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


async def _probe(config: KafkaConfig) -> BaseException | None:
    """The error of one connection (with its TLS handshake, when the settings use TLS) to
    the first bootstrap server; None when it worked."""
    host, _, port = config.bootstrap_servers.split(",")[0].rpartition(":")
    host = host.strip("[]")
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host, int(port), ssl=config.ssl_context, server_hostname=host if config.uses_tls else None
            ),
            PROBE_TIMEOUT_S,
        )
    except (TimeoutError, OSError) as exc:
        return exc
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return None
