"""The fenced code blocks of the repository's documentation, as the doc-block tests run
them.

A block is read with a Markdown parser (markdown-it-py), so what counts as a block is
what a reader sees as one. An HTML comment right before a block (invisible on the
rendered page) says how the tests treat it, in one of two forms:

- ``<!-- doc-test: not run: REASON -->``: the block cannot run here (a Docker engine, a
  managed cluster, a long computation); its ``kvldp`` command lines are still parsed;
- ``<!-- doc-test: save as FILE -->``: the block is a file the text tells the reader to
  save; the shell blocks after it find it under that name.

The ``kvldp`` commands of a shell line are found as the shell would start them, with the
services among them: those started in the background (``&``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

from support.package import REPO

#: the languages a block may be tagged with, by what the tests do with it
SHELL = frozenset({"sh", "bash"})
RUN = SHELL | {"python"}
CHECKED = frozenset({"toml", "properties"})
#: output, listings, diagrams: read, never run
TEXT = frozenset({"text"})
LANGUAGES = RUN | CHECKED | TEXT

DIRECTIVE = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->", re.S)
NOT_RUN = re.compile(r"not run:\s*(.*)", re.S)
SAVE_AS = re.compile(r"save as\s+(\S+)")
#: a variable assignment before a command
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language tag, its text and its directive."""

    doc: str
    line: int
    language: str
    text: str
    directive: str | None

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def exemption(self) -> str | None:
        """The reason written next to a block that is not run, or None; '' when the
        comment gives none."""
        if self.directive is None:
            return None
        match = NOT_RUN.fullmatch(self.directive)
        return match.group(1).strip() if match else None

    @property
    def saved_as(self) -> str | None:
        match = SAVE_AS.fullmatch(self.directive or "")
        return match.group(1) if match else None


def documents() -> list[str]:
    """The documentation whose blocks the tests run: the README, the deployment guide and
    everything under docs/, as paths relative to the repository."""
    docs = sorted(str(path.relative_to(REPO)) for path in (REPO / "docs").rglob("*.md"))
    return ["README.md", "deploy/README.md", *docs]


@cache
def parse(doc: str) -> list[Token]:
    """The Markdown tokens of ``doc`` (CommonMark with tables, as GitHub renders it)."""
    return MarkdownIt("commonmark").enable("table").parse((REPO / doc).read_text())


@cache
def blocks(doc: str) -> tuple[Block, ...]:
    """The fenced blocks of ``doc``, in order, each with the directive right before it."""
    tokens = parse(doc)
    found = []
    for index, token in enumerate(tokens):
        if token.type != "fence":
            continue
        before = tokens[index - 1] if index else None
        directive = (
            DIRECTIVE.fullmatch(before.content.strip()) if before and before.type == "html_block" else None
        )
        assert token.map is not None
        found.append(
            Block(
                doc=doc,
                line=token.map[0] + 1,
                language=token.info.strip().split(" ")[0],
                text=token.content,
                directive=directive.group(1) if directive else None,
            )
        )
    return tuple(found)


def first_block(doc: str, language: str) -> str:
    """The text of ``doc``'s first block tagged ``language``."""
    return next(block.text for block in blocks(doc) if block.language == language)


def shell_lines(script: str) -> list[str]:
    """The lines of a shell block as the shell reads them (continuations joined)."""
    joined = re.sub(r"\\\n", " ", script)
    return [line for line in joined.splitlines() if line.strip()]


def kvldp_commands(line: str) -> list[list[str]]:
    """The argument lists of the ``kvldp`` commands of one shell line: ``kvldp`` in
    command position (first, after a separator, ``$(`` or variable assignments), up to
    the next separator, redirection or comment."""
    return [argv for argv, _ in ended_commands(line)]


def services(line: str) -> list[list[str]]:
    """The argument lists of the ``kvldp`` commands one shell line starts in the
    background (``&``, after any redirections): the services it leaves running."""
    return [argv for argv, end in ended_commands(line) if end == "&"]


def ended_commands(line: str) -> list[tuple[list[str], str]]:
    """The ``kvldp`` commands of one shell line (:func:`kvldp_commands`), each with the
    separator that ends it (``;``, ``&``, ``&&``, ``|``, ``)``...; "" at the end of the
    line)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    found: list[tuple[list[str], str]] = []
    current: list[str] | None = None
    arguments = False  # the words are the current command's arguments (no redirection yet)
    command_position = True
    for word in lexer:
        if set(word) & set("<>"):  # a redirection: the command goes on, its arguments end
            arguments = False
        elif set(word) <= set(";&|()"):
            if current is not None:
                found.append((current, word))
            current, command_position = None, True
        elif current is not None:
            if arguments:
                current.append(word)
        elif command_position and word == "kvldp":
            current, arguments = [], True
        elif not (command_position and ASSIGNMENT.match(word)):
            command_position = False
    if current is not None:
        found.append((current, ""))
    return found


def prose_commands(doc: str) -> list[tuple[int, str]]:
    """The ``kvldp ...`` commands written as inline code in the text (tables included),
    each with the line its paragraph starts on."""
    found = []
    for token in parse(doc):
        for child in token.children or ():
            if token.type == "inline" and child.type == "code_inline" and child.content.startswith("kvldp "):
                assert token.map is not None
                found.append((token.map[0] + 1, child.content))
    return found
