"""The linear-replay oracle: record a whole topic and fold it in one clean pass.

The aggregator under test saw the same records, but cut into other fetches, across
crashes, restarts and rebalances; its integer statistics must equal these exactly.
"""

from __future__ import annotations

from pathlib import Path

from kvldp.aggregator.offline import fold_recording
from kvldp.aggregator.state import AggregatorState
from kvldp.common.config.collection import Collection
from kvldp.sim.record_replay import record


async def replay_oracle(
    collection: Collection, bootstrap: str, workdir: Path, label: str = "oracle"
) -> AggregatorState:
    """Record the reports topic from the beginning (until idle) and fold it."""
    path = workdir / f"{collection.name}.{label}.rec"
    await record(collection, bootstrap, path, from_beginning=True, idle_timeout=1.5)
    return fold_recording(collection, path)
