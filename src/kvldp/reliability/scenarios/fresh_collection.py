"""A fresh collection for each scenario run: its own name, and so its own topics and
consumer group, written as a TOML file for ``kvldp aggregate``.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import collection_toml, parse_collection


def make_collection(
    workdir: Path, label: str, mechanism: str, d: int, privacy: dict[str, Any] | None = None, **aggregate: Any
) -> tuple[Collection, Path]:
    """A collection with a fresh name (its own topics and group), written for the CLI; with
    a ``privacy`` table, its aggregator keeps a device book."""
    table: dict[str, Any] = {
        "name": f"rel-{label}-{secrets.token_hex(3)}",
        "mechanism": mechanism,
        "epsilon": 1.0,
        "key_count": d,
        "value_range": [0.0, 1.0],
        "aggregate": {"windows": ["all"], "estimators": ["unbiased"], "refit_interval_s": 1.0, **aggregate},
    }
    if privacy is not None:
        table["privacy"] = privacy
    collection = parse_collection(table)
    path = workdir / f"{collection.name}.toml"
    path.write_text(collection_toml(collection))
    return collection, path
