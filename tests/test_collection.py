"""Collection files: validation names the field; digests change with anything that shapes reports."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvldp.common.config.collection_file import (
    collection_table,
    collection_toml,
    load_collection,
    parse_collection,
)
from kvldp.common.spec.collection_fields import InvalidCollection

from support.package import REPO

#: the collection files shipped with the deployment
SHIPPED = sorted((REPO / "deploy" / "collections").glob("*.toml"))

BASE: dict[str, Any] = {
    "name": "shop",
    "mechanism": "kvue",
    "epsilon": 1.0,
    "keys": ["a", "b", "c"],
    "value_range": [0.0, 10.0],
}


def with_(**changes: Any) -> dict[str, Any]:
    table = {**BASE, **changes}
    return {k: v for k, v in table.items() if v is not None}


@pytest.mark.parametrize(
    ("table", "field"),
    [
        (with_(name=None), "name: required"),
        (with_(name="bad name"), "name:"),
        (with_(mechanism="nope"), "mechanism: unknown mechanism 'nope'"),
        (with_(epsilon=-1), "epsilon: must be positive"),
        (with_(epsilon="1"), "epsilon: expected a finite number"),
        (with_(keys=["a", "a"]), "keys: 'a' appears twice"),
        (with_(keys=["a b"]), "keys: 'a b' is not a key name"),
        (with_(keys=None), "keys: required"),
        (with_(key_count=3), "keys: give either keys or key_count"),
        (with_(value_range=[1, 1]), "value_range: low 1 must be below high 1"),
        (with_(value_range=[0]), "value_range: expected [low, high]"),
        (with_(params={"ell": 2}), "params: mechanism kvue has no parameter 'ell'"),
        (with_(aggregate={"estimators": ["em4"]}), "aggregate.estimators: kvue has no estimator 'em4'"),
        (with_(aggregate={"windows": ["5 minutes"]}), "aggregate.windows:"),
        (with_(aggregate={"refit_interval_s": 0}), "aggregate.refit_interval_s"),
        (with_(aggregate={"partitions": 0}), "aggregate.partitions"),
        (with_(aggregate={"max_message_bytes": 10}), "aggregate.max_message_bytes"),
        (with_(aggregate={"conditions": ["a | b=1"]}), "aggregate.conditions: kvue does not collect joint"),
        (with_(aggregate={"typo": 1}), "aggregate.typo: unknown field"),
        (with_(extra=1), "extra: unknown field"),
        (with_(privacy={"memoise": True}), "privacy.memoise: unknown field"),
        (with_(privacy={"memoize": "yes"}), "privacy.memoize: expected true or false"),
        (with_(privacy={"lifetime_epsilon": 0}), "privacy.lifetime_epsilon: expected a positive"),
        (with_(privacy={"lifetime_epsilon": -2.0}), "privacy.lifetime_epsilon: expected a positive"),
        (with_(privacy={"report_period": "hourly"}), "privacy.report_period: 'hourly' is not a duration"),
        (with_(privacy={"report_period": "0h"}), "privacy.report_period: '0h' is not a duration"),
        (with_(privacy=[1]), "privacy: expected a table"),
        (
            with_(privacy={"report_period": "1h"}, aggregate={"max_reports_per_device": 2}),
            "privacy.report_period: already one report per device and period",
        ),
        (
            with_(mechanism="privkvm", privacy={"memoize": True}),
            "privacy.memoize: privkvm is interactive",
        ),
        (
            with_(privacy={"instantaneous_epsilon": 0.5}),
            "privacy.instantaneous_epsilon: randomizes every send of a memoized report again; it needs memoize",
        ),
        (
            with_(privacy={"memoize": True, "instantaneous_epsilon": 0}),
            "privacy.instantaneous_epsilon: expected a positive finite number",
        ),
        (
            with_(privacy={"memoize": True, "instantaneous_epsilon": 1.0}),
            "privacy.instantaneous_epsilon: 1 must be below epsilon",
        ),
        (
            with_(mechanism="privkv", privacy={"memoize": True, "instantaneous_epsilon": 0.8}),
            "privacy.instantaneous_epsilon: privkv: a per-report epsilon of 0.8 must lie below the "
            "mechanism's own exact per-report level, 0.719",
        ),
    ],
)
def test_invalid_collections_name_the_field(table: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidCollection, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_collection(table, source="x.toml")


def test_defaults_topics_and_key_count() -> None:
    c = parse_collection(with_(keys=None, key_count=4))
    assert c.keys == ("k0", "k1", "k2", "k3")
    assert (c.reports_topic, c.dlq_topic, c.consumer_group) == (
        "kvldp.shop.reports",
        "kvldp.shop.dlq",
        "kvldp.shop.aggregator",
    )
    assert c.aggregate.estimators == ("unbiased", "em")
    assert [w.name for w in c.aggregate.windows] == ["all"]
    windows = parse_collection(with_(aggregate={"windows": ["5m", "1h"]})).aggregate.windows
    assert [(w.name, w.seconds) for w in windows] == [("5m", 300), ("1h", 3600), ("all", None)]


def test_digest_covers_what_shapes_a_report() -> None:
    base = parse_collection(BASE).digest
    assert parse_collection(with_(epsilon=1.5)).digest != base
    assert parse_collection(with_(keys=["a", "c", "b"])).digest != base
    assert parse_collection(with_(value_range=[0.0, 11.0])).digest != base
    assert parse_collection(with_(aggregate={"refit_interval_s": 9})).digest == base  # server-side only
    # the [privacy] table: each field changes the digest; an empty table is no table
    assert parse_collection(with_(privacy={})).digest == base
    privacy = [
        {"memoize": True},
        {"lifetime_epsilon": 5.0},
        {"report_period": "1h"},
        {"report_period": "2h"},
        {"memoize": True, "instantaneous_epsilon": 0.5},
        {"memoize": True, "instantaneous_epsilon": 0.25},
    ]
    digests = {parse_collection(with_(privacy=p)).digest for p in privacy}
    assert len(digests) == len(privacy) and base not in digests


def test_instantaneous_randomization_gives_the_server_the_composed_channel() -> None:
    """The device keeps its mechanism (the memoized report); the aggregator decodes, folds and
    estimates with the composed channel. Without the option both are one object."""
    plain = parse_collection(with_(privacy={"memoize": True}))
    assert plain.estimation_mechanism is plain.mechanism
    c = parse_collection(with_(privacy={"memoize": True, "instantaneous_epsilon": 0.4}))
    assert c.mechanism.epsilon == 1.0 and c.mechanism.composition is None
    channel = c.estimation_mechanism
    assert channel.composition is not None and channel.composition.device is c.mechanism
    assert channel.epsilon == 0.4 and channel.fields() == c.mechanism.fields()
    assert c.privacy.as_table() == {"memoize": True, "instantaneous_epsilon": 0.4}
    again = parse_collection(tomllib.loads(collection_toml(c)))
    assert again.digest == c.digest and again.privacy == c.privacy


def test_report_period_is_the_ledger_rule_and_reads_back() -> None:
    c = parse_collection(with_(privacy={"memoize": True, "report_period": "30m", "lifetime_epsilon": 12}))
    assert (c.aggregate.max_reports_per_device, c.aggregate.budget_window_s) == (1, 1800)
    assert (c.privacy.memoize, c.privacy.report_period_s, c.privacy.lifetime_epsilon) == (True, 1800, 12.0)
    again = parse_collection(tomllib.loads(collection_toml(c)))
    assert collection_table(again) == collection_table(c) and again.digest == c.digest


def test_normalise_rejects_or_clips_out_of_range_values() -> None:
    c = parse_collection(BASE)
    np.testing.assert_allclose(c.normalise(np.array([0.0, 5.0, 10.0])), [-1.0, 0.0, 1.0])
    with pytest.raises(InvalidCollection, match="outside value_range"):
        c.normalise(np.array([11.0]))
    clipped = parse_collection(with_(clip_values=True))
    np.testing.assert_allclose(clipped.normalise(np.array([-3.0, 12.0])), [-1.0, 1.0])
    np.testing.assert_allclose(c.raw_mean(np.array([-1.0, 0.5])), [0.0, 7.5])
    np.testing.assert_allclose(c.raw_scale(np.array([0.1])), [0.5])


def test_load_collection_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidCollection, match="does not exist"):
        load_collection(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = ")
    with pytest.raises(InvalidCollection, match="not valid TOML"):
        load_collection(bad)


@pytest.mark.parametrize("path", SHIPPED)
def test_shipped_collections_are_valid(path: Path) -> None:
    assert load_collection(path).name


@pytest.mark.parametrize("path", SHIPPED)
def test_a_collection_written_as_toml_reads_back_the_same(path: Path) -> None:
    original = load_collection(path)
    again = parse_collection(tomllib.loads(collection_toml(original)))
    assert collection_table(again) == collection_table(original)
    assert again.digest == original.digest
