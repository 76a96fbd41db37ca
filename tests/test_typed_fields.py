"""The typed readers: what each refuses (a bool is never a number, a number must be finite,
bounds are inclusive), that the refusal is the caller's own error, and the callers' words."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvldp.common.errors import KvldpError
from kvldp.common.mechanisms import create
from kvldp.common.spec.collection_fields import InvalidCollection, integer, positive_integer
from kvldp.common.spec.params import InvalidParameter
from kvldp.common.spec.privacy import InvalidPrivacy, parse_privacy
from kvldp.common.typed_fields import boolean, expected, number, text, text_list
from kvldp.common.typed_fields import integer as read_integer


class Refused(KvldpError):
    pass


REFUSE = expected(Refused, "where", "what")


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1]])
def test_an_integer_is_an_int_or_a_numpy_integer_never_a_bool(value: object) -> None:
    with pytest.raises(Refused) as info:
        read_integer(value, REFUSE)
    assert str(info.value) == f"where: expected what, got {value!r}"


def test_integer_bounds_are_inclusive_and_numpy_integers_come_back_as_int() -> None:
    assert read_integer(np.int64(3), REFUSE, 3, 3) == 3 and type(read_integer(np.int64(3), REFUSE)) is int
    for outside in (2, 4):
        with pytest.raises(Refused):
            read_integer(outside, REFUSE, 3, 3)


@pytest.mark.parametrize("value", [True, math.inf, -math.inf, math.nan, "1.5", None])
def test_a_number_is_finite_and_never_a_bool(value: object) -> None:
    with pytest.raises(Refused):
        number(value, REFUSE)


def test_positive_numbers_refuse_zero() -> None:
    assert number(2, REFUSE, positive=True) == 2.0 and number(-0.5, REFUSE) == -0.5
    with pytest.raises(Refused):
        number(0.0, REFUSE, positive=True)


def test_booleans_texts_and_text_lists() -> None:
    assert boolean(False, REFUSE) is False
    for value in (0, 1, "true", None):
        with pytest.raises(Refused):
            boolean(value, REFUSE)
    assert text("x", REFUSE) == "x" and text(5, REFUSE, numbers=True) == "5"
    with pytest.raises(Refused):
        text(5, REFUSE)  # a number is text only where the caller says so ...
    with pytest.raises(Refused):
        text(True, REFUSE, numbers=True)  # ... and a bool never
    assert text_list(["a", "b"], REFUSE) == ("a", "b")
    for value in (("a",), ["a", 1], "ab"):
        with pytest.raises(Refused):
            text_list(value, REFUSE)


def test_the_collection_files_words() -> None:
    for read, message in (
        (
            lambda: integer(0, "aggregate.partitions", 1, 1024),
            "aggregate.partitions: expected an integer in [1, 1024], got 0",
        ),
        (lambda: positive_integer(True, "key_count"), "key_count: expected a positive integer, got True"),
        (
            lambda: parse_privacy({"lifetime_epsilon": math.inf}),
            "privacy.lifetime_epsilon: expected a positive finite number, got inf",
        ),
    ):
        with pytest.raises((InvalidCollection, InvalidPrivacy)) as info:
            read()
        assert str(info.value) == message


def test_a_mechanism_refuses_a_bool_for_keys_or_epsilon() -> None:
    with pytest.raises(
        InvalidParameter, match="grr: the number of keys must be a positive integer, got True"
    ):
        create("grr", True, 1.0)
    with pytest.raises(InvalidParameter, match="grr: epsilon must be a positive finite number, got True"):
        create("grr", 3, True)
