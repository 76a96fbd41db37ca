"""docs/collection.md and the field declarations it is rendered from agree with the loaders.

The page is rendered from :mod:`kvldp.common.spec.collection_spec`; these tests check the
committed page against the rendering, and every declared default, integer bound, "> 0"
range and digest flag against what parsing a collection file and its digest do.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kvldp.common.config.aggregate_config import parse_window
from kvldp.common.config.collection_file import collection_table, parse_collection
from kvldp.common.config.collection_reference import main, render
from kvldp.common.spec.collection_fields import InvalidCollection
from kvldp.common.spec.collection_spec import AGGREGATE, PRIVACY, REQUIRED, TOP_LEVEL, FieldSpec

DOC = Path(__file__).parents[1] / "docs" / "collection.md"
BASE: dict[str, Any] = {
    "name": "ref",
    "mechanism": "pckv_ue",
    "epsilon": 1.0,
    "keys": ["a", "b", "c"],
    "value_range": [0.0, 1.0],
}
#: every declared field (by table) with a valid value other than its default
OTHER: dict[str, dict[str, Any]] = {
    "": {
        "name": "other",
        "mechanism": "pckv_grr",
        "epsilon": 2.0,
        "keys": ["a", "b", "d"],
        "key_count": 3,
        "value_range": [0.0, 2.0],
        "clip_values": True,
    },
    "aggregate": {
        "refit_interval_s": 1.0,
        "estimators": ["unbiased"],
        "windows": ["1h", "all"],
        "conditions": [],
        "partitions": 2,
        "replication_factor": 3,
        "min_insync_replicas": 1,
        "max_message_bytes": 2048,
        "max_report_age_s": 60.0,
        "max_clock_skew_s": 10.0,
        "dedup_horizon": 0,
        "dedup_window": "10m",
        "dedup_max_ids": 5,
        "max_reports_per_device": 3,
        "budget_window": "1h",
        "max_record_lead": "10m",
    },
    "privacy": {
        "memoize": True,
        "lifetime_epsilon": 5.0,
        "report_period": "1h",
        "instantaneous_epsilon": 0.5,
    },
}
#: what a field needs besides itself (instantaneous randomization randomizes a memoized report)
NEEDS: dict[str, dict[str, Any]] = {"instantaneous_epsilon": {"memoize": True}}
TABLES: dict[str, tuple[FieldSpec, ...]] = {"": TOP_LEVEL, "aggregate": AGGREGATE, "privacy": PRIVACY}
#: the attribute of a parsed [privacy] table holding each field
PRIVACY_ATTRIBUTE = {
    "memoize": "memoize",
    "lifetime_epsilon": "lifetime_epsilon",
    "report_period": "report_period_s",
    "instantaneous_epsilon": "instantaneous_epsilon",
}


def with_field(table: str, name: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(BASE)
    if table == "":
        if name == "key_count":
            del out["keys"]
        out[name] = value
    else:
        out.setdefault(table, {}).update({**NEEDS.get(name, {}), name: value})
    return out


def test_the_committed_page_is_the_rendering_of_the_declarations() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/collection.md is out of date: python -m kvldp.common.config.collection_reference --out docs/collection.md"
    )


def test_the_generator_takes_help_and_writes_where_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0 and "--out" in capsys.readouterr().out
    assert main(["--out", str(tmp_path / "c.md")]) == 0 and (tmp_path / "c.md").read_text() == render()


def test_every_declared_field_has_a_test_value_and_the_readme_links_the_page() -> None:
    assert {table: set(values) for table, values in OTHER.items()} == {
        table: {spec.name for spec in fields} for table, fields in TABLES.items()
    }
    assert "(docs/collection.md)" in (DOC.parents[1] / "README.md").read_text()


def effective(table: str, name: str) -> Any:
    """What the loader makes of the field ``name`` when it is left out."""
    collection = parse_collection(BASE)
    if table == "privacy":
        return getattr(collection.privacy, PRIVACY_ATTRIBUTE[name])
    written = collection_table(collection)
    return written[name] if table == "" else written[table][name]


@pytest.mark.parametrize(
    ("table", "spec"),
    [(t, s) for t, fields in TABLES.items() for s in fields if s.default != REQUIRED],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_each_declared_default_is_what_the_loader_applies(table: str, spec: FieldSpec) -> None:
    if spec.name == "key_count":  # the alternative to keys: absent, keys are required
        return
    got = effective(table, spec.name)
    if spec.default == "none":
        assert got is None
        return
    declared = tomllib.loads(f"v = {spec.default}")["v"]
    if spec.kind == "duration":
        assert parse_window(got).seconds == parse_window(declared).seconds
    elif table == "privacy":
        assert got == declared
    else:
        assert got == declared and type(got) is type(declared)


@pytest.mark.parametrize(
    ("table", "spec"),
    [
        (t, s)
        for t, fields in TABLES.items()
        for s in fields
        if s.low is not None or s.bounds.startswith("> 0")
    ],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_each_declared_range_is_what_the_loader_checks(table: str, spec: FieldSpec) -> None:
    def parses(value: Any) -> bool:
        data = with_field(table, spec.name, value)
        if spec.name == "min_insync_replicas":  # bounded by replication_factor as well
            data["aggregate"]["replication_factor"] = 32
        try:
            parse_collection(data)
        except InvalidCollection as exc:
            assert spec.name in str(exc)
            return False
        return True

    if spec.low is None:
        assert parses(0.5) and not parses(0.0) and not parses(-1.0)
    else:
        low, high = spec.integer_bounds()
        assert parses(low) and parses(high) and not parses(low - 1) and not parses(high + 1)


@pytest.mark.parametrize(
    ("table", "spec"),
    [(t, s) for t, fields in TABLES.items() for s in fields],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_each_declared_digest_flag_is_what_the_digest_does(table: str, spec: FieldSpec) -> None:
    base = copy.deepcopy(BASE)
    if spec.name in NEEDS:
        base[table] = dict(NEEDS[spec.name])
    before = parse_collection(base).digest
    after = parse_collection(with_field(table, spec.name, OTHER[table][spec.name])).digest
    assert (after != before) is spec.in_digest


def test_mechanism_parameters_are_in_the_digest() -> None:
    before = parse_collection(BASE).digest
    assert parse_collection({**BASE, "params": {"ell": 2}}).digest != before
    assert parse_collection({**BASE, "params": {"ell": 1}}).digest == before  # the default
