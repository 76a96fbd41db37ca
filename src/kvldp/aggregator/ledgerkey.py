"""The ledger key: the secret of the budget ledger's keyed device hashes.

The budget ledger (:mod:`kvldp.aggregator.ledger`) stores only keyed hashes of device
ids. This module decides where an aggregator's key comes from — the environment, a file
next to the checkpoints, or the process — and refuses to start workers of a budgeted
collection that could not share it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from kvldp.common.config.collection import Collection
from kvldp.common.errors import KvldpError
from kvldp.common.files.atomic_file import create_once

LEDGER_KEY_ENV = "KVLDP_LEDGER_KEY"


def ledger_key(collection: Collection, state_dir: str | Path | None, role: str = "all") -> bytes:
    """The secret of the budget ledger's keyed device hashes: ``$KVLDP_LEDGER_KEY``, else a
    key kept next to the checkpoints (created once, durably, mode 0600; an empty file is
    refused rather than taken as a new key), else a per-process key
    (the ledger then lives only as long as the in-memory state). Workers hand ledgers to
    each other, so with a budget they must share the key through the environment."""
    env = os.environ.get(LEDGER_KEY_ENV)
    if env:
        return env.encode()
    if role == "worker" and (collection.aggregate.max_reports_per_device or collection.privacy.as_table()):
        raise KvldpError(
            f"collection {collection.name!r} has a privacy budget or [privacy] table: its workers must "
            "share the ledger key; "
            f"set {LEDGER_KEY_ENV} to the same secret on every worker"
        )
    if state_dir is None:
        return secrets.token_bytes(32)
    path = Path(state_dir) / f"{collection.name}.ledger-key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        create_once(path, secrets.token_bytes(32))
    key = path.read_bytes()
    if not key:
        raise KvldpError(
            f"ledger key file {str(path)!r} is empty: restore it from a backup (the ledger's device "
            "hashes were made with it), or delete it together with the checkpoints to start over"
        )
    return key
