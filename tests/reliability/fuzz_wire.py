"""Coverage-guided fuzzing of the report decoder with atheris (libFuzzer), run by
``test_decoder_fuzz.py`` for a bounded time: ``python fuzz_wire.py -max_total_time=20 CORPUS``.

The property: for any bytes, ``WireFormat.decode`` returns (never raises) and accounts
for the message exactly once — reports, or one rejection with a documented reason.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["kvldp.common"]):
    from kvldp.common.config.collection_file import parse_collection
    from kvldp.common.messages.wire import REASONS, WireFormat

NOW_MS = 1_800_000_000_000
WIRES = [
    WireFormat(
        parse_collection(
            {"name": "fuzz", "mechanism": m, "epsilon": 1.0, "key_count": 6, "value_range": [0.0, 1.0]}
        )
    )
    for m in ("kvue", "pckv_ue", "pckv_grr", "ioh_oue", "olh", "privkvm")
]


def one_input(data: bytes) -> None:
    for wire in WIRES:
        decoded = wire.decode([data], [NOW_MS])
        accepted = 1 if decoded.message.size else 0
        if accepted + len(decoded.rejected) != 1:
            raise AssertionError(f"message accounted {accepted + len(decoded.rejected)} times")
        for _, reason, _ in decoded.rejected:
            if reason not in REASONS:
                raise AssertionError(f"undocumented reason {reason!r}")
        if accepted:
            valid, _, _ = wire.mechanism.validate_coded(decoded.reports)
            if not valid.all():
                raise AssertionError("an invalid report was accepted")


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
