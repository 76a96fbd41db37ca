"""The mechanism-independent conditional-query machinery (:mod:`kvldp.common.estimation.conditional`).

The worked example (docs/mechanisms.md, *Conditional worked example*: Sun et al. 2019's
Table III, keys Hamburger, Fries, Pepsi) is the
acceptance test: indices, every row of the table (cells and true values) and the
counting operators, through a noise-free oracle. Then parsing and formatting of queries,
their validation, product sets of cells, the joint-state probabilities, and the ratio
algebra that turns cell-set sums and their covariance into answers. The IOH mechanism
that estimates the cell sums is tested in :mod:`tests.test_ioh`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pytest

from kvldp.common.data.kvdata import KVData
from kvldp.common.data.stats import Stats
from kvldp.common.estimation.conditional import (
    CellSums,
    Condition,
    ConditionalQuery,
    InvalidQuery,
    ProductSet,
    answer_queries,
    conditional_truth,
    joint_index,
    joint_state_probabilities,
    joint_states,
    parse_query,
)
from kvldp.common.estimation.estimate import Z95
from kvldp.common.mechanisms.ioh import IOH

from support.conditional import (
    NAMES,
    ONE_HOT_SUM,
    ROWS,
    F,
    H,
    P,
    membership,
    population,
    table_users,
)


class ExactOracle:
    """A noise-free CellSumOracle over a known cell vector: the protocol needs no mechanism."""

    def __init__(self, cells: np.ndarray) -> None:
        self.cells = cells

    def cell_sums(
        self, stats: Stats, groups: Sequence[Sequence[ProductSet]], estimator: str
    ) -> list[CellSums]:
        return [
            CellSums(np.array([self.cells[s.cells()].sum() for s in g]), np.zeros((len(g), len(g))))
            for g in groups
        ]


class FixedOracle:
    """Returns given estimates and covariance, to check the ratio algebra of answer_queries."""

    def __init__(self, estimates: np.ndarray, covariance: np.ndarray) -> None:
        self.result = CellSums(estimates, covariance)

    def cell_sums(
        self, stats: Stats, groups: Sequence[Sequence[ProductSet]], estimator: str
    ) -> list[CellSums]:
        return [self.result for _ in groups]


# --------------------------------------------------------------------------- the worked example
def test_table_iii_indices() -> None:
    """user1 = 210_3 = 21, user2 = 022_3 = 8, user3 = 100_3 = 9 (Disc is deterministic at +-1)."""
    states = joint_states(table_users(), np.random.default_rng(0))
    assert states.tolist() == [[2, 1, 0], [0, 2, 2], [1, 0, 0]]
    assert joint_index(states).tolist() == [21, 8, 9]


@pytest.mark.parametrize(("text", "cond", "prime", "num_cells", "den_cells", "f_true", "m_true"), ROWS)
def test_worked_example_rows(
    text: str,
    cond: tuple[str, str],
    prime: tuple[str, str],
    num_cells: list[int],
    den_cells: list[int] | None,
    f_true: float,
    m_true: float,
) -> None:
    query = parse_query(text, NAMES)
    assert query.condition.encoding() == cond
    assert query.condition.with_present(query.target).encoding() == prime
    sets = query.sets()
    assert sets.numerator.cells().tolist() == num_cells
    assert sets.numerator.size == len(num_cells)
    if den_cells is not None:
        assert sets.denominator is not None and sets.denominator.cells().tolist() == den_cells
    # true values from the noise-free one-hot sum, through the protocol and from the raw data
    (exact,) = answer_queries(ExactOracle(ONE_HOT_SUM), Stats(IOH(3, 1.0)), [query])
    assert (exact.frequency, exact.mean) == pytest.approx((f_true, m_true), abs=1e-15)
    assert conditional_truth(table_users(), query) == pytest.approx((f_true, m_true), abs=1e-15)


def test_worked_example_mean_cells() -> None:
    """S+ and S- of m(H | P=1) and m(P | H=1, F=0), and F_110 + F_111 = 0 + 1."""
    s = parse_query("hamburger | pepsi=1", NAMES).sets()
    assert s.positive.cells().tolist() == [18, 20, 21, 23, 24, 26]
    assert s.negative.cells().tolist() == [0, 2, 3, 5, 6, 8]
    assert ONE_HOT_SUM[s.positive.cells()].sum() == 1 and ONE_HOT_SUM[s.negative.cells()].sum() == 1
    s = parse_query("pepsi | hamburger=1, fries=0", NAMES).sets()
    assert s.positive.cells().tolist() == [5, 23] and s.negative.cells().tolist() == [3, 21]
    assert ONE_HOT_SUM[s.positive.cells()].sum() == 0 and ONE_HOT_SUM[s.negative.cells()].sum() == 1
    f_110 = Condition.from_bits("111", "110").product_set().cells()
    f_111 = Condition.from_bits("111", "111").product_set().cells()
    assert (ONE_HOT_SUM[f_110].sum(), ONE_HOT_SUM[f_111].sum()) == (0, 1)
    fries_given_h = parse_query("fries | hamburger=1", NAMES).sets()
    assert ONE_HOT_SUM[fries_given_h.numerator.cells()].sum() == 1
    assert fries_given_h.denominator is not None and ONE_HOT_SUM[fries_given_h.denominator.cells()].sum() == 2


def test_worked_example_counting_operators() -> None:
    """F^110_100 = {3,4,5,21,22,23} holds 1 user, F^001_000 the 9 Pepsi-less cells holds 0,
    and I(101) = {010, 012, 210, 212}_3 = {3, 5, 21, 23} (Sun et al. 2019, Def. 5)."""
    t = Condition.from_bits("110", "100").product_set()
    assert t.cells().tolist() == [3, 4, 5, 21, 22, 23] and ONE_HOT_SUM[t.cells()].sum() == 1
    t = Condition.from_bits("001", "000").product_set()
    assert t.cells().tolist() == [1, 4, 7, 10, 13, 16, 19, 22, 25] and ONE_HOT_SUM[t.cells()].sum() == 0
    assert Condition.from_bits("111", "101").product_set().cells().tolist() == [3, 5, 21, 23]
    assert joint_index(np.array([[0, 1, 0], [0, 1, 2], [2, 1, 0], [2, 1, 2]])).tolist() == [3, 5, 21, 23]


# --------------------------------------------------------------------------- queries and parsing
def test_parse_d0_and_d3_examples() -> None:
    q = parse_query("pepsi | hamburger=1, fries=0", NAMES)
    assert (q.target, q.condition.encoding()) == (P, ("110", "100"))
    assert parse_query("  pepsi|fries = 0 ,hamburger=1 ", NAMES) == q  # order-free, whitespace-tolerant
    assert (
        parse_query("pepsi | hamburger, fries = 1, 0", NAMES) == q
    )  # grouped notation of Sun et al. 2019, Def. 2
    assert parse_query("pepsi", NAMES) == ConditionalQuery(P, Condition.none(3))
    assert parse_query(" pepsi ", NAMES).condition.is_empty
    # Sun, Ping and Ye 2021: "cough, cancer = 1, 0" and "cancer, cough = 0, 1" over (cancer, fever, cough) are (101, 001)
    medical = ("cancer", "fever", "cough")
    for text in ("fever | cough, cancer = 1, 0", "fever | cancer, cough = 0, 1", "fever | cough=1, cancer=0"):
        assert parse_query(text, medical).condition.encoding() == ("101", "001")
    assert ConditionalQuery.from_encoding(1, "101", "001") == parse_query(
        "fever | cough=1, cancer=0", medical
    )


def test_format_round_trip() -> None:
    q = ConditionalQuery.build(3, P, [(F, 0), (H, 1)])
    assert q.format(NAMES) == "pepsi | hamburger=1, fries=0"
    assert q.format() == "2 | 0=1, 1=0"
    assert parse_query(q.format(NAMES), NAMES) == q
    assert str(q.condition) == "(110, 100)"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("burger | pepsi=1", "'burger'"),
        ("pepsi | burger=1", "'burger'"),
        ("pepsi | hamburger=1, hamburger=0", "'hamburger' appears twice"),
        ("pepsi | pepsi=1", "'pepsi' appears in its own conditions"),
        ("pepsi | hamburger=2", "'2'"),
        ("pepsi | hamburger", "'hamburger' in query"),
        ("pepsi | hamburger=1,", "stray ','"),
        ("pepsi |", "no condition"),
        ("| pepsi=1", "lacks a target"),
        ("pepsi | fries=1 | hamburger=1", "more than one '|'"),
        ("pepsi | hamburger, fries = 1", "2 keys but 1 values"),
    ],
)
def test_parse_errors_name_the_token(text: str, fragment: str) -> None:
    with pytest.raises(InvalidQuery) as info:
        parse_query(text, NAMES)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_query_validation() -> None:
    with pytest.raises(InvalidQuery, match="not a subset of alpha"):
        Condition.from_bits("100", "110")
    with pytest.raises(InvalidQuery, match="appears in its own conditions"):
        ConditionalQuery.from_encoding(0, "101", "001")
    with pytest.raises(InvalidQuery, match="unknown key 3"):
        ConditionalQuery.build(3, 0, {3: 1})
    with pytest.raises(InvalidQuery, match="unknown target key 5"):
        ConditionalQuery.build(3, 5)
    with pytest.raises(InvalidQuery, match="appears twice"):
        Condition.from_pairs(3, [(1, 1), (1, 0)])
    with pytest.raises(InvalidQuery, match="0 \\(absent\\) or 1"):
        Condition.from_pairs(3, [(1, 2)])
    with pytest.raises(InvalidQuery, match="one bit per key"):
        Condition.from_bits("10", "100")
    with pytest.raises(InvalidQuery, match="listed twice"):
        parse_query("a", ["a", "a"])
    assert Condition.from_pairs(3, [(1, 0), (0, 1)]) == Condition.from_pairs(3, {0: 1, 1: 0})


def test_product_sets() -> None:
    everything = ProductSet.everything(2)
    assert everything.cells().tolist() == list(range(9)) and everything.size == 9
    t = everything.restrict(0, (2,))
    assert t.cells().tolist() == [6, 7, 8]
    assert t.intersection(everything.restrict(1, (0, 2))) == ProductSet(((2,), (0, 2)))
    assert t.intersection(everything.restrict(0, (0, 1))) is None
    assert ProductSet(((2, 0, 2), (1,))).allowed == ((0, 2), (1,))
    with pytest.raises(InvalidQuery):
        ProductSet(((0, 3), (1,)))
    with pytest.raises(InvalidQuery):
        ProductSet(((), (1,)))
    # cells enumerate exactly the joint states whose digits lie in the sets
    t = ProductSet(((0, 2), (1,), (0, 1, 2), (2,)))
    digits = np.array(list(itertools.product(range(3), repeat=4)))
    inside = np.all([np.isin(digits[:, k], t.allowed[k]) for k in range(4)], axis=0)
    assert t.cells().tolist() == np.flatnonzero(inside).tolist()


def test_joint_state_probabilities_match_digits() -> None:
    present, values = population(50, seed=4)
    users = KVData.from_dense(present, values)
    cells = [ProductSet(tuple((int(s),) for s in digits)) for digits in itertools.product(range(3), repeat=3)]
    np.testing.assert_allclose(
        joint_state_probabilities(users), membership(present, values, cells), atol=1e-15
    )


# --------------------------------------------------------------------------- generic ratio algebra
def fieller_set(num: float, den: float, v_num: float, v_den: float, cov: float, low: float) -> np.ndarray:
    """The grid points m in [low, 1] with (num - m den)^2 <= Z95^2 Var(num - m den)."""
    m = np.linspace(low, 1.0, 200_001)
    return m[(num - m * den) ** 2 <= Z95**2 * (v_num - 2 * m * cov + m * m * v_den)]


def test_answer_queries_uses_covariances() -> None:
    """Fieller's intervals on the sums and their covariance; the standard error is the
    interval's, which tends to the delta method's as the noise shrinks."""
    rng = np.random.default_rng(5)
    root = rng.standard_normal((4, 4))
    num, pos, neg, den = 30.0, 20.0, 10.0, 60.0
    stats = Stats(IOH(3, 1.0), {"C": np.zeros(27, dtype=np.int64), "n": np.array([100])})
    for scale in (10.0, 1e-4):
        cov = scale * root @ root.T
        oracle = FixedOracle(np.array([num, pos, neg, den]), cov)
        (ans,) = answer_queries(oracle, stats, [parse_query("pepsi | fries=1", NAMES)])
        r = num / den
        assert ans.frequency == pytest.approx(r)
        inside = fieller_set(num, den, cov[0, 0], cov[3, 3], cov[0, 3], 0.0)
        np.testing.assert_allclose(ans.frequency_interval, (inside.min(), inside.max()), atol=1e-5)
        assert ans.frequency_stderr == pytest.approx((inside.max() - inside.min()) / (2 * Z95), abs=1e-5)
        # the mean's set holds Disc's variance of the holders' values, H (1 - m^2)
        m = (pos - neg) / (pos + neg)
        v_pp, v_nn, c_pn = cov[1, 1], cov[2, 2], cov[1, 2]
        inside = fieller_set(
            pos - neg, pos + neg, v_pp + v_nn - 2 * c_pn + 30, v_pp + v_nn + 2 * c_pn - 30, v_pp - v_nn, -1.0
        )
        assert ans.mean == pytest.approx(m)
        np.testing.assert_allclose(ans.mean_interval, (inside.min(), inside.max()), atol=1e-5)
        # the mean's standard error reaches from the point to the farther end
        reach = max(m - inside.min(), inside.max() - m) / Z95
        assert ans.mean_stderr == pytest.approx(reach, abs=1e-5)
    # small noise: the delta method's standard error of the frequency (the mean's set keeps
    # Disc's variance, which does not shrink with the oracle's noise)
    assert ans.frequency_stderr**2 == pytest.approx(
        (cov[0, 0] - 2 * r * cov[0, 3] + r * r * cov[3, 3]) / den**2, rel=1e-3
    )
    # an empty condition divides by the known n, with no denominator variance
    (ans,) = answer_queries(
        FixedOracle(np.array([num, pos, neg]), cov[:3, :3]), stats, [parse_query("pepsi", NAMES)]
    )
    assert (ans.frequency, ans.denominator) == (0.3, 100.0)
    assert ans.frequency_stderr == pytest.approx(math.sqrt(cov[0, 0]) / 100)


def test_a_ratio_over_an_insignificant_count() -> None:
    """Denominator 60 with sd 40 (60^2 < 1.96^2 1600): the condition's users cannot be told
    from nobody, so f's interval is the whole [0, 1]; holders 30 with sd 20 make the mean
    not estimable (NaN, with the reason)."""
    stats = Stats(IOH(3, 1.0), {"C": np.zeros(27, dtype=np.int64), "n": np.array([100])})
    cov = np.diag([400.0, 200.0, 200.0, 1600.0])
    query = parse_query("pepsi | fries=1", NAMES)
    (ans,) = answer_queries(FixedOracle(np.array([30.0, 20.0, 10.0, 60.0]), cov), stats, [query])
    assert ans.frequency == 0.5 and ans.frequency_interval == (0.0, 1.0)
    assert ans.frequency_stderr == pytest.approx(1 / (2 * Z95))
    assert "[0, 1]" in ans.diagnostics["frequency_interval_unbounded"]
    assert math.isnan(ans.mean) and math.isnan(ans.mean_stderr)
    assert all(math.isnan(v) for v in ans.mean_interval)
    assert "not estimable" in ans.diagnostics["mean_undefined"]
    # the same sums, precise: a bounded interval and a mean
    (ans,) = answer_queries(FixedOracle(np.array([30.0, 20.0, 10.0, 60.0]), cov / 100), stats, [query])
    assert ans.frequency_interval[1] - ans.frequency_interval[0] < 0.5 and math.isfinite(ans.mean_stderr)
    assert "frequency_interval_unbounded" not in ans.diagnostics


class TwoEstimatorOracle:
    """Different sums for ``unbiased`` (the basis) and any other estimator (the point)."""

    def __init__(self, basis: np.ndarray, point: np.ndarray, covariance: np.ndarray) -> None:
        self.basis, self.point, self.covariance = basis, point, covariance

    def cell_sums(
        self, stats: Stats, groups: Sequence[Sequence[ProductSet]], estimator: str
    ) -> list[CellSums]:
        sums = self.basis if estimator == "unbiased" else self.point
        return [CellSums(sums, self.covariance) for _ in groups]


def test_a_projected_point_keeps_the_basis_interval_widened_to_hold_it() -> None:
    stats = Stats(IOH(3, 1.0), {"C": np.zeros(27, dtype=np.int64), "n": np.array([100])})
    cov = np.diag([4.0, 2.0, 2.0, 16.0])
    basis = np.array([30.0, 20.0, 10.0, 60.0])
    query = parse_query("pepsi | fries=1", NAMES)
    (exact,) = answer_queries(FixedOracle(basis, cov), stats, [query])
    oracle = TwoEstimatorOracle(basis, np.array([45.0, 45.0, 0.0, 50.0]), cov)
    (ans,) = answer_queries(oracle, stats, [query], "normsub")
    assert (ans.frequency, ans.mean) == (0.9, 1.0)  # the point's
    assert ans.frequency_interval == (exact.frequency_interval[0], 0.9)
    assert ans.mean_interval == (exact.mean_interval[0], 1.0)
    assert ans.frequency_stderr == pytest.approx((0.9 - exact.frequency_interval[0]) / (2 * Z95))
    # the mean's MSE: the basis mean's squared standard error plus the squared distance to it
    assert ans.mean_stderr == pytest.approx(math.hypot(exact.mean_stderr, 1.0 - exact.mean))
    # a point whose holders were projected away takes the basis ratio
    oracle = TwoEstimatorOracle(basis, np.array([0.0, 0.0, 0.0, 50.0]), cov)
    (ans,) = answer_queries(oracle, stats, [query], "normsub")
    assert ans.frequency == 0.0 and ans.mean == pytest.approx(exact.mean)
