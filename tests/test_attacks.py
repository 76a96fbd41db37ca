"""Fake devices: every generator's reports are well formed (refused, if at all, only as
implausible, and never when they imitate genuine reports), M2GA's gain matches its closed form,
RMA is uniform, RKVA is the genuine client, the adaptive attack keeps the genuine
set-bit law, and ``kvldp attack`` refuses bad flags in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.attacks import experiment
from kvldp.attacks.defenses import get as defense
from kvldp.attacks.fakes import ATTACKS, InvalidAttack, Round, fake_reports, rkva_users
from kvldp.attacks.pckv_fakes import nonzero_counts
from kvldp.attacks.target import InvalidTarget, Target
from kvldp.cli import main
from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import Stats
from kvldp.common.mechanisms import create, get, names
from kvldp.common.mechanisms.keysampled import POS
from kvldp.sim.datasets import generate

KV = [n for n in names() if get(n).collects_values]
PARAMS = {"pckv_grr": {"ell": 2}, "pckv_ue": {"ell": 2}, "kvue_multi": {"t": 2}, "privkvm": {"rounds": 3}}
KEYS = {"ioh": 4, "ioh_oue": 4}


def mech(name: str, d: int | None = None, eps: float = 1.0):
    return create(name, d or KEYS.get(name, 8), eps, **PARAMS.get(name, {}))


def test_every_key_value_mechanism_is_covered() -> None:
    assert set(KV) == {
        "f2m", "ioh", "ioh_hrr", "ioh_oue", "kvoh", "kvue", "kvue_multi", "pckv_grr", "pckv_ue", "privkv", "privkvm",
    }  # fmt: skip


@pytest.mark.parametrize("name", KV)
@pytest.mark.parametrize("attack", ATTACKS)
def test_fakes_are_valid_reports(name: str, attack: str) -> None:
    m = mech(name)
    target = Target(np.array([0, 2]), 0.5)
    for r in range(2 if name == "privkvm" else 1):
        round_ = Round(r, np.linspace(-1, 1, m.d)) if name == "privkvm" else None
        batch = fake_reports(m, attack, 300, target, np.random.default_rng(1), round_)
        _, codes, details = m.validate_coded(batch)
        # well formed: only the one-report plausibility rule may refuse a fake, and never
        # one that imitates a genuine report
        allowed = {""} if attack in ("rkva", "adaptive") else {"", "implausible_report"}
        assert set(codes) <= allowed, set(zip(codes, details, strict=True)) - {("", "")}
        assert len(next(iter(batch.values()))) == 300


def test_refusals() -> None:
    with pytest.raises(InvalidTarget):
        Target(np.array([1, 1]))
    with pytest.raises(InvalidTarget):
        Target(np.array([1]), 1.5)
    with pytest.raises(InvalidTarget):
        fake_reports(mech("kvue"), "m2ga", 3, Target(np.array([8])), np.random.default_rng(0))
    with pytest.raises(InvalidAttack):
        fake_reports(mech("kvue"), "flood", 3, Target(np.array([1])), np.random.default_rng(0))
    with pytest.raises(InvalidAttack):
        fake_reports(create("grr", 8, 1.0), "m2ga", 3, Target(np.array([1])), np.random.default_rng(0))
    with pytest.raises(InvalidAttack):
        fake_reports(mech("privkvm"), "m2ga", 3, Target(np.array([1])), np.random.default_rng(0))


# ---------------------------------------------------------------------- M2GA's closed form
N, D, BETA, REPEATS = 20_000, 10, 0.02, 12


def _gains(name: str, targets: np.ndarray) -> tuple[np.ndarray, KVData, object]:
    m = mech(name, D)
    users = generate("uniform", N, D, 3).users
    setting = experiment.Setting(m, "m2ga", BETA, defense("none"), ("unbiased",))
    target = Target(targets, 1.0)
    out = []
    for r in range(REPEATS):
        genuine = experiment.genuine_reports(m, users, experiment.genuine_rng(0, r))
        _, res = experiment.run_repeat(setting, users, target, 0, r, genuine)
        out.append(res["unbiased"].frequency_gain)
    return np.array(out), users, m


@pytest.mark.parametrize("name", ["pckv_grr", "pckv_ue"])
def test_m2ga_gain_pckv(name: str) -> None:
    """f^ = ell((n1 + n2)/n - b)/(a - b) is linear in S_t = n1[t] + n2[t]: with F_t fakes on t
    and N = n_g + n_f, G_t = ell/(a - b) ((S_t + F_t)/N - S_t/n_g). F_t = n_f for UE (every
    target set), n_f/r in expectation for GRR (multinomial). Variance: S_t is a sum of
    independent Bernoullis, Var <= n_g pi(1 - pi); F_t's is n_f (1/r)(1 - 1/r) for GRR."""
    targets = np.array([2, 5])
    r = targets.size
    gains, users, m = _gains(name, targets)
    n_g = users.n_users
    n_f = experiment.fake_count(n_g, BETA)
    big = n_g + n_f
    expected = m.expected_stats(users).arrays
    s = expected["n1"][targets] + expected["n2"][targets]
    f_t = n_f if name == "pckv_ue" else n_f / r
    scale = m.ell / (m.a - m.b)
    closed = float(np.sum(scale * ((s + f_t) / big - s / n_g)))
    pi = s / n_g
    var_f = 0.0 if name == "pckv_ue" else n_f / r * (1 - 1 / r)
    var = float(np.sum(scale**2 * (n_g * pi * (1 - pi) * (1 / big - 1 / n_g) ** 2 + var_f / big**2)))
    # the targets' gains share the fakes (F_t sums to n_f): |correlation| <= 1, so sd <= sum of sds
    tol = 4 * r * math.sqrt(var / REPEATS)
    assert abs(gains.mean() - closed) < tol, (gains.mean(), closed, tol)


