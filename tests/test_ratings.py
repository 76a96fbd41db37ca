"""Ratings files (``user,item,rating``) as populations: parsing, key choice, scaling."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvldp.sim.csvsource import InvalidCsv
from kvldp.sim.datasets import generate
from kvldp.sim.ratings import is_ratings_file, read_ratings

from support import random_ratings, run_kvldp

MOVIELENS_STYLE = (
    "userId,movieId,rating,timestamp\n1,10,4.0,9\n1,20,0.5,9\n2,10,5.0,9\n3,30,2.75,9\n3,10,3.0,9\n"
)


def test_reads_movielens_csv_and_tab_separated_u_data(tmp_path: Path) -> None:
    csv_file = tmp_path / "ratings.csv"
    csv_file.write_text(MOVIELENS_STYLE)
    tab_file = tmp_path / "u.data"
    tab_file.write_text(
        "\n".join("\t".join(line.split(",")) for line in MOVIELENS_STYLE.splitlines()[1:]) + "\n"
    )
    for path in (csv_file, tab_file):
        r = read_ratings(path)
        assert r.user_ids == ["1", "2", "3"] and r.item_ids == ["10", "20", "30"]
        assert r.range == (0.5, 5.0)
        assert r.top_items(2) == ["10", "20"]  # 3 ratings, then the first seen of the 1-rating items
        pop = r.to_population(["10", "30"])
        assert pop.n_users == 3 and pop.d == 2
        # (r - 2.75) / 2.25, the linear map of a 0.5-5 range into [-1, 1]
        dense_present, dense_values = pop.to_dense()
        assert dense_present.tolist() == [[True, False], [True, False], [True, True]]
        assert dense_values[0, 0] == pytest.approx((4.0 - 2.75) / 2.25)
        assert dense_values[1, 0] == pytest.approx(1.0)
        assert dense_values[2, 1] == pytest.approx(0.0)
    assert is_ratings_file(csv_file) and not is_ratings_file(_device_file(tmp_path))


def _device_file(tmp_path: Path) -> Path:
    path = tmp_path / "devices.csv"
    path.write_text("device,key,value\nd1,k0,1\n")
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("u,i,r\n1,2,good\n", ":2: rating 'good' is not a number"),
        ("1,2\n", ":1: expected user,item,rating, got 2 columns"),
        ("1,2,3\n1,2,4\n", "user '1' rates item '2' more than once"),
        ("1,2,nan\n", ":1: rating 'nan' is not finite"),
        ("user,item,rating\n", "no ratings"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "r.csv"
    path.write_text(text)
    with pytest.raises(InvalidCsv, match=message):
        read_ratings(path)


def test_generate_csv_keeps_every_user_and_the_most_rated_items(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text(MOVIELENS_STYLE)
    data = generate(f"csv:{path}", None, 1)
    f, m = data.users.truth()
    assert data.users.n_users == 3
    assert f.tolist() == pytest.approx([1.0]) and m[0] == pytest.approx(
        np.mean([(4 - 2.75), 2.25, 0.25]) / 2.25
    )
    with pytest.raises(ValueError, match="rates 3 items, fewer than the 4 keys"):
        generate(f"csv:{path}", None, 4)
    with pytest.raises(ValueError, match="brings its own users"):
        generate(f"csv:{path}", 10, 1)


def test_evaluate_cli_on_a_ratings_file(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    users = random_ratings(path, users=400, items=6, share=0.5, seed=5)
    done = run_kvldp(
        "evaluate",
        "--mechanism",
        "kvue",
        "--epsilon",
        "2",
        "--keys",
        "4",
        "--dataset",
        f"csv:{path}",
        "--json",
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["users"] == users and result["keys"] == 4


def test_devices_group_each_users_ratings_of_the_collected_items(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text(MOVIELENS_STYLE)
    got = list(read_ratings(path).devices(frozenset({"10", "30"})))
    assert got == [("1", {"10": 4.0}), ("2", {"10": 5.0}), ("3", {"30": 2.75, "10": 3.0})]


def test_format_detection_keeps_headerless_device_files_strict(tmp_path: Path) -> None:
    cases = {
        "d1,k0,1\nd2,k1,2\n": False,  # device format, no header
        "device,key,value\nd1,k0,1\n": False,
        "user,item,rating\n1,2,3\n": True,
        "1,2,3,881250949\n": True,  # a timestamp column
        "1\t2\t3\n": True,
        "\n1::2::3::4\n": True,
    }
    for i, (text, ratings) in enumerate(cases.items()):
        path = tmp_path / f"f{i}.csv"
        path.write_text(text)
        assert is_ratings_file(path) is ratings, text


def test_movielens_10m_separator_and_leading_blank_line(tmp_path: Path) -> None:
    path = tmp_path / "ratings.dat"
    path.write_text("\n1::10::4.5::9\n2::10::1::9\n")
    r = read_ratings(path)
    assert r.user_ids == ["1", "2"] and r.rating.tolist() == [4.5, 1.0]


def test_a_garbage_first_row_is_an_error_not_a_header(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("1,a,oops\n2,b,3\n")
    with pytest.raises(InvalidCsv, match=":1: rating 'oops' is not a number"):
        read_ratings(path)


def test_evaluate_and_calibrate_a_ratings_file_over_all_its_items_by_default(tmp_path: Path) -> None:
    """Without --keys a ratings file's items are the keys (it rates 6, not the 50 or so of
    a generated population); --keys above that names the most it can take."""
    path = tmp_path / "r.csv"
    random_ratings(path, users=400, items=6, share=0.5, seed=5)
    base = ["evaluate", "--mechanism", "kvue", "--epsilon", "2", "--dataset", f"csv:{path}"]
    done = run_kvldp(*base, "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["keys"] == 6
    done = run_kvldp(
        *base, "--calibration", "--estimator", "unbiased", "--repeats", "2", "--json", timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert [row["keys"] for row in json.loads(done.stdout)] == [6]
    done = run_kvldp(*base, "--keys", "8", timeout=60)
    assert (
        done.returncode == 2
        and "rates 6 items, fewer than the 8 keys asked for (ask for 6 or fewer" in done.stderr
    )
