"""The device SDK: perturb locally, encode, publish. Raw values never leave it.

``Collector(collection, bootstrap_servers=...)`` — or, for a secured cluster,
``Collector(collection, kafka_config="client.properties")`` (see
:mod:`kvldp.kafka.client_config`) — maps key names to indices, normalises
raw values into [-1, 1] with the collection's ``value_range`` (see
:mod:`kvldp.producer.pairs`), perturbs with the
collection's mechanism (from :mod:`common`) using an RNG seeded from the operating
system — unpredictable to the server — and publishes msgpack reports (see
:mod:`kvldp.common.messages.wire`) to ``kvldp.<name>.reports`` keyed by device id, so one device's
reports stay in one partition. Every report carries a random non-zero 64-bit report id
(``rid``, from the OS entropy pool whatever ``rng`` is) so that the aggregator counts a
report the producer had to resend only once.

``Collector(collection, endpoint="https://gateway.example", token=...)`` sends the same
messages to ``kvldp gateway`` over HTTPS instead of Kafka
(:mod:`kvldp.producer.gateway_client`): devices that cannot be given Kafka credentials
present a bearer token, and the gateway keys their reports by the token's device.
Everything above the transport (:mod:`kvldp.producer.transport`) is one code path, so
perturbing, the spending rule, memoization and report ids are the same either way; a
report the gateway must be sent again goes out as the same bytes. Interactive
collections need the control topic and stay on Kafka.

A send counts as done when the broker acknowledged it with the collector's ``acks``:
``"all"`` (the default) waits until every in-sync replica holds the report, so a leader
failover cannot lose it; ``1`` waits for the leader only (a failover right after the
acknowledgement loses the report); ``0`` waits for nothing (fire-and-forget telemetry).

A gateway (or a simulator) that speaks for many devices may pack up to ``batch_size``
reports per Kafka message; each batch stays under the collection's message size cap.
Some collections need one report per message (:mod:`kvldp.producer.batching`).

A collection with a ``[privacy]`` table makes every device follow the spending rule of
:mod:`kvldp.common.spec.privacy` (memoized re-sends, ``lifetime_epsilon``, one report per
``report_period``), with the device's own state in a file (``state_path``, see
:mod:`kvldp.producer.device_state`) or in memory, and one state per other device id a
gateway or simulator reports for, in memory or one file each under ``state_dir``. A state
file may be shared by several processes: each change is made under the file's lock, to
what the file holds. Memoized and period-limited reports go out one per
message, keyed by their device id, because the aggregator tells devices apart by the Kafka
key. With ``privacy.instantaneous_epsilon`` every send of a memoized report, the first
and every re-send, is the stored report randomized again with fresh randomness
(:mod:`kvldp.common.channel.instantaneous`), so no two sends of a state are alike; each reveals
at most ``instantaneous_epsilon`` about the device's input, and a state still costs the
collection's epsilon once. Report times (the wire ``ts``, the Kafka record timestamp and the report period)
come from ``clock``. Collections without a ``[privacy]`` table take the vectorised path
that perturbs whole blocks of devices at once.

A collection whose aggregator takes at most ``aggregate.max_reports_per_device`` reports
per device and ``budget_window`` is kept the same way: every device counts what it sent in
the window (:func:`kvldp.producer.device_state.server_budget`), and a report the
aggregator would refuse as ``budget_exceeded`` is not sent and costs nothing
(``SKIPPED_BUDGET``). A count kept in memory only is lost on a restart, after which the
aggregator may refuse what the device sends again: the collector warns once when that
can happen.

An interactive collection (PrivKVM) reports in rounds: the collector follows the
collection's control topic (:mod:`kvldp.producer.control_follower`) and every report is for the open
round, perturbed with the means published for it and tagged with their digest. Each
device reports at most once per round and spends that round's epsilon
(:meth:`kvldp.producer.device_state.DeviceState.round_report`); once the last round closed,
nothing is sent (``ROUNDS_DONE``). Its reports go out one per message, keyed by device.

:class:`Collector` is the SDK's one entry point, and composes a part per job:
:mod:`kvldp.producer.destination` checks the connection settings and opens the transport;
:mod:`kvldp.producer.accounts` keeps the privacy states of the devices it reports for;
:mod:`kvldp.producer.perturbing` decides, device by device, what a block of devices
reports and perturbs it; :mod:`kvldp.producer.publisher` gives the reports their ids,
packs them into messages and hands those to the transport; and
:mod:`kvldp.producer.delivery` keeps what became of every message, which
:meth:`Collector.flush` waits for.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np
from aiokafka import AIOKafkaProducer
from numpy.typing import NDArray

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import load_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import ReportBatch, batch_len
from kvldp.common.files.file_lock import LOCK_TIMEOUT_S
from kvldp.common.messages.control_record import Control, is_interactive
from kvldp.common.messages.wire import WireFormat
from kvldp.common.spec.collection_fields import InvalidCollection
from kvldp.common.spec.privacy import PrivacyBudgetExhausted
from kvldp.kafka.client_config import KafkaConfig
from kvldp.producer.accounts import DeviceAccounts
from kvldp.producer.batching import reports_per_message
from kvldp.producer.bearer_token import DeviceTokenProvider, TokenProvider
from kvldp.producer.control_follower import ControlFollower
from kvldp.producer.delivery import InFlight
from kvldp.producer.destination import Destination
from kvldp.producer.device_state import FleetSummary, ReportStatus
from kvldp.producer.gateway_client import MAX_CONNECTIONS, REQUEST_TIMEOUT_S
from kvldp.producer.pairs import device_key, users_from_pairs
from kvldp.producer.perturbing import Perturber
from kvldp.producer.publisher import Publisher
from kvldp.producer.retry_policy import RetryPolicy
from kvldp.producer.truncation import TruncationWarner

#: devices perturbed per vectorised step
PERTURB_BLOCK = 4096
#: seconds a device waits for the open round of an interactive collection
CONTROL_TIMEOUT_S = 60.0

logger = logging.getLogger("kvldp.producer")


def secure_rng() -> np.random.Generator:
    """A generator seeded from the OS entropy pool: unpredictable to the server (docs/mechanisms.md,
    *Primitives*)."""
    return np.random.default_rng(secrets.randbits(128))


class Collector:
    """Publishes locally perturbed reports of one collection.

    ``state_path`` keeps this device's privacy state (secret, memo table, ledger) in a
    file across restarts; without it the state lives in memory, and for a collection with
    a ``[privacy]`` table the first report logs a warning (logger ``kvldp.producer``) that
    spending is not remembered across restarts. Collections without the table have
    nothing to enforce and log nothing (this device's reports are still counted for
    :meth:`privacy_spent`). For a PCKV collection, a device holding more pairs than the
    collection's ``ell`` is warned about once (:mod:`kvldp.producer.truncation`). The states of other device ids a gateway or simulator reports
    for live in memory, for the life of this collector, or with ``state_dir`` one file
    each in that directory (created if missing); in memory, where the aggregator limits
    reports per device, the first of them logs a warning that reports sent again for them
    after a restart may be refused. ``warn_unsaved=False`` silences both warnings (a
    simulation against topics nobody else wrote to). Processes may share a state file
    (or ``state_dir``): every change waits for the file's lock, at most
    ``state_lock_timeout`` seconds (then
    :class:`~kvldp.common.files.file_lock.LockTimeout`, nothing sent or spent). ``clock`` (a callable returning
    seconds since the epoch, default :func:`time.time`) gives report times, and so the
    ``report_period`` a report falls in: a test or a simulation passes its own to step
    through periods without waiting.

    Kafka (``bootstrap_servers`` or ``kafka_config``, with ``acks``) or the HTTPS gateway
    (``endpoint``), never both. ``request_timeout`` (seconds) bounds how long a message
    waits for Kafka's acknowledgement (or a gateway request for its answer) before it
    fails. A Kafka cluster that does not answer makes :meth:`start` raise
    :class:`~kvldp.kafka.client_start.KafkaUnreachable` (a
    :class:`~kvldp.common.errors.KvldpError` naming the bootstrap servers). What became
    of the reports handed over so far is counted in :attr:`deliveries`. With
    ``endpoint``: ``token`` (a string, or a callable
    returning a string or an awaitable one, asked before every request) or ``token_for``
    (a callable of the device id, for a process reporting for many devices);
    ``ca_file`` or ``ssl_context`` for a gateway whose certificate the system does not
    trust; ``retry`` (:class:`~kvldp.producer.retry_policy.RetryPolicy`) and
    ``max_connections``; ``allow_http`` for plain http
    to another machine (tokens then cross the network in clear). The device id the caller
    gave (``device_id``, or the ids of :meth:`report_many`) is sent as ``Kvldp-Device``,
    which the gateway checks against the token. A message the gateway refuses for good
    raises :class:`~kvldp.producer.gateway_client.ReportRefused` from :meth:`flush` (and
    so from :meth:`stop`); its reports were paid for, like a report Kafka never took.
    """

    def __init__(
        self,
        collection: Collection | str | Path,
        bootstrap_servers: str | None = None,
        rng: np.random.Generator | None = None,
        device_id: str | None = None,
        client_id: str = "kvldp-producer",
        producer: AIOKafkaProducer | None = None,
        state_path: str | Path | None = None,
        clock: Callable[[], float] = time.time,
        control_timeout: float = CONTROL_TIMEOUT_S,
        *,
        kafka_config: KafkaConfig | str | Path | Mapping[str, object] | None = None,
        acks: int | str = "all",
        endpoint: str | None = None,
        token: str | TokenProvider | None = None,
        token_for: DeviceTokenProvider | None = None,
        ca_file: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        retry: RetryPolicy | None = None,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT_S,
        allow_http: bool = False,
        warn_unsaved: bool = True,
        state_dir: str | Path | None = None,
        state_lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> None:
        destination = Destination(
            bootstrap_servers=bootstrap_servers,
            kafka_config=kafka_config,
            producer=producer,
            acks=acks,
            client_id=client_id,
            endpoint=endpoint,
            token=token,
            token_for=token_for,
            ca_file=ca_file,
            ssl_context=ssl_context,
            retry=retry,
            max_connections=max_connections,
            request_timeout=request_timeout,
            allow_http=allow_http,
        )
        self.collection = collection if isinstance(collection, Collection) else load_collection(collection)
        #: where and how to connect (``bootstrap_servers`` overrides the config's address);
        #: None with an ``endpoint``
        self.kafka = destination.kafka(self.collection)
        self.wire = WireFormat(self.collection)
        self.rng = rng if rng is not None else secure_rng()
        self.clock = clock
        self._accounts = DeviceAccounts(
            self.collection, device_id, state_path, state_dir, state_lock_timeout, warn_unsaved
        )
        #: this device's privacy state; its id is the one this SDK instance reports under
        #: (the Kafka key): ``device_id``, else the one stored in ``state_path``, else random
        self.state = self._accounts.own
        self.device_id = self.state.device_id
        #: states of the other device ids this collector reports for (gateways, simulators)
        self.fleet = self._accounts.fleet
        #: warns once per device whose pairs PCKV's ell truncates
        self.truncation = TruncationWarner(self.collection, logger)
        self._perturber = Perturber(self.wire, self._accounts, self.rng, self.truncation)
        self.acks = acks
        #: where the messages go: the collection's reports topic, or the gateway
        self.transport = destination.transport(self.collection, self.kafka)
        self._in_flight = InFlight(self.collection.name)
        #: what became of the reports handed to the transport, counted as each settles
        self.deliveries = self._in_flight.deliveries
        # report ids never from ``rng``: two simulators seeded alike must not share them
        unclaimed = None if device_id is not None else device_key(self.device_id)
        self._publisher = Publisher(self.wire, self.transport, self._in_flight, secure_rng(), unclaimed)
        self.sent_reports = 0
        #: what happened to every report of :meth:`publish_users` (and so :meth:`report` and
        #: :meth:`report_many`) over this collector's life
        self.outcomes = FleetSummary()
        #: the open round of an interactive collection (None for the others)
        self.control = (
            ControlFollower(self.collection, self.kafka)
            if self.kafka is not None and is_interactive(self.collection)
            else None
        )
        self.control_timeout = control_timeout

    @property
    def bootstrap_servers(self) -> str | None:
        """The Kafka address this collector connects to (None when it sends to an endpoint)."""
        return None if self.kafka is None else self.kafka.bootstrap_servers

    @property
    def sent_messages(self) -> int:
        """Messages handed to the transport."""
        return self._publisher.messages

    async def start(self) -> None:
        """Connect (a failed start closes every client it opened; TLS and SASL failures
        raise :class:`kvldp.kafka.client_start.KafkaStartError`, one line naming the setting)."""
        await self.transport.start()
        if self.control is not None:
            try:
                await self.control.start()
            except BaseException:
                await self.transport.stop()
                raise

    async def stop(self) -> None:
        try:
            await self.flush()
        finally:
            if self.control is not None:
                await self.control.stop()
            await self.transport.stop()

    async def __aenter__(self) -> Collector:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def users_from_pairs(self, devices: Iterable[Mapping[str, float]]) -> KVData:
        return users_from_pairs(self.collection, devices)

    def privacy_spent(self, device_id: str | bytes | int | None = None) -> float:
        """Epsilon spent on this collection by this device, or by another ``device_id`` this
        collector reported for (those are only counted for collections with a ``[privacy]``
        table)."""
        return self._accounts.spent(device_id)

    def privacy_remaining(self, device_id: str | bytes | int | None = None) -> float:
        """Epsilon left under ``lifetime_epsilon`` (``math.inf`` without one)."""
        return self._accounts.remaining(device_id)

    async def flush(self) -> None:
        """Wait until every message sent so far is delivered: acknowledged by the broker
        with this collector's ``acks`` (by default every in-sync replica holds it), or
        accepted by the gateway. Through an endpoint, a message the gateway refused for
        good raises :class:`~kvldp.producer.gateway_client.ReportRefused` (its ``error``
        code and ``detail``), one it never took :class:`~kvldp.producer.gateway_client.GatewayUnavailable`,
        once every other message of the flush is settled (the first failure is raised; the
        others, where their error differs from it, are logged as warnings, one per
        distinct error, so that a refusal every message met is one line). A Kafka message that is
        not acknowledged within ``request_timeout`` raises the Kafka client's error.
        Cancelling a flush leaves its messages pending for the next one."""
        await self._in_flight.settle()

    async def report(
        self, pairs: Mapping[str, float], device_id: str | bytes | int | None = None
    ) -> ReportStatus:
        """Perturb one device's pairs (key name -> raw value) and publish one report, keyed
        by ``device_id`` (default: this collector's id).

        Returns SENT (a report that cost epsilon), RESENT (a memoized state sent again,
        free; randomized again with ``privacy.instantaneous_epsilon``), SKIPPED_PERIOD (nothing sent: this device already reported in this
        ``report_period``) or SKIPPED_BUDGET (nothing sent, nothing spent: this device
        already sent ``aggregate.max_reports_per_device`` reports in this
        ``budget_window``, and the aggregator would refuse one more); for an interactive
        collection SKIPPED_ROUND (already reported in the open round) or ROUNDS_DONE (the
        last round closed). Raises :class:`PrivacyBudgetExhausted` (nothing sent, state
        untouched) if the report would take the device past ``lifetime_epsilon``.
        The status says what was spent and handed to the transport; whether the report was
        delivered (or refused by the gateway) is known at :meth:`flush`.
        """
        device = device_id if device_id is not None else self.device_id
        summary = await self.publish_users(self.users_from_pairs([pairs]), [device])
        if summary.skipped_round:
            return ReportStatus.SKIPPED_ROUND
        if summary.rounds_done:
            return ReportStatus.ROUNDS_DONE
        if summary.exhausted:
            state = self._accounts.state_of(device)
            raise PrivacyBudgetExhausted(
                f"collection {self.collection.name}: a report would take device {state.device_id} past "
                f"lifetime_epsilon={self.collection.privacy.lifetime_epsilon:g} "
                f"(spent {state.spent(self.collection):g}); nothing was sent"
            )
        if summary.resent:
            return ReportStatus.RESENT
        if summary.skipped_budget:
            return ReportStatus.SKIPPED_BUDGET
        return ReportStatus.SKIPPED_PERIOD if summary.skipped_period else ReportStatus.SENT

    async def report_many(
        self,
        devices: Sequence[Mapping[str, float]],
        device_ids: Sequence[str | bytes | int] | None = None,
        batch_size: int = 1,
    ) -> FleetSummary:
        """Perturb many devices' pairs and publish them, ``batch_size`` reports per message
        (a gateway). Without ``device_ids`` every report is keyed by this collector's id.
        The spending rule applies per device id as in :meth:`publish_users`."""
        ids = list(device_ids) if device_ids is not None else [self.device_id] * len(devices)
        if len(devices) != len(ids):
            raise ValueError("one device id per device is required")
        return await self.publish_users(self.users_from_pairs(devices), ids, batch_size=batch_size)

    async def publish_users(
        self,
        users: KVData,
        device_ids: Sequence[str | bytes | int],
        batch_size: int = 1,
        rate: float | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> FleetSummary:
        """The vectorised path for normalised user data (simulators and gateways).

        ``rate`` caps devices per second; ``on_progress`` is called with the number of
        devices handled since the last call. For a collection with a ``[privacy]`` table
        every device id follows the spending rule with its own state; a device over its
        ``lifetime_epsilon`` is skipped and counted (never raised, unlike :meth:`report`),
        as is one that already reported in the current ``report_period`` or sent the
        aggregator's ``max_reports_per_device`` in the current ``budget_window``. Returns
        the counts of what happened (added to :attr:`outcomes` as well).
        """
        if users.d != self.collection.d:
            raise InvalidCollection(
                f"data has {users.d} keys, collection {self.collection.name} has {self.collection.d}"
            )
        if users.n_users != len(device_ids):
            raise ValueError("one device id per device is required")
        per_message = reports_per_message(self.wire, batch_size)
        if self.control is not None:
            control = await self.control.wait(timeout=self.control_timeout)
            summary = await self.publish_round(users, device_ids, control)
            self.outcomes.add(summary)
            if on_progress is not None:
                on_progress(users.n_users)
            return summary
        # perturb in blocks of whole messages, so that no gateway batch is cut short
        step = per_message * max(1, PERTURB_BLOCK // per_message)
        summary = FleetSummary()
        started = time.monotonic()
        done = 0
        for block_start in range(0, users.n_users, step):
            block = users.rows(block_start, min(users.n_users, block_start + step))
            ts_ms = self._now_ms()
            reports = self._perturber.block(
                block, device_ids[block_start : block_start + block.n_users], ts_ms
            )
            summary.add(reports.summary)
            self.outcomes.add(reports.summary)
            if reports.batch is not None:
                await self._publisher.publish(reports.batch, reports.device_ids, per_message, ts_ms)
            done += block.n_users
            if on_progress is not None:
                on_progress(block.n_users)
            if rate:
                ahead = done / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        self.sent_reports += summary.published
        return summary

    async def publish_reports(
        self, batch: ReportBatch, device_ids: Sequence[str | bytes | int], batch_size: int = 1
    ) -> int:
        """Publish reports made elsewhere (already perturbed), one per device id, through
        the same encoding and messages as :meth:`publish_users`: what a device that does not
        run this client sends (``kvldp produce --fake-fraction``). The reports must be valid
        for the collection's mechanism; no spending rule applies (they are not this SDK's
        perturbations). The reports of an interactive collection carry their round and
        the digest of its means. Returns the number of reports sent."""
        self.collection.mechanism.check_batch(batch)
        n = len(device_ids)
        if batch_len(batch) != n:
            raise ValueError("one device id per report is required")
        await self._publisher.publish(
            batch, device_ids, reports_per_message(self.wire, batch_size), self._now_ms()
        )
        self.sent_reports += n
        return n

    async def publish_round(
        self, users: KVData, device_ids: Sequence[str | bytes | int], control: Control
    ) -> FleetSummary:
        """Every device's report for the round ``control`` opens (interactive collections):
        the devices that may report (each records its spend first) are perturbed at once
        with the published means, in the blocks of the in-process ``collect``, and sent one
        per message keyed by device."""
        reports = self._perturber.round(users, device_ids, control)
        if reports.batch is not None:
            await self._publisher.publish(reports.batch, reports.device_ids, 1, self._now_ms())
            self.sent_reports += len(reports.device_ids)
        return reports.summary

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def report_ids(self, n: int) -> NDArray[np.uint64]:
        """``n`` random non-zero report ids."""
        return self._publisher.report_ids(n)