def test_m2ga_gain_privkv() -> None:
    """PrivKV's unbiased frequency of key t is w . c_t / M_t with w = F A (A = P^-1): the
    fakes add n_f/r reports with symbol <1, +1> (w_z = (1[key bit of z] - (1 - p1)) / (2 p1 - 1), so w_POS = p1 / (2 p1 - 1)) to M_t, so
    G = (w . E c + n_t w_POS)/(E M + n_t) - w . E c / E M to first order; the tolerance is
    4 standard errors from the delta-method variance of the ratio."""
    targets = np.array([4])
    gains, users, m = _gains("privkv", targets)
    n_f = experiment.fake_count(users.n_users, BETA)
    c = m.expected_stats(users).arrays["counts"][4]
    big_m = c.sum()
    w = np.array([1.0, 0.0, 1.0]) @ m.linear_inverse()
    assert w[POS] == pytest.approx(m.p1 / (2 * m.p1 - 1))
    closed = (w @ c + n_f * w[POS]) / (big_m + n_f) - w @ c / big_m
    # the estimate before and after share c: G = (n_f (w_POS - w.c/M)) / (M + n_f); its
    # variance from the multinomial c given M (Var(w.c/M) = (E[w^2] - E[w]^2)/M), M's own
    # spread being second order
    pi = c / big_m
    var_ratio = (pi @ w**2 - (pi @ w) ** 2) / big_m
    sd = n_f / (big_m + n_f) * math.sqrt(var_ratio)
    assert abs(gains.mean() - closed) < 4 * sd / math.sqrt(REPEATS), (gains.mean(), closed, sd)


# ---------------------------------------------------------------------- RMA, RKVA, adaptive
def _chi2_ok(counts: np.ndarray) -> bool:
    """Chi-square against uniform, below df + 5 sqrt(2 df) (about 1e-6 one-sided for large df)."""
    expected = counts.sum() / counts.size
    stat = float(((counts - expected) ** 2 / expected).sum())
    df = counts.size - 1
    return stat < df + 5 * math.sqrt(2 * df)


