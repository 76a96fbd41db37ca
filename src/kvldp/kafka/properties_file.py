"""Client properties files read by Java's rules, so that kvldp and Kafka's tools agree.

A client properties file is one file for two kinds of reader: kvldp, and Kafka's own
Java tools (``kafka-configs.sh --command-config``, the console clients), which read it
with ``java.util.Properties.load`` on the file's bytes, taken as ISO-8859-1. kvldp reads
it by the same rules through the ``javaproperties`` library: ``=``, ``:`` or blanks
between key and value, blanks before the value dropped and after it kept, ``#`` and
``!`` comment lines (never continued, even when they end in a backslash), a backslash
at the end of any other line continuing it (the next line's leading blanks dropped),
and the escapes ``\\t``, ``\\n``, ``\\f``, ``\\r``, ``\\uXXXX`` (surrogate pairs
joined) and backslash-anything for that thing.

A file that kvldp accepts gives exactly the entries Java reads; what could make
readers disagree is refused, in one line naming the file and the line (never a value,
which may be a secret):

- a key given twice. Java keeps the last one silently; two passwords in one file are a
  mistake, and which one is in force should not depend on the reader;
- characters outside ASCII in an entry: Kafka's Java tools decode them as ISO-8859-1,
  librdkafka and most editors as UTF-8, so one file would give two passwords. Written
  as ``\\uXXXX`` escapes they mean one thing to every reader;
- a UTF-8 byte order mark, which Java reads as part of the first line;
- a line holding nothing but a continuation backslash (with blanks around it), on
  which ``javaproperties`` and Java disagree about the following line;
- a malformed ``\\uXXXX`` escape, which Java refuses too, and an escape of half a
  surrogate pair, which Java keeps but no client can send (it is not a character).
"""

from __future__ import annotations

import codecs
import re

import javaproperties

from kvldp.common.errors import KvldpError

#: Java's line terminators
_LINE_END = re.compile(r"\r\n|\r|\n")
_LONE_CONTINUATION = re.compile(r"[ \t\f]*\\")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9._-]+")
#: what is left of a surrogate once javaproperties has joined the pairs: half of one
_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidPropertiesFile(KvldpError):
    """A properties file kvldp does not read (the message names the file and the line)."""


def parse_properties(data: bytes, source: str) -> dict[str, str]:
    """The entries of a properties file's bytes as ``java.util.Properties.load`` reads
    them (:class:`InvalidPropertiesFile` for the refusals above; ``source`` names the
    file in messages)."""
    if data.startswith(codecs.BOM_UTF8):
        raise InvalidPropertiesFile(
            f"{source}: starts with a UTF-8 byte order mark, which Java reads as part of the first "
            "line: save the file without it"
        )
    text = data.decode("iso-8859-1")
    for number, line in enumerate(_LINE_END.split(text), 1):
        if _LONE_CONTINUATION.fullmatch(line):
            raise InvalidPropertiesFile(
                f"{source}: line {number}: a line holding nothing but a continuation backslash: delete it"
            )
    entries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    number = 1
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                key, where = element.key, f"{source}: line {number}:"
                if not element.source.isascii():
                    named = f" {_shown(key)}:" if key.isascii() else ""
                    raise InvalidPropertiesFile(
                        f"{where}{named} characters outside ASCII: write them as \\uXXXX escapes "
                        "(Kafka's Java tools read this file as ISO-8859-1, other readers as UTF-8)"
                    )
                if _SURROGATE.search(key + element.value):
                    raise InvalidPropertiesFile(
                        f"{where} {_shown(key)}: a \\uXXXX escape of half a surrogate pair, which is "
                        "no character"
                    )
                if key in first_line:
                    raise InvalidPropertiesFile(
                        f"{where} {_shown(key)} is set twice (first on line {first_line[key]})"
                    )
                entries[key], first_line[key] = element.value, number
            number += len(_LINE_END.findall(element.source))
    except javaproperties.InvalidUEscapeError:
        raise InvalidPropertiesFile(
            f"{source}: line {number}: \\u must be followed by four hexadecimal digits"
        ) from None
    return entries


def _shown(key: str) -> str:
    """A key as messages show it: as it is when plain, else quoted (blanks, escapes)."""
    return key if _PLAIN_KEY.fullmatch(key) else repr(key)
