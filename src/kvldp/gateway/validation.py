"""A report body checked at the edge exactly as the aggregator checks it.

:class:`BodyCheck` runs the collection's :class:`~kvldp.common.wire.WireFormat` decoder
(the one the aggregator's ingest folds with) on the body, judged against the time the
gateway will stamp on the Kafka record, and the one-report-per-message rule of
:mod:`kvldp.common.message_rules`. A refused body is a :class:`BodyRefused` carrying the
HTTP status and the decoder's reason code: 409 ``config_mismatch`` (the device was built
for another configuration of the collection), 413 ``too_large`` (above the collection's
``max_message_bytes``), 400 with the reason otherwise (``undecodable``,
``out_of_range``, ``implausible_report``, ...). What only the aggregator can know (a
device over its budget, a report for a closed round, a duplicate) is left to it.

The decoder is columnar: it checks a list of messages in one pass. The bodies of the
requests that reach :meth:`BodyCheck.reports` in the same turn of the event loop are
decoded together, in one call, and each request gets its own message's verdict.
"""

from __future__ import annotations

import asyncio

import numpy as np

from kvldp.common.collection import Collection
from kvldp.common.message_rules import ONE_REPORT_DETAIL, ONE_REPORT_REASON, one_report_per_message
from kvldp.common.wire import WireFormat


class BodyRefused(Exception):
    """A body the gateway does not forward: HTTP ``status``, error ``code``, ``detail``."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


class BodyCheck:
    """The aggregator's validation of one collection's messages."""

    def __init__(self, collection: Collection) -> None:
        self.collection = collection
        self.wire = WireFormat(collection)
        self.one_report = one_report_per_message(collection)
        #: bodies waiting for the next decode: (body, record time, the request's verdict)
        self._pending: list[tuple[bytes, int, asyncio.Future[int]]] = []

    @property
    def max_bytes(self) -> int:
        """The largest message the collection takes."""
        return self.wire.cap

    async def reports(self, body: bytes, record_ms: int) -> int:
        """The number of reports ``body`` carries, if the aggregator would fold them all
        from a record stamped ``record_ms``; :class:`BodyRefused` otherwise."""
        loop = asyncio.get_running_loop()
        verdict: asyncio.Future[int] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._decode_pending)
        self._pending.append((body, record_ms, verdict))
        return await verdict

    def _decode_pending(self) -> None:
        pending, self._pending = self._pending, []
        try:
            decoded = self.wire.decode([p[0] for p in pending], [p[1] for p in pending])
        except Exception as exc:  # a decoder bug: every waiting request fails (a 500), none hangs
            for _, _, verdict in pending:
                if not verdict.done():
                    verdict.set_exception(exc)
            return
        counts = np.bincount(decoded.message, minlength=len(pending))
        refused: dict[int, tuple[str, str]] = {}
        for index, reason, detail in decoded.rejected:
            refused.setdefault(index, (reason, detail))
        for index, (_, _, verdict) in enumerate(pending):
            if verdict.done():  # the request was cancelled (its client left)
                continue
            if index in refused:
                verdict.set_exception(_refusal(*refused[index]))
            elif counts[index] > 1 and self.one_report:
                verdict.set_exception(BodyRefused(400, ONE_REPORT_REASON, ONE_REPORT_DETAIL))
            else:
                verdict.set_result(int(counts[index]))


def _refusal(reason: str, detail: str) -> BodyRefused:
    """The answer to a body the decoder refused with ``reason``."""
    if reason == "oversize":
        return BodyRefused(413, "too_large", detail)
    return BodyRefused(409 if reason == "config_mismatch" else 400, reason, detail)
