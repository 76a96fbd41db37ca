"""Java's reading of properties files, and a table of its rules.

:func:`java_reading` runs ``LoadProperties.java`` (beside this file) on a batch of files:
``java.util.Properties.load`` on each file's bytes decoded as ISO-8859-1, which is how
Kafka's tools read a client properties file. ``make java`` installs Debian's
``default-jre-headless`` when ``java`` is missing (it runs single source files: its
runtime image has the ``jdk.compiler`` module).

:data:`RULES` holds one file per rule of the format, the entries Java reads from it (the
tests check them against real Java), and what kvldp's reader and the compose stack's
broker start script (``deploy/kafka/kafka-start.sh``) make of it. Every file is about
``sasl.password``, the entry the start script hands to the broker, so that each one also
tells whether the script gives the broker Java's password. Shared by
:mod:`tests.test_kafka_config` and :mod:`tests.test_deploy_scripts`.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from support import run

SOURCE = Path(__file__).with_name("LoadProperties.java")
#: kafka-configs.sh's reading of a SCRAM credential (ConfigCommand): the password is the rest
SCRAM_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)")


def java_reading(files: Sequence[bytes], where: Path) -> list[dict[str, str] | str]:
    """Each file as Java reads it: its entries, or Java's error message when it refuses
    the file. One Java process for the whole batch (``where`` holds the files)."""
    java = shutil.which("java")
    assert java, "no java: `make java` installs Debian's default-jre-headless (make test does)"
    where.mkdir(parents=True, exist_ok=True)
    names = []
    for index, data in enumerate(files):
        (where / f"{index}.properties").write_bytes(data)
        names.append(f"{index}.properties")
    out = run([java, str(SOURCE.resolve()), *names], cwd=where, timeout=300, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == len(files), out[-3000:]
    readings: list[dict[str, str] | str] = []
    for line in lines:
        reading = json.loads(line)
        readings.append(reading["entries"] if "entries" in reading else reading["error"])
    return readings


@dataclass(frozen=True)
class Rule:
    """A file, what Java reads from it (its entries, or its error message), and, when
    they do not read it, a fragment of the one-line refusal of kvldp's reader and of the
    start script (with the line it names, counted in ``text``)."""

    name: str
    text: bytes
    java: dict[str, str] | str
    kvldp_refuses: str | None = None
    script_refuses: tuple[int, str] | None = None


_BACKSLASH = (1, "a backslash")

RULES = (
    Rule("key=value", b"sasl.password=s3cret\n", {"sasl.password": "s3cret"}),
    Rule("no newline at the end", b"sasl.password=s3cret", {"sasl.password": "s3cret"}),
    Rule(
        "separators, comment marks and blanks inside a value are part of it",
        b"sasl.password=p=a:s#s!w d,]\n",
        {"sasl.password": "p=a:s#s!w d,]"},
    ),
    Rule(
        "text after a value is part of it",
        b"sasl.password=s3cret # not a comment\n",
        {"sasl.password": "s3cret # not a comment"},
    ),
    Rule(
        "blanks around '='",
        b"sasl.password = s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "':' separates",
        b"sasl.password:s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "':' with blanks",
        b"sasl.password :  s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "a blank separates",
        b"sasl.password s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "a tab separates, and only the first separator does",
        b"sasl.password\ts3=cret\n",
        {"sasl.password": "s3=cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "a form feed is a blank",
        b"sasl.password\x0c=\x0cs3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "leading blanks of the line and of the value are dropped",
        b"   sasl.password=   s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "blanks after '=' are dropped",
        b"sasl.password=  s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "blanks at the start or end of the value"),
    ),
    Rule(
        "trailing blanks are kept",
        b"sasl.password=s3cret  \n",
        {"sasl.password": "s3cret  "},
        script_refuses=(1, "blanks at the start or end of the value"),
    ),
    Rule(
        "a backslash at the end continues the line, without the next line's leading blanks",
        b"sasl.password=s3\\\n     cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "a continued line never starts a comment",
        b"sasl.password=s3\\\n#cret\n",
        {"sasl.password": "s3#cret"},
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "a continuation at the end of the file",
        b"sasl.password=s3cret\\",
        {"sasl.password": "s3cret"},
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "an escaped backslash at the end does not continue",
        b"sasl.password=s3cret\\\\\nclient.id=kvldp\n",
        {"sasl.password": "s3cret\\", "client.id": "kvldp"},
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "escapes",
        b"sasl.password=\\t\\n\\r\\f\\\\\\=\\:\\#\\!\\ \\x\n",
        {"sasl.password": "\t\n\r\f\\=:#! x"},
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "unicode escapes",
        b"sasl.password=p\\u00e4ss\\u20AC\n",
        {"sasl.password": "päss€"},
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "a surrogate pair of escapes is one character",
        b"sasl.password=\\ud83d\\ude00\n",
        {"sasl.password": "\U0001f600"},
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "half a surrogate pair is kept as it is",
        b"sasl.password=\\ud83dx\n",
        {"sasl.password": "\ud83dx"},
        kvldp_refuses="line 1: sasl.password: a \\uXXXX escape of half a surrogate pair",
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "a malformed unicode escape",
        b"sasl.password=\\u00g1\n",
        "Malformed \\uxxxx encoding.",
        kvldp_refuses="line 1: \\u must be followed by four hexadecimal digits",
        script_refuses=_BACKSLASH,
    ),
    Rule(
        "escaped separators in a key",
        b"sasl.pass\\=word\\ x=s3cret\n",
        {"sasl.pass=word x": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "escapes in a key give the plain key",
        b"sasl\\.password=s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "a key alone has an empty value",
        b"client.id\nsasl.password=s3cret\n",
        {"client.id": "", "sasl.password": "s3cret"},
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "an empty value",
        b"client.id=\nsasl.password=s3cret\n",
        {"client.id": "", "sasl.password": "s3cret"},
    ),
    Rule(
        "'#' and '!' comments, blank and whitespace-only lines",
        b"# comment\n! comment\n\n  \t\n  # indented\nsasl.password=s3cret\n",
        {"sasl.password": "s3cret"},
    ),
    Rule(
        "a comment ending in a backslash does not continue",
        b"# note \\\nsasl.password=s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "a comment ending in a backslash"),
    ),
    Rule(
        "CRLF line ends",
        b"# comment\r\nsasl.password=s3cret\r\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "a carriage return or NUL byte"),
    ),
    Rule(
        "a lone carriage return ends a line, even a comment's",
        b"# comment\rsasl.password=s3cret\n",
        {"sasl.password": "s3cret"},
        script_refuses=(1, "a carriage return or NUL byte"),
    ),
    Rule(
        "a NUL byte is a character of the value",
        b"sasl.password=s3\x00cret\n",
        {"sasl.password": "s3\x00cret"},
        script_refuses=(1, "a carriage return or NUL byte"),
    ),
    Rule(
        "a key given twice: Java keeps the last",
        b"sasl.password=s3cret-1\nsasl.password=s3cret-2\n",
        {"sasl.password": "s3cret-2"},
        kvldp_refuses="line 2: sasl.password is set twice (first on line 1)",
        script_refuses=(2, "sasl.password is set twice (first on line"),
    ),
    Rule(
        "bytes outside ASCII are ISO-8859-1 characters",
        "sasl.password=päss\n".encode(),
        {"sasl.password": "pÃ¤ss"},
        kvldp_refuses="line 1: sasl.password: characters outside ASCII",
        script_refuses=(1, "sasl.password: a character other than printable ASCII"),
    ),
    Rule(
        "a UTF-8 byte order mark belongs to the first key",
        b"\xef\xbb\xbfsasl.password=s3cret\n",
        {"ï»¿sasl.password": "s3cret"},
        kvldp_refuses="starts with a UTF-8 byte order mark",
        script_refuses=(1, "not KEY=VALUE"),
    ),
    Rule(
        "a line of nothing but a continuation backslash: the next line may be a comment",
        b"\\\n  # c\nsasl.password=s3cret\n",
        {"sasl.password": "s3cret"},
        kvldp_refuses="line 1: a line holding nothing but a continuation backslash",
        script_refuses=(1, "not KEY=VALUE"),
    ),
)
