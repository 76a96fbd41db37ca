"""``kvldp record``: write a collection's raw report messages to a file
(:func:`kvldp.sim.record_replay.record`); ``kvldp replay`` publishes such a file again."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from kvldp.cli.flags import FileToWrite, Subparsers, positive_float
from kvldp.common.errors import KvldpError
from kvldp.kafka.command_line import add_kafka_args, kafka_settings


def register(sub: Subparsers) -> None:
    p = sub.add_parser("record", help="write a collection's raw report messages to a file")
    p.add_argument("--collection", required=True)
    p.add_argument("--out", required=True, metavar="PATH", type=FileToWrite, help="the recording to write")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="record every message from the oldest (default: only those that arrive after the recording starts)",
    )
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument(
        "--idle-timeout", type=positive_float, default=5.0, help="stop after this many idle seconds"
    )
    add_kafka_args(p)
    p.set_defaults(func=cmd_record)


def cmd_record(args: argparse.Namespace) -> int:
    from kvldp.common.config.collection_file import load_collection
    from kvldp.kafka.main_loop import run_async
    from kvldp.sim.record_replay import record

    collection = load_collection(args.collection)
    if Path(args.out).exists() and not args.force:
        raise KvldpError(f"--out {args.out} exists; give --force to overwrite it")
    kafka = kafka_settings(args)

    async def go(stop: asyncio.Event) -> int:
        try:
            return await record(collection, kafka, Path(args.out), args.from_beginning, args.idle_timeout)
        except FileNotFoundError as exc:
            raise KvldpError(str(exc)) from None

    count = run_async(go, kafka)
    print(f"recorded {count} messages of {collection.reports_topic} to {args.out}", file=sys.stderr)
    return 0
