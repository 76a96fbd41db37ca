"""The reference page of the collection file, rendered from the field declarations in code.

``docs/collection.md`` lists every field of a collection file with its type, default,
range, whether it is in the collection digest, and its meaning. It is rendered by
:func:`render` from :mod:`kvldp.common.spec.collection_spec` (top-level, ``[aggregate]`` and
``[privacy]`` fields) and from each mechanism's declared parameters
(:mod:`kvldp.common.spec.params`), so that it cannot drift from the loaders: the test suite
checks that the committed page equals :func:`render`'s text.
``python -m kvldp.common.config.collection_reference --out docs/collection.md`` rewrites it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvldp.common.mechanisms import get, names
from kvldp.common.spec.collection_spec import AGGREGATE, PRIVACY, REQUIRED, TOP_LEVEL, FieldSpec
from kvldp.common.spec.params import Param

INTRO = """\
# The collection file

A collection file (TOML) says what devices report and how the aggregator turns the
reports into statistics. Devices (the SDK, `kvldp produce`, `kvldp gateway`) and the
aggregator read the same file, so they agree by construction. `deploy/collections/` has
examples; `kvldp aggregate`, `produce` and `audit` refuse an invalid file with one line
naming the field.

This page is generated from the field declarations in the code
(`python -m kvldp.common.config.collection_reference --out docs/collection.md`), and the test
suite checks that it matches them: every default, range and digest flag below is the
one the loader applies.

```toml
name = "checkout"
mechanism = "pckv_ue"
epsilon = 2.0
keys = ["hamburger", "fries", "pepsi"]
value_range = [0.0, 10.0]

[params]
ell = 2

[aggregate]
windows = ["5m", "1h", "all"]

[privacy]
report_period = "1d"
```

## The digest

The *collection digest* is a 32-bit number: the first 4 bytes (big-endian) of SHA-256
over the canonical JSON of the fields marked *in the digest* below: the mechanism, ε,
the number of keys and every mechanism parameter (a parameter left out counts as its
default), the key names, `value_range`, `clip_values`, and the `[privacy]` fields that
differ from their defaults. It identifies everything that shapes a report.

Who compares it:

- **The aggregator.** Every report carries the digest of the file its device read (the
  wire field `cfg`, `docs/wire-format.md`). A report whose digest is not the
  aggregator's is never folded: it goes to the dead-letter topic as `config_mismatch`.
- **The gateway.** It refuses such a report at the edge with 409 `config_mismatch`; the
  SDK does not retry it (`ReportRefused`).
- **The aggregator's state.** Checkpoints (`--state-dir`) and scale-out snapshots hold the
  collection's name and digest; an aggregator started with a changed digest refuses them
  and asks for another `--state-dir`.
- **The device's state file** (`state_path`) holds the digest too; the SDK refuses a
  file of another digest (`InvalidDeviceState`).

What changing a field in the digest implies: it is a new configuration. Reports of
devices that still have the old file are refused until they get the new one, so update
devices and aggregator together, or start a collection under a new `name`. Estimates of
the two configurations are not combined. A device's state file of the old digest holds
the ε it spent: keep it, since spends of both configurations add up (sequential
composition).

Fields not in the digest can differ between devices and aggregator without a report
being refused. `name` is checked on its own (reports carry it as `col`). The `[aggregate]`
fields are the aggregator's, except three that devices read too: `max_message_bytes`
(the size of their batches) and `max_reports_per_device` per `budget_window` (the count
they mirror); give devices a change of these as well, or they keep cutting batches and
counting reports by the old values.
"""


def _row(*cells: str) -> str:
    """A table row; a ``|`` inside a cell is escaped so that it does not split the cell."""
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _default(spec: FieldSpec) -> str:
    return (
        "required" if spec.default == REQUIRED else f"`{spec.default}`" if spec.default != "none" else "none"
    )


def _field_table(fields: tuple[FieldSpec, ...], prefix: str) -> list[str]:
    rows = [
        "| field | type | default | range | in the digest | meaning |",
        "|---|---|---|---|---|---|",
    ]
    rows += [
        _row(
            f"`{prefix}{spec.name}`",
            spec.kind,
            _default(spec),
            spec.bounds,
            "yes" if spec.in_digest else "no",
            spec.doc,
        )
        for spec in fields
    ]
    return rows


def _param_range(param: Param) -> str:
    if param.choices is not None:
        return ", ".join(f"`{choice}`" for choice in param.choices)
    if param.kind is bool:
        return "`true` or `false`"
    return param.check_doc or "any"


def _param_default(param: Param) -> str:
    value = param.default
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value).replace("'", '"')
    return f"`{text}`"


def _params_section() -> list[str]:
    lines = [
        "## `[params]`: mechanism parameters",
        "",
        "Each mechanism declares its own parameters; all of them are in the digest. A",
        "parameter left out takes its default. `kvldp mechanisms --json` lists the same.",
        "",
    ]
    for name in names():
        spec = get(name).params_spec
        if not spec:
            lines += [f"- `{name}`: no parameters"]
    lines.append("")
    for name in names():
        spec = get(name).params_spec
        if not spec:
            continue
        lines += [
            f"### `{name}`",
            "",
            "| parameter | type | default | range | meaning |",
            "|---|---|---|---|---|",
        ]
        lines += [
            _row(f"`{p.name}`", p.kind.__name__, _param_default(p), _param_range(p), p.doc) for p in spec
        ]
        lines.append("")
    return lines


def render() -> str:
    """The text of ``docs/collection.md``."""
    lines = [INTRO, "## Top-level fields", "", *_field_table(TOP_LEVEL, ""), ""]
    lines += _params_section()
    lines += [
        "## `[aggregate]`: how the aggregator serves the collection",
        "",
        "None of these is in the digest. Devices read `max_message_bytes`,",
        "`max_reports_per_device` and `budget_window` too; the others are the aggregator's alone.",
        "",
        *_field_table(AGGREGATE, "aggregate."),
        "",
        "## `[privacy]`: a device's privacy over many reports",
        "",
        "All of these are in the digest (a field at its default is left out of it). The",
        "rules and the guarantee they give are in `docs/privacy.md`.",
        "",
        *_field_table(PRIVACY, "privacy."),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvldp.common.config.collection_reference",
        description="print the collection file reference (docs/collection.md), or write it with --out",
    )
    parser.add_argument("--out", metavar="FILE", help="write it to FILE instead of printing it")
    args = parser.parse_args(argv)
    text = render()
    if args.out is None:
        print(text, end="")
    else:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
