"""Keep the garbage collector's full passes off a service's start-up heap.

CPython's cyclic garbage collector looks at every container object it tracks in a full
(oldest-generation) pass. A kvldp service starts with about 60,000 of them (the modules,
classes and functions of numpy, aiokafka, aiohttp, cryptography and kvldp itself), and
a full pass over them takes tens of milliseconds. Folding a fetch, or answering a burst
of requests, allocates tracked objects fast (aiokafka's record of every report, aiohttp's
request objects), and the many that live for the length of a fetch make the collector
run full passes again and again: on single-report ingest they took a fifth to a third
of the aggregator's CPU.

:func:`freeze` runs once, after a service's imports and before its loop starts: it
collects the garbage start-up left, then moves every object still alive to the
collector's permanent generation (:func:`gc.freeze`), which no pass looks at again. What
a service allocates afterwards is collected as before. The cost: an object alive at
that moment that later becomes unreachable inside a reference cycle is never freed;
start-up objects live as long as the process, so that is a bounded amount at most.
"""

from __future__ import annotations

import gc


def freeze() -> int:
    """Collect the start-up garbage, then exempt what is left from every later pass;
    returns how many objects are now exempt."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
