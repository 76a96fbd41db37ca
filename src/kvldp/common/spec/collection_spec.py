"""Every field of a collection file, declared once: its type, default, range, digest flag and meaning.

A collection file has top-level fields and three tables (``[params]``, ``[aggregate]``,
``[privacy]``). Each field other than the mechanism parameters (declared by each
mechanism, :mod:`kvldp.common.spec.params`) is a :class:`FieldSpec` here. The loaders take
their known field names and integer bounds from these declarations
(:mod:`kvldp.common.config.collection_file`, :mod:`kvldp.common.config.aggregate_config`,
:mod:`kvldp.common.spec.privacy`), and :mod:`kvldp.common.config.collection_reference` renders the
reference page ``docs/collection.md`` from them; the test suite checks each declared
default, bound and digest flag against what the loaders and the digest do.

A field *in the digest* changes the collection digest (:attr:`kvldp.common.config.collection.Collection.digest`),
which every report carries: devices and aggregator must then use the same value.
This module imports nothing of kvldp, so that every loader can read it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Kafka's default message limit: a cap above it could never be delivered
KAFKA_MESSAGE_LIMIT = 1_000_000
#: the ``default`` of a field that must be given
REQUIRED = "required"
#: the sub-tables of a collection file
TABLES = ("params", "aggregate", "privacy")


@dataclass(frozen=True)
class FieldSpec:
    """One field: ``name``, its TOML ``kind``, ``default`` (as written in TOML, or
    :data:`REQUIRED`, or ``none`` for a field whose absence turns its rule off), the
    ``bounds`` it must keep (text), whether it is ``in_digest``, and ``doc``. Integer
    fields give ``low`` and ``high`` (inclusive), which the loader checks."""

    name: str
    kind: str
    default: str
    bounds: str
    in_digest: bool
    doc: str
    low: int | None = None
    high: int | None = None

    def integer_bounds(self) -> tuple[int, int]:
        """``(low, high)`` of an integer field."""
        if self.low is None or self.high is None:
            raise TypeError(f"{self.name} is not a bounded integer field")
        return self.low, self.high


DURATION = "`Ns`, `Nm`, `Nh` or `Nd` (N ≥ 1: seconds, minutes, hours, days)"

TOP_LEVEL = (
    FieldSpec(
        "name",
        "string",
        REQUIRED,
        "1-100 letters, digits, `_` or `-`, starting with a letter or digit",
        False,
        "names the topics `kvldp.<name>.reports`, `.dlq`, `.state` and `.control`; reports carry it "
        "(`col`), and a report of another name is refused (`wrong_collection`)",
    ),
    FieldSpec(
        "mechanism",
        "string",
        REQUIRED,
        "a name `kvldp mechanisms` lists",
        True,
        "the local randomizer devices run and the estimators the aggregator runs",
    ),
    FieldSpec("epsilon", "number", REQUIRED, "> 0", True, "the privacy budget of one report"),
    FieldSpec(
        "keys",
        "list of strings",
        REQUIRED,
        "not empty; distinct; 1-128 characters each, no white space, `|`, `,` or `=`",
        True,
        "the key names, in report order; give `keys` or `key_count`",
    ),
    FieldSpec(
        "key_count",
        "integer",
        "none",
        "≥ 1",
        True,
        "instead of `keys`: the keys `k0` ... `k<key_count - 1>`",
    ),
    FieldSpec(
        "value_range",
        "[low, high]",
        REQUIRED,
        "two finite numbers, low < high",
        True,
        "raw values, normalised into [-1, 1] on the device; means are reported in these units",
    ),
    FieldSpec(
        "clip_values",
        "boolean",
        "false",
        "`true` or `false`",
        True,
        "`true`: clip raw values into `value_range` on the device; `false`: a value outside it is an error",
    ),
)

AGGREGATE = (
    FieldSpec(
        "refit_interval_s", "number", "5.0", "> 0", False, "seconds between two refits of the estimates"
    ),
    FieldSpec(
        "estimators",
        "list of strings",
        '["unbiased", "em"]',
        "estimators of the mechanism (`kvldp mechanisms --json`), at least one; the default keeps "
        "those the mechanism has",
        False,
        "the estimators exported (label `estimator`)",
    ),
    FieldSpec(
        "windows",
        "list of strings",
        '["all"]',
        f"{DURATION} or `all`, each once; `all` is added when missing",
        False,
        "sliding windows of report time exported (label `window`)",
    ),
    FieldSpec(
        "conditions",
        "list of strings",
        "[]",
        '`"k | j=1, l=0"` queries over at most the mechanism\'s `order` keys, or `"all_pairs"` '
        "(d ≤ 16); joint-state mechanisms (`ioh`, `ioh_oue`, `ioh_hrr`) only",
        False,
        "conditional frequencies and means exported",
    ),
    FieldSpec(
        "partitions", "integer", "4", "1 to 1024", False, "partitions of the topics kvldp creates", 1, 1024
    ),
    FieldSpec(
        "replication_factor",
        "integer",
        "1",
        "1 to 32",
        False,
        "copies of every topic kvldp creates (3 on a production cluster)",
        1,
        32,
    ),
    FieldSpec(
        "min_insync_replicas",
        "integer",
        "1",
        "1 to 32, at most `replication_factor`",
        False,
        "replicas that must hold a write before an `acks=all` send succeeds (2 with 3 copies)",
        1,
        32,
    ),
    FieldSpec(
        "max_message_bytes",
        "integer",
        "65536",
        f"1024 to {KAFKA_MESSAGE_LIMIT} (Kafka's default limit); one report must fit",
        False,
        "the largest message a producer may send; batches are cut to fit it",
        1024,
        KAFKA_MESSAGE_LIMIT,
    ),
    FieldSpec(
        "max_report_age_s",
        "number",
        "604800.0",
        "> 0",
        False,
        "a report whose device time is older than this, against its record's time, is refused (`stale`)",
    ),
    FieldSpec(
        "max_clock_skew_s",
        "number",
        "300.0",
        "> 0",
        False,
        "a report whose device time is further ahead than this is refused (`future`)",
    ),
    FieldSpec(
        "dedup_horizon",
        "integer",
        "100000",
        "0 (off) to 10000000",
        False,
        "the last this many id-tagged reports of a partition are remembered, to count a re-sent "
        "report once; 0 turns de-duplication off (docs/gateway.md#exactly-once)",
        0,
        10_000_000,
    ),
    FieldSpec(
        "dedup_window",
        "duration",
        '"5m"',
        DURATION,
        False,
        "the report ids of this much Kafka record time are remembered as well, at any report rate up "
        "to `dedup_max_ids` per window: keep it above the devices' retry deadline (the SDK's 120 s) "
        "plus their request timeout (30 s) and the spread of the gateways' clocks",
    ),
    FieldSpec(
        "dedup_max_ids",
        "integer",
        "2000000",
        "0 to 3000000 (never below `dedup_horizon`)",
        False,
        "the most report ids a partition remembers (80-100 bytes each in memory, 16 in a checkpoint "
        "or a worker's snapshot, which the state topic takes up to 64 MiB); past it the oldest are "
        "forgotten first, so `dedup_window` holds up to this many tagged reports per window",
        0,
        3_000_000,
    ),
    FieldSpec(
        "max_reports_per_device",
        "integer",
        "0",
        "0 (off) to 100000000; not with `[privacy] report_period`",
        False,
        "the aggregator's ledger folds at most this many reports per device (record key) and "
        "`budget_window` and refuses the rest (`budget_exceeded`); devices mirror it (`SKIPPED_BUDGET`)",
        0,
        100_000_000,
    ),
    FieldSpec(
        "budget_window",
        "duration",
        '"1d"',
        DURATION,
        False,
        "the tumbling window of `max_reports_per_device`: floor(record timestamp / window)",
    ),
    FieldSpec(
        "max_record_lead",
        "duration",
        '"5m"',
        DURATION,
        False,
        "a message whose Kafka record timestamp is further ahead of the aggregator's clock than this "
        "is refused (`record_future`): it makes no time bucket and does not move the budget ledger's "
        "window; there is no bound behind (late, re-read and replayed records keep their time)",
    ),
)

PRIVACY = (
    FieldSpec(
        "memoize",
        "boolean",
        "false",
        "`true` or `false`; not with `privkvm`",
        True,
        "an unchanged device state re-sends its stored report, at no cost",
    ),
    FieldSpec(
        "lifetime_epsilon",
        "number",
        "none",
        "> 0; none: no cap",
        True,
        "the most a device ever spends on this collection; a report past it is not sent",
    ),
    FieldSpec(
        "report_period",
        "duration",
        "none",
        f"{DURATION}; not with `privkvm` or `[aggregate] max_reports_per_device`",
        True,
        "one report per device and period, kept by the device (`SKIPPED_PERIOD`) and by the "
        "aggregator's ledger (`budget_exceeded`)",
    ),
    FieldSpec(
        "instantaneous_epsilon",
        "number",
        "none",
        "> 0 and below `epsilon` (and the mechanism's exact per-report level); needs `memoize = true`",
        True,
        "every send of a memoized report is randomized again (RAPPOR's instantaneous randomized "
        "response): one report says at most this much about the device's input, a state at most "
        "`epsilon`, and a re-send no longer shows that the state did not change",
    ),
)


def names(fields: tuple[FieldSpec, ...]) -> frozenset[str]:
    """The names of ``fields``."""
    return frozenset(spec.name for spec in fields)


def spec_of(fields: tuple[FieldSpec, ...], name: str) -> FieldSpec:
    """The declaration of the field ``name`` among ``fields``."""
    return next(spec for spec in fields if spec.name == name)
