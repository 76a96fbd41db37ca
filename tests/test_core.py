"""Building blocks: user data validation, Norm-Sub, schema checks, parameters, statistics bytes."""

from __future__ import annotations

import numpy as np
import pytest

from kvldp.common.data.kvdata import InvalidUserData, KVData
from kvldp.common.data.schema import Field, validate_fields
from kvldp.common.data.stats import Stats, StatsMismatch
from kvldp.common.estimation.simplex import project_simplex
from kvldp.common.mechanisms import create
from kvldp.common.primitives import bit_column_sums, one_hot_bits, pack_bits
from kvldp.common.spec.params import InvalidParameter, parse_assignments


def test_user_data_rejects_bad_values_with_a_clear_message() -> None:
    with pytest.raises(InvalidUserData, match=r"value 1.5 for key 2 of user 1 .* outside \[-1, 1\]"):
        KVData.from_pairs(3, [{0: 0.1}, {2: 1.5}])
    with pytest.raises(InvalidUserData, match="NaN"):
        KVData.from_pairs(3, [{0: float("nan")}])
    with pytest.raises(InvalidUserData, match="outside"):
        KVData.from_pairs(3, [{3: 0.0}])
    with pytest.raises(InvalidUserData, match="not an integer"):
        KVData.from_pairs(3, [{"a": 0.0}])  # type: ignore[dict-item]
    with pytest.raises(InvalidUserData, match="twice"):
        KVData(3, np.array([0, 2]), np.array([1, 1]), np.array([0.0, 0.0]))
    mech = create("kvue", 3, 1.0)
    with pytest.raises(InvalidUserData, match=r"value -1.0001 for key 1 of user 0 is outside \[-1, 1\]"):
        mech.perturb({1: -1.0001}, np.random.default_rng(0))


def test_user_data_lookup_truth_and_rows() -> None:
    users = KVData.from_pairs(4, [{0: 0.5, 3: -1.0}, {}, {1: 0.25}, {3: 1.0}])
    held, values = users.lookup(np.array([0, 0, 1, 2, 3]), np.array([3, 1, 0, 1, 3]))
    assert held.tolist() == [True, False, False, True, True]
    assert values.tolist() == [-1.0, 0.0, 0.0, 0.25, 1.0]
    f, m = users.truth()
    assert f.tolist() == [0.25, 0.25, 0.0, 0.5]
    assert m[0] == 0.5 and np.isnan(m[2]) and m[3] == 0.0
    # the per-key totals behind the truth are computed once and cannot be written to
    holders, sums = users.key_totals()
    assert holders.tolist() == [1.0, 1.0, 0.0, 2.0] and sums.tolist() == [0.5, 0.25, 0.0, 0.0]
    assert users.key_totals()[0] is holders and not (holders.flags.writeable or sums.flags.writeable)
    part = users.rows(2, 4)
    assert part.n_users == 2 and part.keys.tolist() == [1, 3]
    present, vals = users.to_dense()
    assert KVData.from_dense(present, vals).keys.tolist() == users.keys.tolist()


def test_norm_sub_is_the_simplex_projection() -> None:
    rng = np.random.default_rng(41)
    x = rng.normal(0.2, 0.4, size=(200, 7))
    y = project_simplex(x)
    assert np.all(y >= 0) and np.allclose(y.sum(axis=1), 1.0)
    # Norm-Sub's definition: one common shift of the positive entries, negatives to 0
    for row, proj in zip(x, y, strict=True):
        kept = proj > 0
        shift = proj[kept] - row[kept]
        assert np.allclose(shift, shift[0])
        assert np.all(row[~kept] + shift[0] <= 1e-12)
    assert np.allclose(project_simplex(np.array([3.0, -1.0]), total=10.0), [7.0, 3.0])
    assert np.allclose(project_simplex(np.array([3.0, -1.0]), total=1.0), [1.0, 0.0])
    assert np.all(np.isnan(project_simplex(np.array([[np.nan, 1.0]]))))


