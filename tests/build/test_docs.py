"""The docs, by reader: a short front page in each language, the rest in docs/, every link resolving.

The README is a front page (what the course is, the lessons, the first commands) that sends each reader to their
guide: docs/learn.md, docs/teach.md, docs/trust-model.md, docs/develop.md, docs/gpu.md. These tests hold the links
between them (files and headings), the front pages' size and the Korean guides' pairing with the English ones.
"""

from __future__ import annotations

import re
import unicodedata
import urllib.parse
from pathlib import Path

import mistune
import pytest

ROOT = Path(__file__).resolve().parents[2]
FRONT_PAGES = ["README.md", "README.ko.md"]
DOCS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
PAGES = FRONT_PAGES + DOCS + ["results/README.md", "jupyter-config/README.md", "coursetools/gpu/README.md"]
#: a front page says what the course is and how to start; everything longer belongs in a reader's guide
FRONT_PAGE_MAX_CHARS = 6000


def links(markdown: str) -> list[str]:
    """Every link and image target of a Markdown text, as mistune parses it (code spans and blocks hold none)."""
    found: list[str] = []

    def walk(tokens):
        for token in tokens:
            if token["type"] in ("link", "image"):
                found.append(token["attrs"]["url"])
            walk(token.get("children") or [])

    walk(mistune.create_markdown(renderer="ast")(markdown))
    return found


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1)).strip().lower()
            kept = "".join(
                ch for ch in text if ch in " -" or unicodedata.category(ch)[0] in "LNM" or ch == "_"
            )
            anchors.add(kept.replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", PAGES)
def test_every_link_resolves(page):
    source = ROOT / page
    broken = []
    for url in links(source.read_text()):
        if re.match(r"[a-z]+:", url) or url.startswith("//"):
            continue  # a web address: not checked offline
        path, _, anchor = urllib.parse.unquote(url).partition("#")  # mistune percent-encodes a Korean anchor
        target = (source.parent / path).resolve() if path else source
        if not target.exists() or not target.is_relative_to(ROOT):
            broken.append(f"{url}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in heading_anchors(target.read_text()):
            broken.append(f"{url}: no such heading in {target.relative_to(ROOT)}")
    assert not broken, f"{page}: {broken}"


@pytest.mark.parametrize("page", FRONT_PAGES)
def test_front_pages_are_short_and_send_each_reader_on(page):
    text = (ROOT / page).read_text()
    assert len(text) <= FRONT_PAGE_MAX_CHARS, f"{page}: {len(text)} characters"
    targets = {url.partition("#")[0] for url in links(text)}
    korean = page.endswith(".ko.md")
    guides = (
        ["docs/learn.ko.md", "docs/teach.ko.md", "docs/trust-model.ko.md", "docs/class.ko.md"]
        if korean
        else [
            "docs/learn.md",
            "docs/teach.md",
            "docs/trust-model.md",
            "docs/class.md",
        ]
    )
    assert {*guides, "docs/develop.md", "docs/gpu.md"} <= targets, targets


@pytest.mark.parametrize("page", [d for d in DOCS if d.endswith(".ko.md")])
def test_each_korean_guide_pairs_with_its_english_one(page):
    english = page.removesuffix(".ko.md") + ".md"
    assert (ROOT / english).is_file()
    korean_links = {url.partition("#")[0] for url in links((ROOT / page).read_text())}
    english_links = {url.partition("#")[0] for url in links((ROOT / english).read_text())}
    assert Path(english).name in korean_links and Path(page).name in english_links
