"""``kvldp demo``: the whole pipeline on one machine, watched live.

It starts the embedded broker on a free port and the aggregator (metrics on
http://127.0.0.1:9108/metrics by default), then runs a simulated fleet of ``--users``
devices against them and shows, in a terminal table, every key's estimate +- standard
error next to the true value and the epsilon spent per device, until every report is
folded or Ctrl-C. The broker is stopped on the way out, whatever happens.

Given a cluster (``--kafka-config``, ``--bootstrap-servers`` or their environment
variables), the demo runs there instead of on an embedded broker, under a collection
name of its own (``demo-<6 hex>``) so that its topics start empty.

:func:`run_demo` picks the demo the collection calls for: devices reporting once per
period (:mod:`kvldp.demo.periodic`, the built-in collection), or an interactive
collection's rounds (:mod:`kvldp.demo.interactive`); both run on :mod:`kvldp.demo.live`.
"""

from __future__ import annotations

import argparse
import dataclasses
import secrets
from typing import Any

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import load_collection, parse_collection
from kvldp.common.messages.control_record import is_interactive
from kvldp.demo.interactive import run_rounds_demo
from kvldp.demo.periodic import run_periods_demo
from kvldp.kafka.client_config import KafkaConfig
from kvldp.kafka.command_line import external_kafka

DEMO_COLLECTION: dict[str, Any] = {
    "name": "demo",
    "mechanism": "kvue",
    "epsilon": 2.0,
    "keys": ["hamburger", "fries", "pepsi", "salad", "nuggets", "coffee", "icecream", "wrap"],
    "value_range": [0.0, 20.0],
    "aggregate": {
        "refit_interval_s": 1,
        "estimators": ["unbiased", "em", "normsub"],
        "windows": ["1m", "all"],
        "partitions": 4,
    },
    "privacy": {"memoize": True, "report_period": "1h"},
}


def demo_collection(args: argparse.Namespace, external: KafkaConfig | None) -> Collection:
    """The demo's collection; on an external cluster under a name of its own, so that its
    topics start empty and no earlier run's reports are folded in."""
    collection = (
        load_collection(args.collection)
        if args.collection
        else parse_collection(DEMO_COLLECTION, source="built-in demo collection")
    )
    if external is None:
        return collection
    return dataclasses.replace(collection, name=f"{collection.name}-{secrets.token_hex(3)}")


def run_demo(args: argparse.Namespace) -> int:
    """``kvldp demo``: run the demo the collection calls for (each checks its flags, then
    the metrics port, before it starts anything)."""
    external = external_kafka(args)
    collection = demo_collection(args, external)
    if is_interactive(collection):
        return run_rounds_demo(collection, args, external)
    return run_periods_demo(collection, args, external)
