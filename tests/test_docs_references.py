"""Nothing in the repository cites material outside it, and every citation of
docs/mechanisms.md names one of its sections.

A clone of the repository is all a reader has, so a citation must point into it: the
papers by author and year, kvldp's own math by a section of docs/mechanisms.md. Every
tracked text file is scanned for the labels of material that is not in the repository
(numbered sections of an internal specification, its file, private labels of source
documents) and for citations of docs/mechanisms.md, which take one form,
``docs/mechanisms.md, *Heading*`` (inside that page: ``see *Heading*``), and must name
a heading that exists. Markdown links to ``docs/mechanisms.md#anchor`` must name a
heading's anchor. The headings are read with a Markdown parser (markdown-it-py, with
the anchors plugin for GitHub's heading ids). The checkers are tried on bad samples
first, so that a checker that finds nothing cannot pass for a clean repository. This
file itself is left out of the scan: it holds the patterns and the bad samples.
"""

from __future__ import annotations

import re
from functools import cache

import pytest
from markdown_it import MarkdownIt
from mdit_py_plugins.anchors import anchors_plugin

from kvldp.common.mechanisms import names

from support import run
from support.package import REPO

DOC = "docs/mechanisms.md"
#: this file, whose patterns and bad samples would match themselves
SELF = "tests/test_docs_references.py"

#: what cites outside the repository, by what it is
OUTSIDE = {
    "a numbered section of a specification": re.compile(r"§\s*\d|\bspec\s*§", re.IGNORECASE),
    "the internal specification by name": re.compile(
        r"(?-i:MECHANISMS\.md)|\b(?:the|internal) spec\b|\bspec[']s\b", re.IGNORECASE
    ),
    "a folder outside the repository": re.compile(r"\bshared/"),
    "a private label of a source document": re.compile(r"\b[D][0-4]\b|\b[X][1-7]\b"),
    "a seed document": re.compile(r"\bseed (?:papers?|documents?|0\d\d)\b", re.IGNORECASE),
    "a design document outside the repository": re.compile(r"\b(?:ARCHITECTURE|PRACTICES|DEVELOPERS)\b"),
}
#: a citation of the reference and its headings: "docs/mechanisms.md, *A*" (", *B*", "and *C*")
HEADINGS = r"(\*[^*]+\*(?:\s*(?:,|and)\s*\*[^*]+\*)*)"
CITATION = re.compile(r"docs/mechanisms\.md`?,\s*" + HEADINGS)
#: inside the reference itself: "see *A*"
SEE = re.compile(r"\bsee\s+" + HEADINGS, re.IGNORECASE)
#: other ways of naming a section, refused so that one form stays greppable
OTHER_FORMS = re.compile(r"docs/mechanisms\.md`?\s*(?:\(\s*\*|,?\s*\")")
LINK = re.compile(r"mechanisms\.md#([\w-]+)")
#: a line break plus the next line's indentation and comment marker
BREAK = re.compile(r"[ \t]*\n[ \t]*(?:#[ \t]+)?")


def tracked_text_files() -> dict[str, str]:
    """Every file git tracks that is text (UTF-8 without NUL bytes), by its path."""
    listed = run(["git", "ls-files", "-z"], cwd=REPO, check=True).stdout
    files: dict[str, str] = {}
    for path in filter(None, listed.split("\0")):
        data = (REPO / path).read_bytes()
        if b"\0" in data:
            continue
        try:
            files[path] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return files


@cache
def files() -> dict[str, str]:
    """The tracked text files the scans read: all but this one."""
    return {path: text for path, text in tracked_text_files().items() if path != SELF}


def headings(markdown: str) -> list[tuple[str, str]]:
    """(text, anchor id) of every heading, as a CommonMark parser reads them."""
    tokens = MarkdownIt().use(anchors_plugin, max_level=6).parse(markdown)
    return [
        (tokens[i + 1].content, str(token.attrs["id"]))
        for i, token in enumerate(tokens)
        if token.type == "heading_open"
    ]


@cache
def doc_headings() -> list[tuple[str, str]]:
    return headings((REPO / DOC).read_text())


def outside_citations(text: str) -> list[str]:
    """What in ``text`` cites outside the repository, as "kind: matched text" lines."""
    return [f"{kind}: {m.group(0)!r}" for kind, pattern in OUTSIDE.items() for m in pattern.finditer(text)]


def cited_headings(text: str, inside_reference: bool) -> list[str]:
    """Every heading ``text`` cites in docs/mechanisms.md, line breaks inside a citation
    (and a comment marker on the next line) read as one space."""
    flat = BREAK.sub(" ", text)
    spans = [m.group(1) for m in CITATION.finditer(flat)]
    if inside_reference:
        spans += [m.group(1) for m in SEE.finditer(flat)]
    return [name.strip() for span in spans for name in re.findall(r"\*([^*]+)\*", span)]


