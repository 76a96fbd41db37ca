"""docs/wire-format.md's hex examples are real: regenerated here and compared byte for byte."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.mechanisms import names
from kvldp.common.messages.wire import WireFormat
from kvldp.producer.pairs import users_from_pairs

from support.package import REPO

DOC = REPO / "docs" / "wire-format.md"
TIMESTAMP_MS = 1795363200000


def example_collection(mechanism: str) -> Collection:
    return parse_collection(
        {"name": "shop", "mechanism": mechanism, "epsilon": 1.0, "key_count": 4, "value_range": [0.0, 10.0]}
    )


def example_message(mechanism: str) -> bytes:
    """One device holding k1 = 5.0, perturbed with a fixed seed, as a single-report message."""
    collection = example_collection(mechanism)
    wire = WireFormat(collection)
    users = users_from_pairs(collection, [{"k1": 5.0}])  # the SDK's normalisation, without Kafka
    report = collection.mechanism.perturb(
        dict(zip(users.keys.tolist(), users.values.tolist(), strict=True)), np.random.default_rng(2024)
    )
    return wire.encode_report(report, ts_ms=TIMESTAMP_MS)


def documented() -> dict[str, str]:
    text = DOC.read_text()
    return dict(re.findall(r"^\| `(\w+)` \| `([0-9a-f]+)` \|", text, flags=re.MULTILINE))


@pytest.mark.parametrize("mechanism", names())
def test_documented_example_is_what_the_code_sends(mechanism: str) -> None:
    message = example_message(mechanism)
    assert documented().get(mechanism) == message.hex(), (
        f"docs/wire-format.md: `{mechanism}` -> {message.hex()}"
    )
    decoded = WireFormat(example_collection(mechanism)).decode([bytes.fromhex(documented()[mechanism])])
    assert decoded.rejected == [] and decoded.message.tolist() == [0]
