"""A report body checked at the edge exactly as the aggregator checks it.

:class:`BodyCheck` runs the collection's :class:`~kvldp.common.messages.wire.WireFormat` decoder
(the one the aggregator's ingest folds with) on the body, judged against the time the
gateway will stamp on the Kafka record, and the one-report-per-message rule of
:mod:`kvldp.common.messages.message_rules`. A refused body is a :class:`BodyRefused` carrying the
HTTP status and the decoder's reason code: 409 ``config_mismatch`` (the device was built
for another configuration of the collection), 413 ``too_large`` (above the collection's
``max_message_bytes``), 400 with the reason otherwise (``undecodable``,
``out_of_range``, ``implausible_report``, ...). What only the aggregator can know (a
device over its budget, a report for a closed round, a duplicate) is left to it.

Each body is checked on its own, as it arrives (:meth:`WireFormat.count
<kvldp.common.messages.wire.WireFormat.count>`: scalar checks for a single report, the columnar
decoder for anything else and for naming a refusal's reason).
"""

from __future__ import annotations

from kvldp.common.config.collection import Collection
from kvldp.common.messages.message_rules import ONE_REPORT_DETAIL, ONE_REPORT_REASON, one_report_per_message
from kvldp.common.messages.wire import WireError, WireFormat


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

    @property
    def max_bytes(self) -> int:
        """The largest message the collection takes."""
        return self.wire.cap

    def reports(self, body: bytes, record_ms: int) -> int:
        """The number of reports ``body`` carries, if the aggregator would fold them all
        from a record stamped ``record_ms``; :class:`BodyRefused` otherwise."""
        try:
            count = self.wire.count(body, record_ms)
        except WireError as exc:
            raise _refusal(exc.reason, exc.detail) from None
        if count > 1 and self.one_report:
            raise BodyRefused(400, ONE_REPORT_REASON, ONE_REPORT_DETAIL)
        return count


def _refusal(reason: str, detail: str) -> BodyRefused:
    """The answer to a body the decoder refused with ``reason``."""
    if reason == "oversize":
        return BodyRefused(413, "too_large", detail)
    return BodyRefused(409 if reason == "config_mismatch" else 400, reason, detail)
