"""``kvldp aggregate --from-file``: fold a recording with the live aggregator's code.

The recording's records go through the same plan/apply path per partition, then one
refit; the result is the snapshot's JSON (estimates in the collection's units) plus
the integer totals, so a recording gives exactly the statistics its live run did
(``[aggregate] max_record_lead`` is applied with the clock of the fold: a record the live
run refused as ``record_future`` is folded if its time has come since).
"""

from __future__ import annotations

import time
from itertools import groupby
from pathlib import Path
from typing import Any

from kvldp.aggregator.ingest import plan
from kvldp.aggregator.refit import refit
from kvldp.aggregator.state import AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.messages.control_record import is_interactive
from kvldp.common.messages.recording import check_header, read_recording
from kvldp.common.messages.wire import WireFormat

#: records decoded per step (bounds memory on large recordings)
STEP = 50_000


def fold_recording(collection: Collection, path: Path) -> AggregatorState:
    """The state a fresh aggregator reaches after consuming the recorded messages.

    An interactive collection's recording cannot be folded offline: which reports each
    round took depends on when the live aggregator closed it, which the reports alone
    do not say."""
    if is_interactive(collection):
        raise KvldpError(
            f"collection {collection.name} is interactive ({collection.mechanism_name}): its rounds were "
            "closed live, so a recording of its reports cannot be folded offline; read the live "
            "aggregator's estimates (or its checkpoint) instead"
        )
    state = AggregatorState(collection)
    wire = WireFormat(collection)
    with path.open("rb") as stream:
        header, records = read_recording(stream)
        check_header(header, collection)
        chunk: list[Any] = []
        for record in records:
            chunk.append(record)
            if len(chunk) >= STEP:
                _fold(state, wire, chunk)
                chunk = []
        _fold(state, wire, chunk)
    return state


def _fold(state: AggregatorState, wire: WireFormat, chunk: list[Any]) -> None:
    for partition, group in groupby(
        sorted(chunk, key=lambda r: (r.partition, r.offset)), key=lambda r: r.partition
    ):
        work = plan(state, wire, partition, list(group), now_ms=int(time.time() * 1000))
        if work is not None:
            work.apply(state)


def estimates_json(collection: Collection, state: AggregatorState) -> dict[str, Any]:
    """Final estimates of every window (at the current time) with the integer totals."""
    snapshot = refit(collection, state.window_stats(int(time.time() * 1000)), None)
    out = snapshot.to_json()
    out["reports_total"] = state.reports_total
    out["rejected"] = dict(state.rejected_totals())
    return out