def citation_problems(path: str, text: str, known: set[str], anchors: set[str]) -> list[str]:
    """Citations of docs/mechanisms.md in ``text`` that name no heading or take another form."""
    flat = BREAK.sub(" ", text)
    problems = [
        f"{path}: no heading *{name}*" for name in cited_headings(text, path == DOC) if name not in known
    ]
    problems += [
        f"{path}: write docs/mechanisms.md, *Heading*, not {m.group(0)!r}" for m in OTHER_FORMS.finditer(flat)
    ]
    problems += [f"{path}: no heading with anchor #{a}" for a in LINK.findall(text) if a not in anchors]
    return problems


# --------------------------------------------------------------------------- the checkers fail
@pytest.mark.parametrize(
    ("bad", "good"),
    [
        (
            "the formulas follow " + "spec " + "§9.4",
            "the formulas follow docs/mechanisms.md, *PCKV variances*",
        ),
        ("Var as in §" + "11.7", "Var as in Sun et al. 2019, Eq. 12"),
        ("see ../" + "sha" + "red/" + "spec/MECHANISMS" + ".md", "see docs/mechanisms.md"),
        ("as " + "D" + "0 Alg.2 prints it", "as Sun et al. 2019, Alg. 2, prints it"),
        ("from the authors' code [" + "X" + "1]", "from the PCKV authors' reference code"),
        ("Sun et al. (" + "seed " + "000)", "Sun et al. 2019"),
        ("the " + "spec" + "'s generator", "kvldp's generator"),
        ("exactly once (" + "ARCHI" + "TECTURE, " + "PRAC" + "TICES)", "exactly once (docs/architecture.md)"),
    ],
)
def test_the_outside_checker_finds_each_kind(bad: str, good: str) -> None:
    assert outside_citations(bad), bad
    assert not outside_citations(good), good


def test_the_citation_checker_finds_unknown_headings_other_forms_and_bad_anchors() -> None:
    known, anchors = {"Count EM", "PrivKV"}, {"count-em"}
    good = "weights (docs/mechanisms.md, *Count EM* and *PrivKV*); [EM](docs/mechanisms.md#count-em)"
    assert citation_problems("x.py", good, known, anchors) == []
    wrapped = "see docs/mechanisms.md,\n    # *Count\n    # EM*"
    assert cited_headings(wrapped, False) == ["Count EM"]
    bad = (
        "(docs/mechanisms.md, *Count EM*, *No such section*) "
        '`docs/mechanisms.md` (*PrivKV*) docs/mechanisms.md, "PrivKV" [x](docs/mechanisms.md#nowhere)'
    )
    problems = citation_problems("x.py", bad, known, anchors)
    assert len(problems) == 4, problems
    assert citation_problems(DOC, "as before (see *Nowhere*)", known, anchors) == [
        f"{DOC}: no heading *Nowhere*"
    ]


# --------------------------------------------------------------------------- the repository
def test_the_scan_sees_the_repository() -> None:
    scanned = files()
    assert {DOC, "README.md", "src/kvldp/common/mechanisms/pckv.py", "tests/test_em.py"} <= set(scanned)
    assert SELF in tracked_text_files() and SELF not in scanned
    assert not any(path.endswith(".png") for path in scanned)


def test_no_tracked_file_cites_outside_the_repository() -> None:
    found = [f"{path}: {hit}" for path, text in files().items() for hit in outside_citations(text)]
    assert not found, "\n".join(found)


def test_headings_of_the_reference_are_unique() -> None:
    texts = [text for text, _ in doc_headings()]
    ids = [anchor for _, anchor in doc_headings()]
    assert len(texts) > 60
    assert len(set(texts)) == len(texts), sorted(t for t in texts if texts.count(t) > 1)
    assert len(set(ids)) == len(ids), sorted(a for a in ids if ids.count(a) > 1)


def test_every_citation_of_the_reference_names_a_heading() -> None:
    known = {text for text, _ in doc_headings()}
    anchors = {anchor for _, anchor in doc_headings()}
    problems = [p for path, text in files().items() for p in citation_problems(path, text, known, anchors)]
    assert not problems, "\n".join(problems)
    cited = {name for path, text in files().items() for name in cited_headings(text, path == DOC)}
    assert len(cited) > 40  # the code cites the reference throughout


def test_every_registered_mechanism_is_in_the_reference() -> None:
    text = (REPO / DOC).read_text()
    missing = [name for name in names() if f"`{name}`" not in text]
    assert not missing, missing