def test_rma_is_uniform() -> None:
    rng = np.random.default_rng(7)
    grr = mech("pckv_grr")
    b = fake_reports(grr, "rma", 60_000, Target(np.array([0])), rng)
    codes = np.where(b["k"] == grr.d, 2 * grr.d, 2 * b["k"] + (b["v"] < 0))
    assert _chi2_ok(np.bincount(codes, minlength=2 * grr.d + 1))
    ue = mech("pckv_ue")
    b = fake_reports(ue, "rma", 20_000, Target(np.array([0])), rng)
    pos = np.unpackbits(b["pos"], axis=1, count=ue.d, bitorder="little")
    neg = np.unpackbits(b["neg"], axis=1, count=ue.d, bitorder="little")
    for j in range(ue.d):
        assert _chi2_ok(np.bincount(pos[:, j] + 2 * neg[:, j], minlength=3))
    kv = mech("privkv")
    b = fake_reports(kv, "rma", 30_000, Target(np.array([0])), rng)
    assert _chi2_ok(np.bincount(b["j"] * 3 + b["s"], minlength=3 * kv.d))


@pytest.mark.parametrize("name", ["pckv_grr", "pckv_ue", "kvue", "ioh_hrr"])
def test_rkva_is_the_genuine_client(name: str) -> None:
    """RKVA's fakes are exactly genuine clients of holders of <t, m*>: same generator, same reports."""
    m = mech(name)
    target = Target(np.array([1, 6]), -0.25)
    fakes = fake_reports(m, "rkva", 500, target, np.random.default_rng(11))
    rng = np.random.default_rng(11)
    genuine = m.perturb_many(rkva_users(m.d, 500, target, rng), rng)
    for field in fakes:
        np.testing.assert_array_equal(fakes[field], genuine[field])


def _homogeneous(a: np.ndarray, b: np.ndarray) -> bool:
    """Two-sample chi-square test of equal laws on the pooled support (cells with an
    expected count below 5 merged into their neighbour), below df + 5 sqrt(2 df)."""
    top = int(max(a.max(), b.max())) + 1
    table = np.stack([np.bincount(a, minlength=top), np.bincount(b, minlength=top)]).astype(np.float64)
    cells: list[np.ndarray] = []
    acc = np.zeros(2)
    for column in table.T:
        acc = acc + column
        if acc.sum() * min(a.size, b.size) / (a.size + b.size) >= 5:
            cells.append(acc)
            acc = np.zeros(2)
    if acc.sum():
        cells[-1] = cells[-1] + acc
    obs = np.array(cells).T
    expected = obs.sum(axis=1, keepdims=True) * obs.sum(axis=0, keepdims=True) / obs.sum()
    stat = float(((obs - expected) ** 2 / expected).sum())
    df = obs.shape[1] - 1
    return stat < df + 5 * math.sqrt(2 * df)


