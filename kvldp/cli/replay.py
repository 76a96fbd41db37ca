"""``kvldp replay``: re-publish a recording of ``kvldp record`` with the same keys, values
and timestamps (:func:`kvldp.pipeline.replay_file`)."""

from __future__ import annotations

import argparse

from kvldp.cli.flags import Subparsers
from kvldp.kafka_cli import add_kafka_args


def register(sub: Subparsers) -> None:
    p = sub.add_parser("replay", help="re-publish a recording (same keys, values and timestamps)")
    p.add_argument("path", metavar="PATH")
    p.add_argument(
        "--speed",
        type=float,
        default=0.0,
        help="pace by the recorded timestamps, x times faster (0: flat out)",
    )
    p.add_argument("--topic", help="target topic (default: the recorded one)")
    add_kafka_args(p)
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    from kvldp.pipeline import replay_file

    return replay_file(args)
