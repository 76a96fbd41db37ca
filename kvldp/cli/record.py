"""``kvldp record``: write a collection's raw report messages to a file
(:func:`kvldp.pipeline.record_topic`); ``kvldp replay`` publishes such a file again."""

from __future__ import annotations

import argparse

from kvldp.cli.flags import Subparsers, positive_float
from kvldp.kafka_cli import add_kafka_args


def register(sub: Subparsers) -> None:
    p = sub.add_parser("record", help="write a collection's raw report messages to a file")
    p.add_argument("--collection", required=True)
    p.add_argument("--out", required=True, metavar="PATH")
    p.add_argument(
        "--from-beginning", action="store_true", help="start at the oldest message (default: new ones)"
    )
    p.add_argument(
        "--idle-timeout", type=positive_float, default=5.0, help="stop after this many idle seconds"
    )
    add_kafka_args(p)
    p.set_defaults(func=cmd_record)


def cmd_record(args: argparse.Namespace) -> int:
    from kvldp.pipeline import record_topic

    return record_topic(args)
