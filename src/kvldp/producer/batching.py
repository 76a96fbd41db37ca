"""How many reports a message carries, and which collections refuse to pack reports.

A gateway or simulator may pack up to ``batch_size`` reports per Kafka message, as many
as fit under the collection's message size cap, but a
collection that memoizes reports, limits reports per ``report_period`` or per
``budget_window`` (``aggregate.max_reports_per_device``) or reports in rounds needs each
report in a message of its own, keyed by its device: the aggregator tells devices apart by
the Kafka key, and charges a whole message to it. :class:`~kvldp.producer.collector.Collector`
checks this before publishing; the command line checks it before starting.
"""

from __future__ import annotations

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.control_record import is_interactive
from kvldp.common.messages.wire import WireFormat


class BatchingRefused(KvldpError):
    """A ``batch_size`` above 1 for a collection whose reports must each be their own message."""


def check_batching(collection: Collection, batch_size: int) -> None:
    """Raise :class:`BatchingRefused` if ``collection`` needs one report per message (it
    memoizes, limits reports per period or budget window, or reports in rounds: the record
    key must name the device)."""
    privacy = collection.privacy
    if batch_size > 1 and (
        privacy.memoize or collection.aggregate.max_reports_per_device or is_interactive(collection)
    ):
        rule = (
            "memoizes reports"
            if privacy.memoize
            else "reports once per device and round"
            if is_interactive(collection)
            else "limits reports per report_period"
            if privacy.report_period_s is not None
            else "limits reports per device and budget_window (the aggregator would charge a whole "
            "batch to the device of its record key)"
        )
        raise BatchingRefused(
            f"collection {collection.name} {rule}: each report is its own message keyed by its "
            f"device, so batch_size must be 1, got {batch_size}"
        )


def reports_per_message(wire: WireFormat, batch_size: int) -> int:
    """The reports each message of ``wire``'s collection carries for ``batch_size``: at most
    what fits under its message size cap, at least one. Raises :class:`BatchingRefused`
    as :func:`check_batching` does."""
    check_batching(wire.collection, batch_size)
    return max(1, min(batch_size, wire.max_batch()))