def test_adaptive_keeps_the_genuine_set_bit_law_of_pckv_ue() -> None:
    """The adaptive fakes' non-zero counts are the genuine client's own draws for holders of
    <t, m*> (same generator state: equal arrays), and their law is that of a genuine
    population of one-pair devices (two-sample chi-square, fixed seeds); M2GA's is not."""
    m = mech("pckv_ue", 12)
    target = Target(np.array([3, 9]), 1.0)
    n = 20_000
    fakes = fake_reports(m, "adaptive", n, target, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    holders = KVData.from_single_key(m.d, target.pick(n, rng), np.full(n, 1.0))
    counts = nonzero_counts(fakes, m.d)
    np.testing.assert_array_equal(counts, nonzero_counts(m.perturb_many(holders, rng), m.d))
    population = generate("gaussian_pckv", n, m.d, 2).users
    genuine = nonzero_counts(m.perturb_many(population, np.random.default_rng(6)), m.d)
    assert _homogeneous(counts, genuine)
    naive = nonzero_counts(fake_reports(m, "m2ga", n, target, np.random.default_rng(5)), m.d)
    assert not _homogeneous(naive, genuine)
    pos = np.unpackbits(fakes["pos"], axis=1, count=m.d, bitorder="little")
    assert pos[:, target.keys].any(axis=1).mean() > 0.5  # most fakes promote a target


def test_m2ga_privkvm_takes_part_in_every_round() -> None:
    m = mech("privkvm")
    users = generate("uniform", 5000, 8, 1).users
    tally = experiment.Folded(m.new_stats(), m.new_stats())
    target = Target(np.array([3]))

    def fakes(r: int, published: np.ndarray):
        return fake_reports(m, "m2ga", 100, target, np.random.default_rng(r), Round(r, published))

    stats = experiment.privkvm_rounds(m, users, np.random.default_rng(0), fakes, defense("none"), tally)
    per_round = stats.arrays["counts"][:, 3, POS]
    assert tally.fakes_sent == 300 and np.all(per_round >= 100)
    assert isinstance(stats, Stats)


# ---------------------------------------------------------------------- CLI
@pytest.mark.parametrize(
    "argv",
    [
        ["attack", "--mechanism", "kvue", "--keys", "8"],
        ["attack", "--mechanism", "grr", "--keys", "8", "--epsilon", "1"],
        ["attack", "--mechanism", "kvue", "--keys", "8", "--epsilon", "1", "--param", "ell=2"],
        ["attack", "--mechanism", "kvue", "--keys", "8", "--epsilon", "1", "--defense", "prayer"],
        ["attack", "--mechanism", "kvue", "--keys", "8", "--epsilon", "1", "--targets", "9"],
        ["attack", "--mechanism", "kvue", "--keys", "8", "--epsilon", "1", "--estimator", "magic"],
        ["attack", "--mechanism", "kvue", "--keys", "8", "--epsilon", "1", "--dataset", "nope"],
        ["attack", "--collection", "/nonexistent.toml"],
    ],
)
def test_cli_refuses_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvldp: error:") and "\n" not in err


def test_cli_refuses_a_defense_no_mechanism_has(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvldp.attacks import defenses

    monkeypatch.setitem(
        defenses.DEFENSES, "oracle", defenses.Defense("oracle", "an estimator nobody has", "oracle")
    )
    argv = ["attack", "--mechanism", "kvue", "--keys", "8", "--epsilon", "1", "--defense", "oracle"]
    assert main(argv) == 2
    assert "defense oracle applies to none of the mechanisms" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--fake-fraction", "1.5"], ["--target-mean", "2"], ["--attack", "flood"]])
def test_cli_flag_types_refuse(flag: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["attack", "--mechanism", "kvue", "--keys", "8", "--epsilon", "1", *flag])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_cli_runs_and_writes(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["attack", "--mechanism", "pckv_grr", "--mechanism", "kvue", "--keys", "10", "--epsilon", "1"]
    argv += ["--param", "ell=2", "--users", "5000", "--repeats", "2", "--attack", "m2ga", "--defense", "none"]
    argv += ["--defense", "plausibility", "--defense", "detection", "--out", str(tmp_path)]
    assert main(argv) == 0
    text = (tmp_path / "README.md").read_text()
    assert "| pckv_grr | m2ga | 0.01 | plausibility | unbiased |" in text
    assert "| pckv_grr | m2ga | 0.01 | detection | unbiased |" in text
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 3 * 2  # header + mechanisms x defenses x estimators
    assert "alarm_with_fakes,alarm_without_fakes,targets_flagged" in rows[0]


# --------------------------------------------------------------- defenses
def _run(name: str, d: int, attack: str, beta: float, names_: list[str], users: int = 4000, **params):
    m = create(name, d, 1.0, **params)
    population = generate("gaussian_pckv", users, d, 3).users
    rows = experiment.run(
        [m], [attack], [beta], [defense(n) for n in names_], ["unbiased"], population,
        Target(np.array([d - 2, d - 1])), 3, 11,
    )  # fmt: skip
    return {r.values["defense"]: r.values for r in rows}


def test_detection_alarms_on_m2ga_against_privkv_and_not_without_fakes() -> None:
    rows = _run("privkv", 8, "m2ga", 0.05, ["none", "detection"], users=10_000)
    det = rows["detection"]
    assert det["alarm_with_fakes"] == 1.0
    assert det["alarm_without_fakes"] == 0.0
    assert det["targets_flagged"] == 1.0
    assert det["score_with_fakes"] >= 3.0
    # detection changes no estimate
    assert det["frequency_gain"] == rows["none"]["frequency_gain"]
    assert math.isnan(rows["none"]["alarm_with_fakes"])


def test_detection_stays_quiet_on_input_poisoning() -> None:
    # RKVA's fakes are genuine clients with chosen inputs: a population can look like that
    det = _run("privkv", 8, "rkva", 0.05, ["detection"])["detection"]
    assert det["alarm_with_fakes"] == 0.0 and det["alarm_without_fakes"] == 0.0


def test_none_folds_implausible_fakes_plausibility_drops_them() -> None:
    # a uniform ternary PCKV-UE vector at d = 50 sets more keys than a genuine report can
    rows = _run("pckv_ue", 50, "rma", 0.05, ["none", "plausibility"], users=2000, ell=2)
    assert rows["none"]["fakes_dropped"] == 0.0
    assert rows["plausibility"]["fakes_dropped"] > 0.2
    assert rows["plausibility"]["genuine_dropped"] == 0.0
    assert rows["none"]["frequency_gain"] != rows["plausibility"]["frequency_gain"]


def test_a_defense_refuses_fakes_broken_for_another_reason() -> None:
    from kvldp.common.data.schema import InvalidReport

    m = create("privkv", 8, 1.0)
    batch = fake_reports(m, "m2ga", 10, Target(np.array([1])), np.random.default_rng(0))
    column = next(iter(batch))
    batch[column] = batch[column] + 1000
    with pytest.raises(InvalidReport):
        defense("none").keep(m, batch)


def test_detection_scores_as_the_aggregator_refit_does() -> None:
    from kvldp.aggregator.refit import refit

    from support.pipeline import unique_collection

    collection = unique_collection("privkv", 8)
    m = collection.mechanism
    population = generate("gaussian_pckv", 6000, 8, 5).users
    genuine = experiment.genuine_reports(m, population, experiment.genuine_rng(5, 0))
    fakes = fake_reports(m, "adaptive", 300, Target(np.array([6, 7])), experiment.fake_rng(5, 0))
    folded = experiment.fold_once(m, genuine, fakes, defense("detection"))
    report = refit(collection, {"all": folded.with_fakes}, None).fits["all"].poisoning
    assert report is not None
    alarm = defense("detection").detect(m, folded.with_fakes)
    assert alarm is not None and alarm.score == report.score and alarm.alarm
    np.testing.assert_array_equal(alarm.flagged, np.nan_to_num(report.key_score) >= 3.0)


def test_cli_table_shows_detection_columns_only_when_detection_ran(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["attack", "--mechanism", "kvue", "--keys", "8", "--epsilon", "1", "--users", "2000"]
    argv += ["--repeats", "1", "--attack", "m2ga", "--estimator", "unbiased"]
    assert main(argv) == 0
    assert "alarm (clean)" not in capsys.readouterr().out
    assert main([*argv, "--defense", "detection"]) == 0
    assert "alarm (clean) | targets flagged |" in capsys.readouterr().out
