"""Reports of fake devices, vectorised, for every key-value mechanism.

A fake device does not run the client: it sends whatever report it likes, as long as the
report passes the mechanism's validation. Four attacks (docs/attacks.md):

* ``m2ga`` — maximal gain (Wu et al. 2022): every fake sends the report that maximises
  the expected frequency and mean gains of the target keys under the mechanism's
  ``unbiased`` estimator (each family module derives it from its estimator);
* ``rma`` — random message: a report drawn uniformly from the mechanism's valid outputs;
* ``rkva`` — random key-value pair: every fake holds <t, m*> for a uniform target t and
  runs the genuine client (input poisoning: no per-report check can tell it from an
  honest device);
* ``adaptive`` — maximal gain subject to imitating every statistic a defense looks at:
  the report's shape (number of set bits, a single kept pair) follows the genuine
  distribution and every per-key statistic stays one a genuine population could produce
  (state counts non-negative, unbiased means inside [-1, 1]).

The targets T are key indices, the target mean m* lies in [-1, 1] (its sign picks the
favoured value +1 or -1 of the maximal-gain reports). PrivKVM reports in rounds: its
fakes report once in every round, given the round and the means published before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvldp.attacks import joint_fakes, keyed_fakes, pckv_fakes
from kvldp.attacks.target import FakeGenerator, Target
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.schema import ReportBatch
from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import Mechanism
from kvldp.common.mechanisms.privkvm import PrivKVM
from kvldp.common.primitives import FloatArray

ATTACKS = ("m2ga", "rma", "rkva", "adaptive")

#: mechanism name -> attack -> generator (RKVA is the genuine client and needs no entry)
FAMILIES: dict[str, dict[str, FakeGenerator]] = {
    **{name: keyed_fakes.GENERATORS for name in ("f2m", "kvoh", "kvue", "privkv")},
    "kvue_multi": keyed_fakes.MULTI_GENERATORS,
    "pckv_grr": pckv_fakes.GRR_GENERATORS,
    "pckv_ue": pckv_fakes.UE_GENERATORS,
    "ioh": joint_fakes.UNARY_GENERATORS,
    "ioh_oue": joint_fakes.UNARY_GENERATORS,
    "ioh_hrr": joint_fakes.HADAMARD_GENERATORS,
}


class InvalidAttack(KvldpError):
    """An attack that does not exist, or does not apply to the mechanism or its settings."""


def supported(mechanism: Mechanism) -> bool:
    """Whether fakes exist for the mechanism: every key-value mechanism of the registry."""
    return mechanism.name in FAMILIES or isinstance(mechanism, PrivKVM)


@dataclass(frozen=True)
class Round:
    """A PrivKVM round: its index and the means the server published before it."""

    index: int
    published: FloatArray


def rkva_users(d: int, n: int, target: Target, rng: np.random.Generator) -> KVData:
    """``n`` devices each holding the one pair <t, m*>, t uniform in the targets."""
    keys = target.keys[rng.integers(0, target.keys.size, size=n)]
    return KVData.from_single_key(d, keys, np.full(n, target.mean))


def fake_reports(
    mechanism: Mechanism,
    attack: str,
    n: int,
    target: Target,
    rng: np.random.Generator,
    round_: Round | None = None,
) -> ReportBatch:
    """``n`` fake reports of ``attack`` against ``mechanism`` (``round_`` for PrivKVM)."""
    if attack not in ATTACKS:
        raise InvalidAttack(f"unknown attack {attack!r} (known: {', '.join(ATTACKS)})")
    target.check(mechanism.d)
    if isinstance(mechanism, PrivKVM):
        if round_ is None:
            raise InvalidAttack("privkvm fakes report in a round: give the round and its published means")
        return keyed_fakes.privkvm_reports(mechanism, attack, n, target, rng, round_.index, round_.published)
    if mechanism.name not in FAMILIES:
        raise InvalidAttack(f"{mechanism.name} collects no values: the key-value attacks do not apply")
    if attack == "rkva":
        return mechanism.perturb_many(rkva_users(mechanism.d, n, target, rng), rng)
    return FAMILIES[mechanism.name][attack](mechanism, n, target, rng)