def test_schema_validation_names_the_reason() -> None:
    fields = (Field("j", "uint", 0, 5), Field("bits", "bits", 0, 10))
    batch = {"j": np.array([0, 5, 2, -1]), "bits": np.zeros((4, 2), dtype=np.uint8)}
    batch["bits"][2, 1] = 0b1000_0000  # a padding bit (only bits 0..9 exist)
    valid, reasons = validate_fields(batch, fields)
    assert valid.tolist() == [True, False, False, False]
    assert reasons[1] == "j: not below 5" and reasons[2] == "bits: padding bits set" and "below" in reasons[3]


def test_parameters_are_checked_by_name() -> None:
    with pytest.raises(InvalidParameter, match=r"no parameter 'elll'.*ell"):
        create("grr", 3, 1.0, elll=2)
    with pytest.raises(InvalidParameter, match="integer"):
        create("grr", 3, 1.0, ell="two")
    with pytest.raises(InvalidParameter, match="positive"):
        create("grr", 3, -1.0)
    with pytest.raises(InvalidParameter, match="one of"):
        create("privkvm", 3, 1.0, budget_mode="sometimes")
    assert create("grr", 3, 1.0, **parse_assignments(["ell=2"])).params["ell"] == 2
    with pytest.raises(InvalidParameter, match="NAME=VALUE"):
        parse_assignments(["ell"])


def test_statistics_bytes_reject_garbage() -> None:
    mech = create("kvue", 3, 1.0)
    with pytest.raises(StatsMismatch):
        Stats.from_bytes(mech, b"\x93\x01\x02")
    with pytest.raises(StatsMismatch):
        Stats.from_bytes(mech, b"")
    data = mech.new_stats().to_bytes()
    with pytest.raises(StatsMismatch):
        Stats.from_bytes(create("kvue", 4, 1.0), data)
    assert mech.digest != create("kvue", 3, 1.0 + 1e-12).digest


@pytest.mark.parametrize(
    ("rows", "nbits"), [(0, 9), (5, 1), (1023, 100), (1024, 100), (5000, 13), (2000, 300), (3000, 6561)]
)
def test_bit_column_sums_count_every_set_bit(rows: int, nbits: int) -> None:
    """Both paths (unpacking few or wide rows, byte histograms for many narrow ones)
    against a plain count, with columns counting past a uint8."""
    bits = np.random.default_rng(rows + nbits).random((rows, nbits)) < 0.3
    assert np.array_equal(bit_column_sums(pack_bits(bits), nbits), bits.sum(axis=0))


@pytest.mark.parametrize(
    ("nbits", "p", "q"),
    [
        (13, 0.5, 1 / (np.e**4 + 1)),  # OUE at eps = 4
        (27, 0.73, 0.27),  # SUE at eps = 2
        (9, 0.9, 0.5 / 256),  # every bit drawn below q is one of the 1-in-256 ties
        (700, 1.0, 0.0),  # several blocks of rows
    ],
)
def test_one_hot_bits_set_the_true_bit_with_p_and_every_other_with_q(nbits: int, p: float, q: float) -> None:
    """Each bit's frequency within 4 sd of a binomial proportion; padding bits stay 0."""
    n = 400_000 if nbits < 100 else 20_000
    rng = np.random.default_rng(nbits)
    index = rng.integers(0, nbits, n)
    packed = one_hot_bits(index, nbits, p, q, rng)
    assert packed.shape == (n, (nbits + 7) // 8)
    assert not np.any(np.unpackbits(packed, axis=1, bitorder="little")[:, nbits:])
    bits = np.unpackbits(packed, axis=1, count=nbits, bitorder="little").astype(bool)
    own = np.zeros_like(bits)
    own[np.arange(n), index] = True
    for mask, prob in ((own, p), (~own, q)):
        count = int(mask.sum())
        assert abs(bits[mask].mean() - prob) <= 4 * np.sqrt(prob * (1 - prob) / count) + 1e-12, (prob, count)


@pytest.mark.parametrize("index", [[0, 9], [-1, 0]])
def test_one_hot_bits_refuses_a_true_bit_outside_the_row(index: list[int]) -> None:
    """A true bit past the row would land in a padding bit or the next row's byte."""
    with pytest.raises(ValueError, match=r"outside 0\.\.8"):
        one_hot_bits(np.array(index), 9, 0.5, 0.1, np.random.default_rng(0))
