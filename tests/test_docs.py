"""The user documentation holds together: every relative link resolves, and no page grows into a log.

Checks README.md, CHANGELOG.md and every markdown file under docs/: each relative link (inline
``[text](target)`` or reference-style ``[ref]: target``) names a file or folder that exists, and where it
names an anchor (``page.md#section``), a heading of that page slugs to it the way GitHub renders it.
External links (``http:``, ``https:``, ``mailto:``) are not fetched. Pages under docs/ stay at most
``MAX_LINES`` lines: a topic page holds the current figures; history belongs in the decision records
(docs/decisions/) and CHANGELOG.md.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"`+[^`]*`+")


def doc_files() -> list[Path]:
    """README.md, CHANGELOG.md (where present) and every markdown page under docs/."""
    files = [p for p in (ROOT / "README.md", ROOT / "CHANGELOG.md") if p.exists()]
    return files + sorted((ROOT / "docs").rglob("*.md"))


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (links and headings inside them are not markdown)."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def links(text: str) -> list[str]:
    """Every link target of a markdown text, code spans and fenced blocks left out."""
    out: list[str] = []
    for line in _prose_lines(text):
        bare = _CODE_SPAN.sub("", line)
        out += _INLINE_LINK.findall(bare) + _IMAGE_LINK.findall(bare)
        ref = _REF_DEF.match(bare)
        if ref:
            out.append(ref.group(1))
    return out


def slug(heading: str) -> str:
    """A heading's anchor as GitHub renders it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
        elif ch == " ":
            kept.append("-")
    return "".join(kept)


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose_lines(text):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of one page that name no existing file, folder or heading."""
    problems: list[str] = []
    text = page.read_text(encoding="utf-8")
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto: ... are not checked here
        path_part, _, anchor = target.partition("#")
        dest = page if not path_part else (page.parent / path_part).resolve()
        if not dest.exists():
            problems.append(f"{target}: no such file")
            continue
        if (
            anchor
            and dest.is_file()
            and dest.suffix == ".md"
            and anchor not in anchors(dest.read_text(encoding="utf-8"))
        ):
            problems.append(f"{target}: no heading with that anchor in {dest.name}")
    return problems


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize(
    "page", sorted((ROOT / "docs").rglob("*.md")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_no_docs_page_is_longer_than_the_limit(page: Path) -> None:
    n = len(page.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{page.relative_to(ROOT)} has {n} lines (at most {MAX_LINES})"


def test_the_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    # The checks themselves can fail: a page that links a missing file and a missing heading.
    (tmp_path / "other.md").write_text("# Title\n\n## Two words `code`\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#two-words-code) [self](#local) [gone](missing.md) [bad](other.md#nope)\n"
        "`[not a link](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n\n## Local\n"
        "[web](https://example.com/x.md)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nope: no heading with that anchor in other.md",
    ]


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        # punctuation dropped, spaces to hyphens, case folded, code ticks removed
        ("Settings (`PERFSCHED_*`)", "settings-perfsched_"),
        (
            "Round time with queues (`bench/queue_round_speed.py`)",
            "round-time-with-queues-benchqueue_round_speedpy",
        ),
        ("Status against the issue's targets", "status-against-the-issues-targets"),
        ("Speed: incremental rounds", "speed-incremental-rounds"),
    ],
)
def test_slug_follows_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_repeated_headings_get_numbered_anchors() -> None:
    assert anchors("# A\n## Figures\n## Figures\n") == {"a", "figures", "figures-1"}
