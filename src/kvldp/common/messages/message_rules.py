"""Which collections take one report per message, for every reader of the reports topic.

A memoized or interactive collection counts each device by its Kafka record key (once,
or once per round): a message carrying several reports (a batch) cannot say whose each
one is, so the aggregator's ingest and the HTTP gateway both refuse such a message with
:data:`ONE_REPORT_REASON` and :data:`ONE_REPORT_DETAIL`.
"""

from __future__ import annotations

from kvldp.common.config.collection import Collection
from kvldp.common.messages.control_record import is_interactive

#: the rejection reason of a multi-report message in a one-report-per-message collection
ONE_REPORT_REASON = "invalid_report"
ONE_REPORT_DETAIL = "this collection takes one report per message (the record key names the device)"


def one_report_per_message(collection: Collection) -> bool:
    """Whether ``collection`` refuses messages carrying several reports (it memoizes
    reports or reports in rounds)."""
    return collection.privacy.memoize or is_interactive(collection)
