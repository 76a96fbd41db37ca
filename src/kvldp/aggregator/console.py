"""Where the aggregator's services speak to their operator: one line on stderr, flushed.

:class:`~kvldp.aggregator.service.Aggregator` and
:class:`~kvldp.aggregator.merged.MergedExporter` take a ``log`` callable for what an
operator must see (state resumed or kept in memory, rounds closed, topics reset); by default it
is :func:`stderr_line`, flushed at once so a supervisor's log shows each line when it
happens. Tests pass a callable of their own.
"""

from __future__ import annotations

import sys


def stderr_line(line: str) -> None:
    """Write ``line`` to stderr and flush."""
    print(line, file=sys.stderr, flush=True)
