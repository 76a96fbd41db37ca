"""A collection: what devices report and how the aggregator turns it into statistics.

One TOML file is shared by devices and aggregator so that both agree, by construction,
on the mechanism, its parameters, the key names and the value range. Everything that
changes how a report is produced or read enters the collection *digest*, which every
report carries (``cfg``, ``docs/wire-format.md``); a report whose digest differs is rejected, never
silently folded (the RAPPOR lesson).

Every field, its type, default, range and digest flag is declared once in
:mod:`kvldp.common.spec.collection_spec`, and rendered into ``docs/collection.md``.
``privacy.report_period`` becomes the aggregator's ledger rule (one report per device
per period) and cannot be combined with ``aggregate.max_reports_per_device``.

A collection has two mechanisms, the same object unless ``privacy.instantaneous_epsilon``
is set: :attr:`Collection.mechanism` is the device's (its client makes the memoized
report), :attr:`Collection.estimation_mechanism` the channel the server receives, the
device's report randomized again at every send (``Mechanism.composed``). The aggregator
decodes, folds and estimates with the latter.

The file is read and written by :mod:`kvldp.common.config.collection_file` (the ``[aggregate]``
table by :mod:`kvldp.common.config.aggregate_config`); invalid files raise
:class:`~kvldp.common.spec.collection_fields.InvalidCollection` naming the field. This module
holds what a validated collection is: its topics, its digest, its conditional queries
and the mapping of raw values to and from [-1, 1].
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from kvldp.common.channel.instantaneous import InstantaneousRandomizer
from kvldp.common.config.aggregate_config import AggregateConfig
from kvldp.common.estimation.conditional import ConditionalQuery, InvalidQuery, parse_query
from kvldp.common.mechanisms.base import Mechanism
from kvldp.common.mechanisms.ioh import JointStateMechanism
from kvldp.common.primitives import FloatArray
from kvldp.common.spec.collection_fields import InvalidCollection
from kvldp.common.spec.privacy import PrivacyConfig

#: largest d for which "all_pairs" expands (d (d - 1) * 2 exported queries)
MAX_ALL_PAIRS_KEYS = 16


@dataclass(frozen=True)
class Collection:
    """A validated collection; build it with :func:`~kvldp.common.config.collection_file.load_collection`
    or :func:`~kvldp.common.config.collection_file.parse_collection`."""

    name: str
    mechanism_name: str
    epsilon: float
    keys: tuple[str, ...]
    value_range: tuple[float, float]
    clip_values: bool
    params: Mapping[str, Any]
    aggregate: AggregateConfig
    mechanism: Mechanism
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)

    @property
    def d(self) -> int:
        return len(self.keys)

    @property
    def reports_topic(self) -> str:
        return f"kvldp.{self.name}.reports"

    @property
    def dlq_topic(self) -> str:
        return f"kvldp.{self.name}.dlq"

    @property
    def state_topic(self) -> str:
        return f"kvldp.{self.name}.state"

    @property
    def consumer_group(self) -> str:
        return f"kvldp.{self.name}.aggregator"

    @cached_property
    def digest(self) -> int:
        """uint32 over everything that shapes a report: mechanism config, keys, value range,
        and the ``[privacy]`` table when there is one."""
        shape: dict[str, Any] = {
            "mechanism": self.mechanism.config,
            "keys": list(self.keys),
            "value_range": list(self.value_range),
            "clip_values": self.clip_values,
        }
        privacy = self.privacy.as_table()
        if privacy:
            shape["privacy"] = privacy
        canonical = json.dumps(
            shape,
            sort_keys=True,
            separators=(",", ":"),
        )
        return int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:4], "big")

    @cached_property
    def estimation_mechanism(self) -> Mechanism:
        """The mechanism of the reports the server receives: with instantaneous
        randomization, the composed channel (the device's memoized report randomized again
        at every send), whose estimators, standard errors, plausibility rule and audit are
        the composed channel's; otherwise the device's mechanism itself."""
        eps1 = self.privacy.instantaneous_epsilon
        return self.mechanism if eps1 is None else self.mechanism.composed(eps1)

    @property
    def instantaneous_randomizer(self) -> InstantaneousRandomizer | None:
        """The randomizer a device applies to every send of its memoized report (None
        without ``privacy.instantaneous_epsilon``): the second half of
        :attr:`estimation_mechanism`."""
        composition = self.estimation_mechanism.composition
        return None if composition is None else composition.randomizer

    def conditional_queries(self) -> list[ConditionalQuery]:
        """The conditional queries to export: the parsed ``aggregate.conditions``, where
        ``"all_pairs"`` stands for f(k | j=1) and f(k | j=0) for every ordered pair."""
        conditions = self.aggregate.conditions
        if not conditions:
            return []
        if not isinstance(self.mechanism, JointStateMechanism):
            raise InvalidCollection(
                f"aggregate.conditions: {self.mechanism_name} does not collect joint key states "
                "(use ioh, ioh_oue or ioh_hrr)"
            )
        order = getattr(self.mechanism, "order", self.d)
        queries: list[ConditionalQuery] = []
        for text in conditions:
            if text == "all_pairs":
                if self.d > MAX_ALL_PAIRS_KEYS:
                    raise InvalidCollection(
                        f"aggregate.conditions: all_pairs over {self.d} keys would export "
                        f"{2 * self.d * (self.d - 1)} queries; it is limited to d <= {MAX_ALL_PAIRS_KEYS}"
                    )
                if order < 2:
                    raise InvalidCollection("aggregate.conditions: all_pairs needs order >= 2")
                queries += [
                    ConditionalQuery.build(self.d, k, {j: present})
                    for k in range(self.d)
                    for j in range(self.d)
                    if j != k
                    for present in (1, 0)
                ]
                continue
            try:
                query = parse_query(text, list(self.keys))
            except InvalidQuery as exc:
                raise InvalidCollection(f"aggregate.conditions: {text!r}: {exc}") from None
            touched = 1 + len(query.condition.pairs())
            if touched > order:
                raise InvalidCollection(
                    f"aggregate.conditions: {text!r} touches {touched} keys; {self.mechanism_name} with "
                    f"order {order} answers queries over at most {order}"
                )
            queries.append(query)
        return queries

    def key_index(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.keys)}

    def normalise(self, raw: FloatArray) -> FloatArray:
        """Raw values -> [-1, 1] (clipped first if ``clip_values``; otherwise out-of-range
        values are an error, so that a misconfigured range cannot bias the means silently)."""
        lo, hi = self.value_range
        values = np.asarray(raw, dtype=np.float64)
        if self.clip_values:
            values = np.clip(values, lo, hi)
        bad = ~np.isfinite(values) | (values < lo) | (values > hi)
        if np.any(bad):
            first = float(values[np.flatnonzero(bad)[0]])
            raise InvalidCollection(
                f"value {first!r} is outside value_range [{lo:g}, {hi:g}] of collection {self.name} "
                "(set clip_values = true to clip on the device)"
            )
        return np.clip((values - lo) / (hi - lo) * 2.0 - 1.0, -1.0, 1.0)

    def raw_mean(self, mean: FloatArray) -> FloatArray:
        """A mean in [-1, 1] back in the collection's units."""
        lo, hi = self.value_range
        return np.asarray(lo + (np.asarray(mean) + 1.0) * (hi - lo) / 2.0, dtype=np.float64)

    def raw_scale(self, stderr: FloatArray) -> FloatArray:
        """A standard error of a normalised mean in the collection's units."""
        lo, hi = self.value_range
        return np.asarray(np.asarray(stderr) * (hi - lo) / 2.0, dtype=np.float64)
