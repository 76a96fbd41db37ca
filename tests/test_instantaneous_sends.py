"""The device SDK's sends with instantaneous randomization (``[privacy] instantaneous_epsilon``).

Every send of a memoized report, the first and each re-send, is the stored permanent
report randomized again with fresh randomness; the state file keeps the permanent report
and the device pays epsilon once per state. Over many simulated devices the sent reports
have the composed channel's law (fixed seeds, 4 standard errors of the binomial counts).

Without Kafka the collector publishes into a fake producer that keeps what it was given;
one test runs ``kvldp produce`` through the session's broker to the aggregator.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import uuid
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.channel.instantaneous import epsilon_per_send_bound, kept_and_other, symbol_kernel
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import parse_collection
from kvldp.common.data.kvdata import KVData
from kvldp.common.guarantees.memo import memoized_report, state_of
from kvldp.common.messages.wire import WireFormat
from kvldp.producer import Collector, ReportStatus

from support import record_and_fold, run_kvldp
from support.producer import FakeProducer

NOW = 1_800_000_000.0


def collection(mechanism: str, keys: int, instantaneous: float | None, epsilon: float = 2.0) -> Collection:
    privacy: dict[str, Any] = {"memoize": True}
    if instantaneous is not None:
        privacy["instantaneous_epsilon"] = instantaneous
    return parse_collection(
        {
            "name": "irr",
            "mechanism": mechanism,
            "epsilon": epsilon,
            "key_count": keys,
            "value_range": [-1.0, 1.0],
            "privacy": privacy,
        }
    )


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def sdk(c: Collection, fake: FakeProducer, clock: Clock, seed: int = 1) -> Collector:
    return Collector(
        c,
        "unused:9092",
        producer=fake,  # type: ignore[arg-type]
        device_id="phone",
        clock=clock,
        rng=np.random.default_rng(seed),
        warn_unsaved=False,
    )


def bodies(fake: FakeProducer) -> list[dict[str, Any]]:
    """The report fields of every message sent (envelope dropped)."""
    out = []
    for _, value, _ in fake.sent:
        body = msgpack.unpackb(value, raw=False)
        out.append({k: v for k, v in body.items() if k not in ("ts", "rid")})
    return out


@pytest.mark.parametrize("instantaneous", [1.0, None])
def test_every_send_of_a_state_is_randomized_again_and_the_state_charged_once(
    instantaneous: float | None,
) -> None:
    c = collection("oue", 64, instantaneous)
    fake, clock = FakeProducer(), Clock()
    s = sdk(c, fake, clock)
    pairs = {"k3": 1.0, "k40": 1.0}

    async def go() -> list[ReportStatus]:
        statuses = []
        for t in range(12):
            clock.now = NOW + t
            statuses.append(await s.report(pairs))
        return statuses

    assert asyncio.run(go()) == [ReportStatus.SENT] + [ReportStatus.RESENT] * 11
    assert s.privacy_spent() == pytest.approx(c.epsilon)
    (stored,) = s.state.memo.values()
    users = s.users_from_pairs([pairs])
    alpha = np.zeros(c.d)  # a frequency oracle's state ignores values
    state = state_of(c.mechanism, users.keys, users.values, alpha)
    permanent = instantaneous is not None
    assert stored == memoized_report(c.mechanism, s.state.secret, c.digest, state, permanent)
    sent = [body["bits"] for body in bodies(fake)]
    if instantaneous is None:
        assert set(sent) == {stored["bits"]}  # byte-identical re-sends
    else:
        # 65 bits each kept with probability 0.80: two sends alike, or a send equal to the
        # stored report, have probability below 1e-6
        assert len(set(sent)) == len(sent) and stored["bits"] not in sent
    decoded = WireFormat(c).decode([v for _, v, _ in fake.sent], [ts for _, _, ts in fake.sent])
    assert not decoded.rejected


def test_public_fields_stay_the_same_across_states() -> None:
    """A key-sampled device reports on one key for life: a new state must not show as a new key."""
    c = collection("kvue", 6, 1.0)
    fake, clock = FakeProducer(), Clock()
    s = sdk(c, fake, clock)
    states = [{"k0": 0.5}, {"k1": -0.5, "k2": 0.9}, {}, {"k0": 0.5, "k5": -1.0}, {"k4": 0.0}]

    async def go() -> None:
        for t, pairs in enumerate(states * 3):
            clock.now = NOW + t
            await s.report(pairs)

    asyncio.run(go())
    assert len(s.state.memo) == len(states) and s.privacy_spent() == pytest.approx(len(states) * c.epsilon)
    assert len({body["j"] for body in bodies(fake)}) == 1


def one_key_devices(n: int, d: int, rng: np.random.Generator) -> KVData:
    """``n`` devices holding one uniformly drawn key each."""
    keys = rng.integers(0, d, size=n)
    return KVData(d, np.arange(n + 1, dtype=np.int64), keys.astype(np.int64), np.ones(n))


def symbol_frequencies(sent: list[dict[str, Any]], mechanism: str, domain: int) -> np.ndarray:
    """Per send, the indicator of every output symbol (grr) or bit (oue): (sends, domain)."""
    if mechanism == "grr":
        return np.eye(domain)[[body["y"] for body in sent]]
    packed = np.frombuffer(b"".join(body["bits"] for body in sent), dtype=np.uint8).reshape(len(sent), -1)
    return np.unpackbits(packed, axis=1, bitorder="little")[:, :domain].astype(np.float64)


@pytest.mark.parametrize("mechanism", ["grr", "oue"])
def test_sent_reports_follow_the_composed_channel(mechanism: str) -> None:
    """First sends and re-sends of 6,000 devices: every output symbol's (grr) or bit's (oue)
    count against its exact expectation under the composed channel, within 4 standard
    errors (sum over devices of P(1 - P))."""
    d, n = 4, 6000
    c = collection(mechanism, d, 0.8)
    composed = c.estimation_mechanism
    held = one_key_devices(n, d, np.random.default_rng(11))
    ids = [f"device-{u}" for u in range(n)]
    fake, clock = FakeProducer(), Clock()
    s = sdk(c, fake, clock, seed=12)

    async def go() -> None:
        for t in range(2):
            clock.now = NOW + t
            summary = await s.publish_users(held, ids)
            assert (summary.sent, summary.resent) == ((n, 0) if t == 0 else (0, n))

    asyncio.run(go())
    sent = bodies(fake)
    assert len(sent) == 2 * n
    domain = composed.domain  # type: ignore[attr-defined]
    # Pr[symbol or bit j | the device's key x]: p* where j = x, q* elsewhere
    probability = np.where(
        np.arange(domain)[None, :] == held.keys[:, None],
        composed.p,  # type: ignore[attr-defined]
        composed.q,  # type: ignore[attr-defined]
    )
    expected = probability.sum(axis=0)
    se = np.sqrt((probability * (1.0 - probability)).sum(axis=0))
    for sends in (sent[:n], sent[n:]):
        counts = symbol_frequencies(sends, mechanism, domain).sum(axis=0)
        assert np.all(np.abs(counts - expected) <= 4.0 * se), (counts, expected, se)
    # re-sends are randomized again: two sends of one stored report agree in a coordinate
    # with probability keep^2 + (K - 1) other^2, whatever the report
    first, second = (symbol_frequencies(part, mechanism, domain) for part in (sent[:n], sent[n:]))
    changed = float(np.mean(np.any(first != second, axis=1)))
    randomizer = c.instantaneous_randomizer
    assert randomizer is not None
    size, coords = randomizer.output.size, randomizer.output.coords
    moved = 1.0 - (randomizer.keep**2 + (size - 1) * randomizer.other**2) ** coords
    assert abs(changed - moved) <= 4.0 * math.sqrt(moved * (1.0 - moved) / n), (changed, moved)


def joint_level(channel: np.ndarray, randomizer: np.ndarray, sends: int) -> float:
    """The exact privacy level of ``sends`` sends of one memoized report: Pr[y_1..y_n | x] =
    sum_z channel[x, z] prod_i randomizer[z, y_i], its largest log ratio over inputs."""
    size = randomizer.shape[1]
    outputs = np.array(list(itertools.product(range(size), repeat=sends)))
    joint = channel @ np.prod(randomizer[:, outputs], axis=2)
    logs = np.log(joint)
    return float(np.max(logs.max(axis=0) - logs.min(axis=0)))


def test_many_sends_of_a_state_can_reveal_more_than_eps1_each_but_never_more_than_the_bound() -> None:
    """The sends of one state share its memoized report, so n of them are not n independent
    eps1 releases: for kvldp's GRR over 5 items, two reveal more than 2 eps1. The per-send
    bound c holds against the exact level of n <= 4 sends, there and for 300 random
    channels followed by K-ary randomized response."""
    mech = collection("grr", 4, 0.1, epsilon=1.0).mechanism
    randomizer = mech.instantaneous(0.1)
    grr, rr = mech.transition(), randomizer.matrix()  # type: ignore[attr-defined]
    two = joint_level(grr, rr, 2)
    assert two == pytest.approx(0.2116, abs=1e-4) and two > 2 * 0.1
    c = randomizer.send_bound(1.0)
    assert [joint_level(grr, rr, n) <= n * c + 1e-12 for n in range(1, 5)] == [True] * 4
    rng = np.random.default_rng(5)
    for _ in range(300):
        size, inputs = int(rng.integers(2, 5)), int(rng.integers(2, 4))
        channel = rng.dirichlet(np.full(size, rng.uniform(0.3, 3.0)), size=inputs)
        contrast = float(rng.uniform(0.05, 0.95))
        rr = symbol_kernel(size, contrast)
        keep, other = kept_and_other(size, contrast)
        state_level, per_report = joint_level(channel, np.eye(size), 1), joint_level(channel, rr, 1)
        c = epsilon_per_send_bound(state_level, per_report, math.log(keep / other))
        for n in range(1, 5):
            assert joint_level(channel, rr, n) <= min(state_level, n * c) + 1e-9


def test_end_to_end_every_send_is_decoded_and_the_estimates_are_unbiased(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """``kvldp produce`` of 4,000 memoized devices over two periods (a quarter redraw their
    pairs), every send randomized again, through Kafka to the aggregator: every report
    decoded and folded (none dead-lettered), each device counted once, at its latest
    report, and every key's frequency within 4 exported standard errors of the last
    period's truth."""
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'name = "irr-{uuid.uuid4().hex[:8]}"\nmechanism = "grr"\nepsilon = 3.0\nkey_count = 6\n'
        'value_range = [-1.0, 1.0]\n[privacy]\nmemoize = true\nreport_period = "1h"\n'
        "instantaneous_epsilon = 1.5\n"
    )
    bootstrap = ["--bootstrap-servers", broker.bootstrap_servers]
    truth_file = tmp_path / "truth.json"
    common = ["--collection", str(toml), "--simulate", "zipf", "--users", "4000", "--truth", str(truth_file)]
    done = run_kvldp("produce", *common, "--periods", "2", "--churn", "0.25", "--seed", "3", *bootstrap)
    assert done.returncode == 0, done.stderr
    payload = record_and_fold(toml, tmp_path / "irr.rec", *bootstrap)
    assert payload["reports_total"] == 8000 and payload["rejected"] == {}
    fit = payload["windows"]["all"]
    assert fit["reports"] == 4000  # each device once, at its latest report
    truth = json.loads(truth_file.read_text())["frequency"]
    unbiased = fit["estimators"]["unbiased"]
    for key, expected in truth.items():
        estimate, stderr = unbiased["frequency"][key], unbiased["frequency_stderr"][key]
        assert abs(estimate - expected) <= 4.0 * stderr, (key, estimate, expected, stderr)
