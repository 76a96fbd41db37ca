"""The ``kvldp`` command line: one entry point, one subcommand per job.

Each subcommand is a module of this package holding its flags next to its handler; its
``register`` adds it to the top parser, in the order ``kvldp --help`` lists them. Flag
types shared by several subcommands are in :mod:`kvldp.cli.flags`. This package is the
only importer of :mod:`kvldp.bench`, :mod:`kvldp.experiments` and
:mod:`kvldp.reliability`; heavy modules (the aggregator, the SDK's Kafka client, matplotlib) are
imported inside the handlers, so that ``kvldp --help`` stays fast.

Every path flag is checked before its command starts (:func:`kvldp.cli.flags.check_paths`).
Input errors (:class:`kvldp.common.errors.KvldpError`) print one line on stderr and exit
with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence

import numpy as np

from kvldp.cli import (
    advise,
    aggregate,
    attack,
    audit,
    bench,
    broker,
    demo,
    device_keys,
    evaluate,
    gateway,
    mechanisms,
    produce,
    record,
    replay,
)
from kvldp.cli.flags import check_paths
from kvldp.common.errors import KvldpError

#: the subcommands, in the order ``kvldp --help`` lists them
SUBCOMMANDS = (
    mechanisms,
    audit,
    evaluate,
    attack,
    advise,
    bench,
    demo,
    broker,
    produce,
    aggregate,
    gateway,
    device_keys,
    record,
    replay,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvldp", description="Key-value telemetry under local differential privacy."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS:
        command.register(sub)
    return parser


def configure_logging() -> None:
    """Warnings and errors of kvldp's own modules on stderr; the Kafka client and the web
    server stay quiet unless KVLDP_LOG_LEVEL asks for more (the client's connection errors
    become our one-line messages instead of a burst of log records; the server would log
    a traceback for every malformed request, which kvldp.web answers and counts as
    nothing more)."""
    level = os.environ.get("KVLDP_LOG_LEVEL", "").upper()
    logging.basicConfig(level=level or logging.WARNING, format="kvldp: %(levelname)s %(name)s: %(message)s")
    if not level:
        for library in ("aiokafka", "aiohttp"):
            logging.getLogger(library).setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging()
    np.seterr(all="warn", under="ignore")  # underflow to 0 is benign (EM's vanishing states)
    try:
        check_paths(args)
        status = int(args.func(args))
        sys.stdout.flush()  # a reader that left is found here, not at the interpreter's exit
        return status
    except KvldpError as exc:
        print(f"kvldp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvldp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """The reader of standard output left (``kvldp … | head``): stop quietly, as a command
    in a pipeline does, with the status a command killed by SIGPIPE has; what is still
    buffered for standard output goes nowhere instead of raising again at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE
