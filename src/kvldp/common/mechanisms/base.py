"""The one abstraction of kvldp: a mechanism = client + sufficient statistics + estimators.

A concrete mechanism provides

1. the client: ``perturb_many(users, rng)`` (vectorised, following the paper's algorithm
   step by step) — ``perturb`` for one device is the same code on one row;
2. the statistics: ``stats_shapes`` and ``fold_arrays`` (integer additions only);
3. the estimators: ``_estimate(stats, estimator, options)``;
4. the exact privacy model: ``audit_model`` (see :mod:`kvldp.common.guarantees.privacy_audit`);
5. optionally, the exact one-report plausibility rule: ``plausibility_rule`` and
   ``report_statistic`` (see :mod:`kvldp.common.channel.plausibility`; by default no report is
   implausible);
6. for memoized collections, the instantaneous randomization of its reports
   (:mod:`kvldp.common.channel.instantaneous`): ``randomized_output``, the solve of the
   randomizer's strength and the composed channel, which is again a mechanism (see
   *Composed channels* below).

Adding a mechanism means adding one module and registering it; producer and aggregator
only ever talk to this interface.

Composed channels. :meth:`Mechanism.composed` returns the channel a device's input goes
through when its memoized report (this mechanism's client) is randomized again at every
send: a mechanism with the same fields, statistics and wire, whose client is this
mechanism's client followed by the randomizer, and whose estimators, standard errors,
plausibility rule and exact model are those of the composed channel. Its ``epsilon`` is
the per-report guarantee eps1 the randomizer was solved for; its :attr:`composition`
holds the device's mechanism and the randomizer. Where the composed channel stays in the
mechanism's family it is the mechanism at eps1 (the default of
:meth:`Mechanism._composed_channel`); the other mechanisms build it themselves
(docs/mechanisms.md, *Instantaneous randomization*).
"""

from __future__ import annotations

import abc
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from kvldp.common.channel.instantaneous import InstantaneousRandomizer, RandomizedOutput
from kvldp.common.channel.output_model import OutputModel
from kvldp.common.channel.plausibility import FALSE_REFUSAL_BOUND, RefusalRule
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import (
    Field,
    InvalidReport,
    Report,
    ReportBatch,
    batch_len,
    field_checks,
    row,
    validate_fields,
)
from kvldp.common.data.stats import Stats, StatsMismatch
from kvldp.common.errors import KvldpError
from kvldp.common.estimation.estimate import Estimate
from kvldp.common.spec.params import InvalidParameter, Param, ParamValue, parse_params
from kvldp.common.typed_fields import integer, number

IntArray = NDArray[np.int64]
Validation = tuple[NDArray[np.bool_], NDArray[np.object_]]

#: relative difference under which a per-report epsilon counts as equal to a mechanism's level
_LEVEL_RTOL = 1e-9
#: users perturbed per block by :meth:`Mechanism.collect` (bounds simulator memory)
COLLECT_CHUNK = 1 << 17


class UnknownEstimator(KvldpError):
    """The requested estimator does not exist for this mechanism."""


@dataclass(frozen=True)
class Composition:
    """What a composed channel is made of: the ``device``'s mechanism (the memoized,
    permanent randomized response) and the instantaneous ``randomizer`` of every send."""

    device: Mechanism
    randomizer: InstantaneousRandomizer


class Mechanism(abc.ABC):
    """Base class of every LDP mechanism. Instances are immutable configurations."""

    name: ClassVar[str]
    summary: ClassVar[str]
    #: the privacy notion of one report ("ldp", or "fldp" for FHR)
    notion: str = "ldp"
    #: set on a composed channel (:meth:`composed`): the device's mechanism and the randomizer
    composition: Composition | None = None
    params_spec: ClassVar[tuple[Param, ...]] = ()
    estimator_names: ClassVar[tuple[str, ...]] = ("unbiased", "normsub")
    collects_values: ClassVar[bool] = True
    #: largest key domain the mechanism supports (None: no structural limit) ...
    max_keys: ClassVar[int | None] = None
    #: ... and what to tell a user who asks for more
    max_keys_advice: ClassVar[str] = ""
    #: largest probability that the plausibility rule refuses a genuine report (any input)
    false_refusal_bound: ClassVar[float] = FALSE_REFUSAL_BOUND

    def __init__(self, d: int, epsilon: float, **params: object) -> None:
        keys = integer(
            d,
            lambda v: InvalidParameter(
                f"{self.name}: the number of keys must be a positive integer, got {v!r}"
            ),
            low=1,
        )
        eps = number(
            epsilon,
            lambda v: InvalidParameter(f"{self.name}: epsilon must be a positive finite number, got {v!r}"),
            positive=True,
        )
        if self.max_keys is not None and keys > self.max_keys:
            raise InvalidParameter(
                f"{self.name} supports at most {self.max_keys} keys, got d={d}"
                + (f": {self.max_keys_advice}" if self.max_keys_advice else "")
            )
        self.d = keys
        self.epsilon = eps
        self.params: dict[str, ParamValue] = parse_params(self.params_spec, params, self.name)
        self._setup()

    def _setup(self) -> None:  # noqa: B027 - optional hook, most mechanisms override it
        """Derive probabilities from (d, epsilon, params); raise InvalidParameter on bad combinations."""

    def __repr__(self) -> str:
        if self.composition is not None:
            return f"{self.composition.device!r}.composed({self.epsilon!r})"
        extra = "".join(f", {k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}(d={self.d}, epsilon={self.epsilon!r}{extra})"

    # ----------------------------------------------------------------- configuration
    @property
    def config(self) -> dict[str, Any]:
        """The configuration; a composed channel's is its device's plus the per-report eps1."""
        if self.composition is not None:
            return {**self.composition.device.config, "instantaneous_epsilon": self.epsilon}
        return {"mechanism": self.name, "d": self.d, "epsilon": self.epsilon, "params": dict(self.params)}

    @cached_property
    def digest(self) -> int:
        """uint32 id of the configuration (the wire ``cfg`` field; docs/mechanisms.md, *Statistics and configurations*)."""
        canonical = json.dumps(self.config, sort_keys=True, separators=(",", ":"))
        return int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:4], "big")

    # ----------------------------------------------------------------- report schema
    @abc.abstractmethod
    def fields(self) -> tuple[Field, ...]:
        """Payload fields of one report."""

    def _validate_extra(self, batch: ReportBatch) -> list[tuple[NDArray[np.bool_], str]]:
        """Constraints beyond per-field ranges, as (bad-row mask, reason) pairs."""
        return []

    def plausibility_rule(self) -> RefusalRule | None:
        """The exact refusal region of this configuration over :meth:`report_statistic`
        (docs/plausibility.md), or None. An eps-LDP report of one output symbol (GRR, OLH,
        HR, PCKV-GRR, ...) has positive probability under every input, so no such report is
        implausible and the default is None (FHR, only FLDP: see docs/plausibility.md)."""
        return None

    def report_statistic(self, batch: ReportBatch) -> NDArray[np.int64]:
        """Per row, the index of the value of the statistic the plausibility rule reads."""
        raise NotImplementedError(f"{self.name} has no plausibility statistic")

    def implausible_rows(self, batch: ReportBatch) -> NDArray[np.bool_]:
        """Rows no input makes plausible (docs/plausibility.md); meaningful on rows that pass
        the field and constraint checks. Default: none."""
        rule = self.plausibility_rule()
        if rule is None or not rule.active:
            return np.zeros(batch_len(batch), dtype=bool)
        return rule.refuses(self.report_statistic(batch))

    def has_row_rules(self) -> bool:
        """Whether a report's validity depends on more than each field's domain: a
        mechanism constraint (:meth:`_validate_extra`) or an active plausibility rule."""
        rule = self.plausibility_rule()
        overridden = type(self)._validate_extra is not Mechanism._validate_extra
        return overridden or (rule is not None and rule.active)

    def valid_rows(self, batch: ReportBatch) -> NDArray[np.bool_]:
        """The valid-row mask alone: the hot path of folding and decoding, which needs the
        reasons (:meth:`validate_coded`) only when some row is bad."""
        valid = np.ones(batch_len(batch), dtype=bool)
        for bad, _ in field_checks(batch, self.fields()):
            valid &= ~bad
        for bad, _ in self._validate_extra(batch):
            valid &= ~bad
        valid &= ~self.implausible_rows(batch)
        return valid

    def validate_coded(
        self, batch: ReportBatch
    ) -> tuple[NDArray[np.bool_], NDArray[np.object_], NDArray[np.object_]]:
        """(valid mask, reason code, detail) per row: ``out_of_range`` for a field outside its
        domain (index too large, padding bits set), ``invalid_report`` for a violated
        mechanism constraint, then ``implausible_report`` for a report no input makes
        plausible (:meth:`implausible_rows`). Never raises on bad rows."""
        valid, details = validate_fields(batch, self.fields())
        codes = np.full(valid.shape[0], "", dtype=object)
        codes[~valid] = "out_of_range"
        for bad, reason in self._validate_extra(batch):
            hit = bad & valid
            details[hit] = reason
            codes[hit] = "invalid_report"
            valid &= ~bad
        rule = self.plausibility_rule()
        if rule is not None and rule.active:
            values = self.report_statistic(batch)
            hit = valid & rule.refuses(values)
            for i in np.flatnonzero(hit):
                details[i] = rule.detail(int(values[i]))
            codes[hit] = "implausible_report"
            valid &= ~hit
        return valid, codes, details

    def validate(self, batch: ReportBatch) -> Validation:
        """(valid mask, reason per row) for a batch; never raises on bad rows."""
        valid, _, details = self.validate_coded(batch)
        return valid, details

    def check_batch(self, batch: ReportBatch) -> None:
        if not np.all(self.valid_rows(batch)):
            valid, reasons = self.validate(batch)
            i = int(np.flatnonzero(~valid)[0])
            raise InvalidReport(f"{self.name} report {i} is invalid: {reasons[i]}")

    # ----------------------------------------------------------------- client
    def public_fields(self) -> tuple[str, ...]:
        """Report fields drawn independently of the input (a sampled key, a hash seed): the
        mechanism's public randomness, which :meth:`perturb_many` draws from its
        ``public_rng`` when given one. None by default."""
        return ()

    def perturb(self, pairs: Mapping[int, float], rng: np.random.Generator) -> Report:
        """Perturb one device's pairs (key index -> value in [-1, 1]) into one report."""
        batch = self.perturb_many(KVData.from_pairs(self.d, [pairs]), rng)
        return row(batch, self.fields(), 0)

    def perturb_many(
        self, users: KVData, rng: np.random.Generator, public_rng: np.random.Generator | None = None
    ) -> ReportBatch:
        """Perturb every user's pairs; one report per user, as a columnar batch. The
        :attr:`public_fields` are drawn from ``public_rng`` when one is given, else from
        ``rng`` at the same point of its stream (so a report is the same either way when
        both are the same generator)."""
        if users.d != self.d:
            raise InvalidParameter(f"{self.name} is configured for d={self.d} keys, the data has d={users.d}")
        if self.composition is not None:  # the device's client, then the instantaneous randomizer
            device, randomizer = self.composition.device, self.composition.randomizer
            return randomizer.randomize(device.perturb_many(users, rng, public_rng), rng)
        return self._perturb_many(users, rng, rng if public_rng is None else public_rng)

    @abc.abstractmethod
    def _perturb_many(
        self, users: KVData, rng: np.random.Generator, public: np.random.Generator
    ) -> ReportBatch:
        """The client on a batch of users; ``public`` draws the :attr:`public_fields`."""

    def plausible(self, batch: ReportBatch) -> ReportBatch:
        """The rows the plausibility rule keeps, as the aggregator keeps them: genuine
        reports are refused with probability at most :attr:`false_refusal_bound` each."""
        bad = self.implausible_rows(batch)
        return {name: column[~bad] for name, column in batch.items()} if bad.any() else batch

    def collect(self, users: KVData, rng: np.random.Generator) -> Stats:
        """Simulate a whole collection in-process: perturb every user and fold the reports
        the aggregator would accept."""
        stats = self.new_stats()
        for block in users.chunks(COLLECT_CHUNK):
            stats.fold(self.plausible(self.perturb_many(block, rng)))
        return stats

    # ----------------------------------------------------------------- statistics
    @abc.abstractmethod
    def stats_shapes(self) -> dict[str, tuple[int, ...]]: ...

    @abc.abstractmethod
    def fold_arrays(self, arrays: dict[str, IntArray], batch: ReportBatch) -> None:
        """Add a validated batch into ``arrays`` in place (integer additions only)."""

    def expected_stats(self, users: KVData) -> Stats:
        """Exact expectation of the statistics this population would produce, from the
        mechanism's probability model (not its client). Powers the expected-count round
        trip (docs/mechanisms.md, *Expected-count round trip*) and the statistical check of the client
        against the model."""
        raise NotImplementedError(f"{self.name} has no closed-form expected statistics")

    def new_stats(self) -> Stats:
        return Stats(self)

    def stats_from_bytes(self, data: bytes) -> Stats:
        return Stats.from_bytes(self, data)

    # ----------------------------------------------------------------- estimation
    def check_stats(self, stats: Stats, estimator: str) -> None:
        """Reject statistics of another configuration and estimators this mechanism lacks."""
        if stats.mechanism.name != self.name or stats.mechanism.digest != self.digest:
            raise StatsMismatch(f"statistics of {stats.mechanism!r} cannot be estimated by {self!r}")
        if estimator not in self.estimator_names:
            raise UnknownEstimator(
                f"{self.name} has no estimator {estimator!r} (available: {', '.join(self.estimator_names)})"
            )

    def estimate(self, stats: Stats, estimator: str = "unbiased", **options: Any) -> Estimate:
        """Estimate frequency and mean per key (with standard errors) from statistics alone."""
        self.check_stats(stats, estimator)
        return self._estimate(stats, estimator, dict(options))

    @abc.abstractmethod
    def _estimate(self, stats: Stats, estimator: str, options: dict[str, Any]) -> Estimate: ...

    # ----------------------------------------------------------------- instantaneous randomization
    def randomized_output(self) -> RandomizedOutput:
        """The report fields an instantaneous randomization acts on (every field but the
        public ones)."""
        raise InvalidParameter(f"{self.name} has no instantaneous randomization")

    def instantaneous(self, epsilon_per_report: float) -> InstantaneousRandomizer:
        """The instantaneous randomizer of this mechanism's reports whose composed channel
        (this client, then the randomizer) is exactly ``epsilon_per_report``-LDP with
        respect to the device's input. It must lie below the mechanism's own exact
        per-report level: randomizing again only adds noise."""
        output = self.randomized_output()
        eps1 = number(
            epsilon_per_report,
            lambda v: InvalidParameter(
                f"{self.name}: the per-report epsilon must be a positive number, got {v!r}"
            ),
            positive=True,
        )
        level = self._per_report_level()
        # a level computed in floating point may land a rounding error above the epsilon it
        # equals (PCKV-UE's exact level at epsilon 4): equal within rounding is not below
        if not eps1 < level or math.isclose(eps1, level, rel_tol=_LEVEL_RTOL):
            raise InvalidParameter(
                f"{self.name}: a per-report epsilon of {eps1:g} must lie below the mechanism's own exact "
                f"per-report level, {level:.6g}: randomizing its reports again only adds noise"
            )
        return InstantaneousRandomizer(output, self._instantaneous_contrast(eps1), eps1)

    def composed(self, epsilon_per_report: float) -> Mechanism:
        """The composed channel at ``epsilon_per_report`` (see the module docstring): what the
        server receives from a device that memoizes this mechanism's report and randomizes
        every send again."""
        if self.composition is not None:
            raise InvalidParameter(f"{self!r} is already a composed channel")
        randomizer = self.instantaneous(epsilon_per_report)
        channel = self._composed_channel(randomizer)
        channel.epsilon = randomizer.epsilon_per_report
        channel.composition = Composition(self, randomizer)
        return channel

    def _composed_channel(self, randomizer: InstantaneousRandomizer) -> Mechanism:
        """A new mechanism whose model is the composed channel's. Default: the channel stays
        in the mechanism's family, and is the mechanism at the per-report epsilon with the
        parameters of :meth:`_family_params`."""
        return type(self)(self.d, randomizer.epsilon_per_report, **self._family_params())

    def _family_params(self) -> dict[str, ParamValue]:
        """The parameters of the mechanism at another epsilon in the same family (those a
        default resolves from epsilon fixed at this configuration's values)."""
        return dict(self.params)

    def _contrast(self, epsilon: float) -> float:
        """p - q of the mechanism's channel at ``epsilon``: the probability of reporting the
        true symbol (bit) minus that of another, which the randomizer multiplies by its
        contrast. Mechanisms whose composed channel stays in their family define it."""
        raise InvalidParameter(f"{self.name} has no instantaneous randomization")

    def _instantaneous_contrast(self, epsilon_per_report: float) -> float:
        """The randomizer's contrast for ``epsilon_per_report``. Default (the composed channel
        stays in the family): the ratio of the family's contrasts at eps1 and at epsilon."""
        return self._contrast(epsilon_per_report) / self._contrast(self.epsilon)

    def _per_report_level(self) -> float:
        """The exact privacy level of one report of this mechanism, above which no
        instantaneous randomization can be solved. Default: epsilon (tight)."""
        return self.epsilon

    # ----------------------------------------------------------------- privacy
    def claimed_epsilon(self) -> float:
        """The privacy level the mechanism's analysis proves (<= epsilon); audits compare to it.
        A composed channel's is the per-report epsilon it was solved for."""
        return self.epsilon if self.composition is not None else self._analysed_epsilon()

    def _analysed_epsilon(self) -> float:
        """The level the mechanism's own analysis proves (Theorems, exact compositions); by
        default epsilon."""
        return self.epsilon

    def fldp_eta(self) -> float:
        """For FLDP mechanisms: the eta of (epsilon, eta)-FLDP."""
        raise NotImplementedError(f"{self.name} is not an FLDP mechanism")

    def exhaustive_feasible(self) -> bool:
        """Whether the exhaustive audit (all 3^d discrete users) is small enough to run."""
        return self.d <= 4

    @abc.abstractmethod
    def audit_model(self, exhaustive: bool) -> OutputModel:
        """Exact output distribution over all discrete users (exhaustive) or a symmetry-reduced set."""
