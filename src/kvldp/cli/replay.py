"""``kvldp replay``: re-publish a recording of ``kvldp record`` with the same keys, values
and timestamps (:func:`kvldp.sim.record_replay.replay`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvldp.cli.flags import FileToRead, Subparsers
from kvldp.common.errors import KvldpError
from kvldp.kafka.command_line import add_kafka_args, kafka_settings


def register(sub: Subparsers) -> None:
    p = sub.add_parser("replay", help="re-publish a recording (same keys, values and timestamps)")
    p.add_argument("path", metavar="PATH", type=lambda text: FileToRead(text, "recording"))
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
    from kvldp.common.messages.recording import InvalidRecording, read_recording
    from kvldp.kafka.main_loop import run_async
    from kvldp.sim.record_replay import replay

    path = Path(args.path)
    try:
        with path.open("rb") as stream:
            read_recording(stream)  # the header, before anything connects
    except InvalidRecording as exc:
        raise KvldpError(f"{path}: {exc}") from None
    kafka = kafka_settings(args)
    count = run_async(lambda stop: replay(path, kafka, args.speed, args.topic), kafka)
    print(f"replayed {count} messages from {path}", file=sys.stderr)
    return 0
