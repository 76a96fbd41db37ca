"""The device SDK: perturb locally, encode, publish. Raw values never leave it.

``Collector(collection, bootstrap_servers=...)`` — or, for a secured cluster,
``Collector(collection, kafka_config="client.properties")`` (see
:mod:`kvldp.kafka.client_config`) — maps key names to indices, normalises
raw values into [-1, 1] with the collection's ``value_range`` (see
:mod:`kvldp.producer.pairs`), perturbs with the
collection's mechanism (from :mod:`common`) using an RNG seeded from the operating
system — unpredictable to the server — and publishes msgpack reports (see
:mod:`kvldp.common.wire`) to ``kvldp.<name>.reports`` keyed by device id, so one device's
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
:mod:`kvldp.common.privacy` (memoized re-sends, ``lifetime_epsilon``, one report per
``report_period``), with the device's own state in a file (``state_path``, see
:mod:`kvldp.producer.device_state`) or in memory, and one state per other device id a
gateway or simulator reports for, in memory or one file each under ``state_dir``. A state
file may be shared by several processes: each change is made under the file's lock, to
what the file holds. Memoized and period-limited reports go out one per
message, keyed by their device id, because the aggregator tells devices apart by the Kafka
key. With ``privacy.instantaneous_epsilon`` every send of a memoized report, the first
and every re-send, is the stored report randomized again with fresh randomness
(:mod:`kvldp.common.instantaneous`), so no two sends of a state are alike; each reveals
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
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import ssl
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np
from aiokafka import AIOKafkaProducer
from numpy.typing import NDArray

from kvldp.common.collection import Collection
from kvldp.common.collection_fields import InvalidCollection
from kvldp.common.collection_file import load_collection
from kvldp.common.control_record import Control, interactive_mechanism, is_interactive
from kvldp.common.errors import KvldpError
from kvldp.common.file_lock import LOCK_TIMEOUT_S
from kvldp.common.kvdata import KVData
from kvldp.common.privacy import PrivacyBudgetExhausted, format_duration
from kvldp.common.schema import ReportBatch, batch_len, from_rows
from kvldp.common.wire import WireFormat
from kvldp.kafka.client_config import KafkaConfig, resolve_kafka_config
from kvldp.producer.batching import check_batching
from kvldp.producer.bearer_token import BearerTokens, DeviceTokenProvider, TokenProvider
from kvldp.producer.control_follower import ControlFollower
from kvldp.producer.delivery import Deliveries
from kvldp.producer.device_state import (
    DeviceState,
    Fleet,
    FleetSummary,
    ReportStatus,
    budget_window_of,
    period_of,
    tracks_privacy,
)
from kvldp.producer.gateway_client import MAX_CONNECTIONS, REQUEST_TIMEOUT_S, GatewayTransport, reports_url
from kvldp.producer.pairs import device_key, users_from_pairs
from kvldp.producer.retry_policy import RetryPolicy
from kvldp.producer.transport import KafkaTransport, Message, Transport
from kvldp.producer.truncation import TruncationWarner

#: sends in flight before the SDK waits for acknowledgements (bounds memory)
MAX_IN_FLIGHT = 2000
#: devices perturbed per vectorised step
PERTURB_BLOCK = 4096
#: seconds a device waits for the open round of an interactive collection
CONTROL_TIMEOUT_S = 60.0
#: the producer acknowledgements a collector accepts: none, the leader's, every in-sync replica's
ACKS = (0, 1, "all")

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
    :class:`~kvldp.common.file_lock.LockTimeout`, nothing sent or spent). ``clock`` (a callable returning
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
        if acks not in ACKS:
            raise KvldpError(f"acks must be 0, 1 or 'all', got {acks!r}")
        if not (isinstance(request_timeout, int | float) and request_timeout > 0):
            raise KvldpError(f"request_timeout must be a positive number of seconds, got {request_timeout!r}")
        self.collection = collection if isinstance(collection, Collection) else load_collection(collection)
        if endpoint is None:
            http = {"token": token, "token_for": token_for, "ca_file": ca_file, "ssl_context": ssl_context}
            given = [name for name, value in http.items() if value is not None]
            if given or retry is not None:
                raise KvldpError(f"{(given or ['retry'])[0]} goes with endpoint (the HTTPS gateway)")
            #: where and how to connect (``bootstrap_servers`` overrides the config's address);
            #: None with an ``endpoint``
            self.kafka: KafkaConfig | None = resolve_kafka_config(bootstrap_servers, kafka_config)
        else:
            kafka_given = {
                "bootstrap_servers": bootstrap_servers,
                "kafka_config": kafka_config,
                "producer": producer,
            }
            clash = [name for name, value in kafka_given.items() if value is not None]
            if clash or acks != "all":
                raise KvldpError(
                    f"endpoint sends through the HTTPS gateway, {(clash or ['acks'])[0]} is a Kafka "
                    "setting: give one of them (the gateway waits for acks=all)"
                )
            if is_interactive(self.collection):
                raise KvldpError(
                    f"collection {self.collection.name} reports in rounds, which a device follows on "
                    "the collection's control topic in Kafka: it cannot report through an endpoint"
                )
            self.kafka = None
        self.wire = WireFormat(self.collection)
        self.rng = rng if rng is not None else secure_rng()
        # never from ``rng``: two simulators seeded alike must not share report ids
        self._rid_rng = secure_rng()
        self.clock = clock
        #: this device's privacy state; its id is the one this SDK instance reports under
        #: (the Kafka key): ``device_id``, else the one stored in ``state_path``, else random
        if state_path is None:
            self.state = DeviceState.new(self.collection, device_id)
        else:
            self.state = DeviceState.open(state_path, self.collection, device_id, state_lock_timeout)
        self.device_id = self.state.device_id
        #: whether this device's id came from the caller (sent to the gateway as the claimed device)
        self._id_given = device_id is not None
        #: states of the other device ids this collector reports for (gateways, simulators)
        self.fleet = Fleet(self.collection, state_dir, state_lock_timeout)
        self._tracked = tracks_privacy(self.collection)
        #: with ``privacy.instantaneous_epsilon``, what randomizes every send of a memoized report
        self._randomizer = self.collection.instantaneous_randomizer
        self._warn_unsaved = warn_unsaved and self._tracked and state_path is None
        #: warn once that other devices' states live in memory (when the aggregator limits devices)
        self._warn_fleet = (
            warn_unsaved and self.collection.aggregate.max_reports_per_device > 0 and state_dir is None
        )
        #: warns once per device whose pairs PCKV's ell truncates
        self.truncation = TruncationWarner(self.collection, logger)
        self.acks = acks
        #: where the messages go: the collection's reports topic, or the gateway
        self.transport: Transport
        if self.kafka is None:
            assert endpoint is not None
            self.transport = GatewayTransport(
                reports_url(endpoint, self.collection.name, allow_http=allow_http),
                BearerTokens(token, token_for),
                retry=retry,
                max_connections=max_connections,
                request_timeout=request_timeout,
                ca_file=ca_file,
                ssl_context=ssl_context,
            )
        else:
            producer = producer or AIOKafkaProducer(
                **self.kafka.client_options(client_id),
                acks=acks,
                linger_ms=5,
                max_request_size=max(self.collection.aggregate.max_message_bytes * 2, 1 << 20),
                request_timeout_ms=int(request_timeout * 1000),
                enable_idempotence=False,
            )
            self.transport = KafkaTransport(producer, self.collection.reports_topic, self.kafka)
        self._pending: list[asyncio.Future[object]] = []
        #: what became of the reports handed to the transport, counted as each settles
        self.deliveries = Deliveries()
        self.sent_reports = 0
        self.sent_messages = 0
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

    # ------------------------------------------------------------------ privacy
    def _state_of(self, device_id: str | bytes | int) -> DeviceState:
        key = device_key(device_id)
        if key != device_key(self.device_id):
            if self._warn_fleet:
                self._warn_fleet = False
                logger.warning(
                    "collection %s: the devices this process reports for keep their report counts in "
                    "memory, for this collector's life only; %s",
                    self.collection.name,
                    self._refusal_after_restart(),
                )
            return self.fleet.state(key)
        if self._warn_unsaved:
            self._warn_unsaved = False
            limited = self.collection.aggregate.max_reports_per_device > 0
            refusal = self._refusal_after_restart() if limited else "a restart forgets it"
            logger.warning(
                "collection %s: no state_path, so device %s keeps its privacy spending in memory only; %s",
                self.collection.name,
                self.device_id,
                refusal,
            )
        return self.state

    def _refusal_after_restart(self) -> str:
        """What the aggregator does with reports sent again after a restart forgot them."""
        aggregate, period = self.collection.aggregate, self.collection.privacy.report_period_s
        rule = (
            f"one report per device per report_period ({format_duration(period)})"
            if period is not None
            else f"{aggregate.max_reports_per_device} report(s) per device per budget_window "
            f"({format_duration(aggregate.budget_window_s)})"
        )
        return (
            f"the aggregator takes {rule}, so what is sent again for the same devices within that "
            "time, by another process or after a restart, is refused as budget_exceeded and never folded"
        )

    def _known_state(self, device_id: str | bytes | int | None) -> DeviceState | None:
        """The state of ``device_id`` (default this device's), read again from its file, if
        there is one."""
        if device_id is None or device_key(device_id) == device_key(self.device_id):
            self.state.refresh()
            return self.state
        return self.fleet.known(device_key(device_id))

    def privacy_spent(self, device_id: str | bytes | int | None = None) -> float:
        """Epsilon spent on this collection by this device, or by another ``device_id`` this
        collector reported for (those are only counted for collections with a ``[privacy]``
        table)."""
        state = self._known_state(device_id)
        return 0.0 if state is None else state.spent(self.collection)

    def privacy_remaining(self, device_id: str | bytes | int | None = None) -> float:
        """Epsilon left under ``lifetime_epsilon`` (``math.inf`` without one)."""
        state = self._known_state(device_id)
        if state is None:
            cap = self.collection.privacy.lifetime_epsilon
            return math.inf if cap is None else cap
        return state.remaining(self.collection)

    def _per_message(self, batch_size: int) -> int:
        check_batching(self.collection, batch_size)
        return max(1, min(batch_size, self.wire.max_batch()))

    # ------------------------------------------------------------------ publishing
    async def _send(self, value: bytes, device: str | bytes | int, timestamp_ms: int, reports: int) -> None:
        key = device_key(device)
        claimed = self._id_given or key != device_key(self.device_id)
        outcome = asyncio.ensure_future(
            await self.transport.send(Message(value, key, timestamp_ms, claimed, reports))
        )
        self.deliveries.track(outcome, reports)
        self._pending.append(outcome)
        self.sent_messages += 1
        if len(self._pending) >= MAX_IN_FLIGHT:
            await self.flush()

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
        pending = list(self._pending)
        if not pending:
            return
        # a flush cancelled part way (its caller was) leaves the messages to the next one
        await asyncio.wait(pending)
        settled = set(pending)
        self._pending = [outcome for outcome in self._pending if outcome not in settled]
        failures = [
            error
            for outcome in pending
            if (error := asyncio.CancelledError() if outcome.cancelled() else outcome.exception()) is not None
        ]
        raised = str(failures[0]) if failures else ""
        for message, times in Counter(str(other) for other in failures[1:] if str(other) != raised).items():
            more = f" ({times} messages)" if times > 1 else ""
            logger.warning("collection %s: %s%s", self.collection.name, message, more)
        if failures:
            raise failures[0]

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
            state = self._state_of(device)
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
        per_message = self._per_message(batch_size)
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
            ids = device_ids[block_start : block_start + block.n_users]
            if self._tracked:
                part = await self._publish_tracked(block, ids, per_message)
                summary.add(part)
                self.outcomes.add(part)
            else:
                self._charge_own(ids)
                self.truncation.check(block.sizes, ids)
                batch = self.collection.mechanism.perturb_many(block, self.rng)
                await self._publish_batch(batch, ids, per_message, self._now_ms())
                summary.sent += block.n_users
                self.outcomes.sent += block.n_users
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
        await self._publish_batch(batch, device_ids, self._per_message(batch_size), self._now_ms())
        self.sent_reports += n
        return n

    async def publish_round(
        self, users: KVData, device_ids: Sequence[str | bytes | int], control: Control
    ) -> FleetSummary:
        """Every device's report for the round ``control`` opens (interactive collections):
        the devices that may report (each records its spend first) are perturbed at once
        with the published means, in the blocks of the in-process ``collect``, and sent one
        per message keyed by device."""
        summary = FleetSummary()
        if control.complete:
            summary.rounds_done = users.n_users
            return summary
        keep: list[int] = []
        for u, device in enumerate(device_ids):
            status = self._state_of(device).round_report(self.collection, control.round)
            summary.count(status)
            if status is ReportStatus.SENT:
                keep.append(u)
        if not keep:
            return summary
        members = users if len(keep) == users.n_users else users.take(np.asarray(keep, dtype=np.int64))
        mechanism = interactive_mechanism(self.collection)
        batch = mechanism.perturb_round_many(members, self.rng, control.round, control.means)
        await self._publish_batch(batch, [device_ids[u] for u in keep], 1, self._now_ms())
        self.sent_reports += len(keep)
        return summary

    async def _publish_tracked(
        self, block: KVData, device_ids: Sequence[str | bytes | int], per_message: int
    ) -> FleetSummary:
        """One block under the spending rule: decide (and record) per device, then send.

        Memoized devices need one keyed mechanism call per state they never reported
        before (their randomness is their own); a re-send is a lookup. With
        ``privacy.instantaneous_epsilon`` every report going out, new or re-sent, is the
        stored permanent report randomized again with fresh draws from :attr:`rng`, the
        block's reports at once; the stored payload itself never goes out. Without
        memoization the block is perturbed at once and the reports that may go are kept.
        """
        ts_ms = self._now_ms()
        period = period_of(self.collection, ts_ms)
        window = budget_window_of(self.collection, ts_ms)
        summary = FleetSummary()
        keep: list[int] = []
        if self.collection.privacy.memoize:
            reports = []
            derived: list[int] = []  # new reports; a re-send is the stored one
            for u, device in enumerate(device_ids):
                lo, hi = int(block.indptr[u]), int(block.indptr[u + 1])
                status, report = self._state_of(device).memoized(
                    self.collection, block.keys[lo:hi], block.values[lo:hi], period, window
                )
                summary.count(status)
                if report is not None:
                    reports.append(report)
                    keep.append(u)
                if status is ReportStatus.SENT:
                    derived.append(u)
            self.truncation.check(block.sizes[derived], [device_ids[u] for u in derived])
            if not keep:
                return summary
            batch = from_rows(reports, self.wire.fields)
            if self._randomizer is not None:
                batch = self._randomizer.randomize(batch, self.rng)
        else:
            for u, device in enumerate(device_ids):
                status = self._state_of(device).fresh(self.collection, period, window)
                summary.count(status)
                if status is ReportStatus.SENT:
                    keep.append(u)
            if not keep:
                return summary
            self.truncation.check(block.sizes[keep], [device_ids[u] for u in keep])
            batch = self.collection.mechanism.perturb_many(block, self.rng)
            if len(keep) < block.n_users:
                rows = np.asarray(keep)
                batch = {name: column[rows] for name, column in batch.items()}
        await self._publish_batch(batch, [device_ids[u] for u in keep], per_message, ts_ms)
        return summary

    def _charge_own(self, device_ids: Sequence[str | bytes | int]) -> None:
        """Without a ``[privacy]`` table nothing is enforced, but this device's reports still
        cost epsilon each: count them (before sending) so that :meth:`privacy_spent` is true."""
        own = device_key(self.device_id)
        mine = sum(1 for device in device_ids if device_key(device) == own)
        if mine:
            self.state.charge(mine)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def report_ids(self, n: int) -> NDArray[np.uint64]:
        """``n`` random non-zero report ids."""
        return self._rid_rng.integers(1, 2**64, size=n, dtype=np.uint64)

    async def _publish_batch(
        self, batch: ReportBatch, device_ids: Sequence[str | bytes | int], per_message: int, now: int
    ) -> None:
        n = len(device_ids)
        rids = self.report_ids(n)
        if per_message == 1:
            for value, device in zip(self.wire.encode_many(batch, now, rids), device_ids, strict=True):
                await self._send(value, device, now, 1)
            return
        for start in range(0, n, per_message):
            part = {name: column[start : start + per_message] for name, column in batch.items()}
            value = self.wire.encode_batch(part, ts_ms=now, rids=rids[start : start + per_message])
            await self._send(value, device_ids[start], now, min(per_message, n - start))
