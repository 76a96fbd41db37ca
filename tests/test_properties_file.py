"""kvldp reads a client properties file exactly as Java does (``java.util.Properties.load``,
as Kafka's tools call it), checked against real Java: the table of the format's rules,
and thousands of seeded random files built from its hardest pieces. What kvldp refuses
instead (a key given twice, characters outside ASCII, a byte order mark, a line of
nothing but a continuation backslash, a malformed ``\\uXXXX``, half a surrogate pair) is
one line naming the file and the line, never a value."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from kvldp.kafka.properties_file import InvalidPropertiesFile, parse_properties

from support.deploy import CLIENT_FILES
from support.doc_blocks import first_block
from support.java_properties import RULES, Rule, java_reading

SECRET = "pa55-W0rd-never-shown"
#: the pieces random files are made of: separators, blanks, comment marks, continuations,
#: escapes, surrogates, Java's three line ends, and characters Java takes as plain ones
PIECES = (
    "a", "b", "key", "x.y", "sasl.password", " ", "  ", "\t", "\f", "=", ":", "#", "!",
    "\\", "\\\\", "\\\n", "\\\r\n", "\\\r", "\n", "\r\n", "\r", "\\u0041", "\\u00e9",
    "\\ud83d\\ude00", "\\t", "\\n", "\\r", "\\f", "\\=", "\\:", "\\ ",
    "\\#", "\\!", "\\x", "\n#c\\\n", "\n!c\\\n", "\n  #c\n", "\x00",
)  # fmt: skip
#: rarer pieces, which make kvldp refuse the file: a lone continuation line, malformed
#: escapes, halves of surrogate pairs, bytes outside ASCII
RARE_PIECES = ("\n\\\n", "\\u12", "\\uZZZZ", "\\ud83d", "\\ude00", "\x85", "\xe9")
RANDOM_FILES = 3000


@pytest.fixture(scope="module")
def java_rules(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str] | str]:
    return java_reading([rule.text for rule in RULES], tmp_path_factory.mktemp("rules"))


@pytest.mark.parametrize("index", range(len(RULES)), ids=[rule.name for rule in RULES])
def test_each_rule_reads_as_java_reads_it(java_rules: list[dict[str, str] | str], index: int) -> None:
    rule: Rule = RULES[index]
    assert java_rules[index] == rule.java, "the table says what Java reads"
    if rule.kvldp_refuses is None:
        assert parse_properties(rule.text, "client.properties") == java_rules[index]
    else:
        with pytest.raises(InvalidPropertiesFile) as caught:
            parse_properties(rule.text, "client.properties")
        message = str(caught.value)
        assert message.startswith("client.properties: ") and rule.kvldp_refuses in message
        assert "\n" not in message


def test_the_table_covers_every_rule_kvldp_refuses() -> None:
    refusals = [rule.kvldp_refuses for rule in RULES if rule.kvldp_refuses]
    kinds = (
        "set twice",
        "outside ASCII",
        "byte order mark",
        "continuation backslash",
        "\\u must",
        "surrogate",
    )
    for kind in kinds:
        assert any(kind in refusal for refusal in refusals), kind
    assert len(refusals) < len(RULES) // 4, "the table is mostly files kvldp reads"


def random_file(rng: random.Random) -> bytes:
    pieces = [rng.choice(RARE_PIECES if rng.random() < 0.02 else PIECES) for _ in range(rng.randint(1, 16))]
    return "".join(pieces).encode("latin-1")


def test_random_files_read_as_java_reads_them_or_are_refused(tmp_path: Path) -> None:
    """Every random file kvldp reads gives Java's entries; every file it refuses is refused
    for one of its reasons. Most are read (the comparison is not vacuous)."""
    rng = random.Random(20240611)
    files = [random_file(rng) for _ in range(RANDOM_FILES)]
    read = 0
    for data, java in zip(files, java_reading(files, tmp_path), strict=True):
        try:
            entries = parse_properties(data, "f")
        except InvalidPropertiesFile as exc:
            assert re.match(
                r"f: (line \d+: (.*is set twice|.*characters outside ASCII|.*half a surrogate pair|a line "
                r"holding nothing but a continuation backslash|\\u must be followed)|starts with a UTF-8 "
                r"byte order mark)",
                str(exc),
            ), (data, str(exc))
            continue
        assert entries == java, data
        read += 1
    assert read > RANDOM_FILES // 2, read


def test_a_malformed_escape_names_its_line_not_its_text() -> None:
    data = f"# one\nclient.id=x\nsasl.password={SECRET}\\\n  more\\u12{SECRET}\n".encode()
    with pytest.raises(InvalidPropertiesFile) as caught:
        parse_properties(data, "f")
    assert str(caught.value) == "f: line 3: \\u must be followed by four hexadecimal digits"


def test_refusals_never_show_a_value() -> None:
    for data in (
        f"sasl.password={SECRET}\nsasl.password={SECRET}\n".encode(),
        f"sasl.password={SECRET}ü\n".encode(),
        f"sasl.password={SECRET}\\uZZ\n".encode(),
    ):
        with pytest.raises(InvalidPropertiesFile) as caught:
            parse_properties(data, "f")
        assert SECRET not in str(caught.value)


def test_a_key_that_cannot_be_shown_is_quoted_or_left_out() -> None:
    with pytest.raises(InvalidPropertiesFile, match=re.escape("line 2: 'a\\nb' is set twice")):
        parse_properties(b"a\\nb=1\na\\nb=2\n", "f")
    with pytest.raises(InvalidPropertiesFile, match=r"^f: line 1: characters outside ASCII"):
        parse_properties("ké=v\n".encode(), "f")


def test_the_repositorys_client_files_read_as_java_reads_them(tmp_path: Path) -> None:
    """The compose stack's client files and the README's example."""
    files = [
        *(path.read_bytes() for path in CLIENT_FILES.values()),
        first_block("README.md", "properties").encode(),
    ]
    for data, java in zip(files, java_reading(files, tmp_path), strict=True):
        assert parse_properties(data, "f") == java
        assert isinstance(java, dict) and "sasl.password" in java
