"""The Chinese book is complete and never stale (issue 25), and the check can fail.

tools/i18n/sync.py regenerates the catalog templates from the English as it is now
(Sphinx's gettext builder, notebooks not executed) and compares them with
book/locales/zh_CN: every English paragraph translated, nothing fuzzy (changed
English, translation not reviewed), no translation of English that is gone, every
glossary term rendered with its one Chinese name, every translated heading still a
heading. The fixture tests copy a small page and its catalog into a temporary book,
break one thing each, and check that the report names the page and the paragraph.
No notebook is executed; the whole file takes a few seconds of CPU.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(ROOT / "tools"))

from i18n import glossary, sync, sync_terms  # noqa: E402
from i18n.sync_blocks import renders_as  # noqa: E402

PAGE = "setup"  # a small page: its copy is the fixture
FIXTURE_INDEX = "# Fixture\n\n```{toctree}\n:hidden:\n\nsetup\n```\n"


def test_the_chinese_book_is_complete_and_current():
    """Every paragraph of every page is translated and reviewed, every term is
    rendered one way, every translated heading is a heading."""
    problems = sync.check()
    report = "\n".join(str(p) for p in problems[:80])
    more = f"\n... and {len(problems) - 80} more" if len(problems) > 80 else ""
    assert not problems, (
        f"{len(problems)} translation problem(s) (python tools/i18n/sync.py lists "
        f"them all):\n{report}{more}")


def test_the_lab_tests_catalog_is_complete_and_current():
    """The labs' tests' own words (labs/locales/zh_CN/LC_MESSAGES/lab_tests.po, what
    a Chinese hand-in's feedback shows): every case's description and assertion
    message translated and reviewed, with its fields, and compiled
    (tools/grading/lab_messages.py; make lab-tests-catalog)."""
    from grading import lab_messages
    problems = lab_messages.problems()
    assert not problems, "\n".join(problems[:40])


# ------------------------------------------------------------------ the fixture book


def _catalog(path: Path):
    with path.open("rb") as f:
        return read_po(f)


def _write(catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        write_po(f, catalog, width=0, omit_header=False)


@pytest.fixture(scope="module")
def small_book(tmp_path_factory) -> Path:
    """A copy of setup.md and its catalog in a book of its own (English unchanged)."""
    root = tmp_path_factory.mktemp("sync") / "book"
    root.mkdir()
    shutil.copy(BOOK / f"{PAGE}.md", root / f"{PAGE}.md")
    (root / "index.md").write_text(FIXTURE_INDEX, encoding="utf-8")
    messages = root / "locales" / "zh_CN" / "LC_MESSAGES"
    messages.mkdir(parents=True)
    shutil.copy(sync.catalog_path(BOOK / "locales", PAGE), messages / f"{PAGE}.po")
    return root


def _problems(book: Path) -> list[sync.Problem]:
    found = sync.english(book, confdir=BOOK)
    problems = []
    for page, msgids in found.messages.items():
        problems += sync.check_page(page, msgids, found.titles.get(page, set()),
                                    book / "locales")
    return [p for p in problems if p.page == PAGE]


@pytest.fixture(scope="module")
def baseline(small_book) -> list[sync.Problem]:
    """What the check says about the unchanged copy (the page may still be in
    translation: the tests below look only at what their change adds)."""
    return _problems(small_book)


def _in_source(msgid: str) -> re.Pattern:
    """Where a paragraph's msgid (one line) sits in the Markdown (wrapped lines)."""
    return re.compile(r"\s+".join(re.escape(w) for w in msgid.split()))


def _translated_paragraph(book: Path) -> tuple[str, str]:
    """An English paragraph of the page with a reviewed translation, and that text."""
    source = (book / f"{PAGE}.md").read_text(encoding="utf-8")
    for entry in _catalog(sync.catalog_path(book / "locales", PAGE)):
        if entry.id and entry.string and not entry.fuzzy and len(entry.id) > 80:
            if _in_source(entry.id).search(source):
                return entry.id, entry.string
    pytest.fail(f"{PAGE}.po has no translated paragraph found in {PAGE}.md: the "
                "fixture needs one")


def test_a_changed_english_paragraph_fails_the_check(small_book, baseline, tmp_path):
    """One English paragraph edited: the check names the page and the new paragraph
    (no translation) and the old one (its translation is stale)."""
    book = tmp_path / "book"
    shutil.copytree(small_book, book)
    old, _ = _translated_paragraph(book)
    new = old.replace(" ", " really ", 1)
    page = book / f"{PAGE}.md"
    source = page.read_text(encoding="utf-8")
    edited = _in_source(old).sub(lambda m: m.group(0).replace(" ", " really ", 1),
                                 source, count=1)
    assert edited != source
    page.write_text(edited, encoding="utf-8")
    added = [p for p in _problems(book) if p not in baseline]
    assert sync.Problem(PAGE, "untranslated", new, f"translate it in {PAGE}.po") in added
    assert any(p.kind == "stale" and p.english == old for p in added), added
    assert len(added) == 2, added
    assert f"{PAGE}.po [untranslated] " in str(added[0]) + str(added[1])


def test_a_fuzzy_entry_fails_the_check(small_book, baseline, tmp_path):
    """An entry `sphinx-intl update` marked fuzzy counts as not reviewed."""
    book = tmp_path / "book"
    shutil.copytree(small_book, book)
    old, _ = _translated_paragraph(book)
    path = sync.catalog_path(book / "locales", PAGE)
    catalog = _catalog(path)
    catalog[old].flags.add("fuzzy")
    _write(catalog, path)
    added = [p for p in _problems(book) if p not in baseline]
    assert [(p.kind, p.english) for p in added] == [("fuzzy", old)], added


def test_a_heading_that_parses_as_a_list_fails_the_check(small_book, tmp_path):
    """A heading translated "1. 安装" is a numbered list to MyST: Sphinx would
    drop it, the check names it and says to escape the full stop."""
    book = tmp_path / "book"
    shutil.copytree(small_book, book)
    found = sync.english(book, confdir=BOOK)
    heading = sorted(found.titles[PAGE])[0]
    path = sync.catalog_path(book / "locales", PAGE)
    catalog = _catalog(path)
    catalog[heading].string = "1. 安装"
    catalog[heading].flags.discard("fuzzy")
    _write(catalog, path)
    problems = sync.check_page(PAGE, found.messages[PAGE], found.titles[PAGE],
                               book / "locales")
    blocks = [p for p in problems if p.kind == "block"]
    assert [p.english for p in blocks] == [heading], blocks
    assert "escape the full stop" in blocks[0].detail


@pytest.mark.parametrize(("msgstr", "kind", "ok"), [
    ("3\\. 常量折叠", "heading", True),  # the escaped full stop keeps a heading
    ("3. 常量折叠", "heading", False),
    ("常量折叠", "heading", True),
    ("- 注意：这里", "paragraph", False),
    ("第一段。\n\n第二段。", "paragraph", False),
    ("一段话，带 `code` 和 [链接](glossary.md#pass)。", "paragraph", True),
])
def test_block_kinds(msgstr, kind, ok):
    assert (renders_as(msgstr, kind) == "") is ok


# ------------------------------------------------------------------ glossary terms

GLOSSARY = BOOK / "glossary.md"


def _term_problems(page: str, msgid: str, msgstr: str) -> list[str]:
    return [d for _, _, d in sync_terms.check(GLOSSARY, {page: {msgid: msgstr}})]


def test_glossary_gives_each_term_its_chinese_names():
    by_slug = {t.slug: t for t in glossary.terms(GLOSSARY)}
    assert by_slug["constant-folding"].names == ("常量折叠",)
    assert by_slug["reduction-operator"].renderings == ("归约算子", "归约")
    assert by_slug["forward-and-backward-pass"].names == ("前向传播", "反向传播")
    assert by_slug["intermediate-representation"].aliases == ("IR",)
    # every slug the chapters link to is an entry (tests/test_site.py lists them)
    assert {"computation-graph", "operator-fusion", "kernel-launch"} <= set(by_slug)


def test_a_term_translated_another_way_fails_the_check():
    english = "Constant folding evaluates what does not depend on the input."
    assert _term_problems(PAGE, english, "常量折叠在编译时求出不依赖输入的部分。") == []
    found = _term_problems(PAGE, english, "常数折叠在编译时求出不依赖输入的部分。")
    assert len(found) == 1 and "常量折叠" in found[0], found


def test_a_glossary_link_must_stay_and_use_the_name():
    english = "A [pass (优化遍)](glossary.md#pass) rewrites the graph."
    good = "[优化遍（pass）](glossary.md#pass)改写计算图。"
    assert _term_problems(PAGE, english, good) == []
    lost = _term_problems(PAGE, english, "优化遍改写计算图。")
    assert any("keep the link" in d for d in lost), lost
    renamed = _term_problems(PAGE, english, "[遍](glossary.md#pass)改写计算图。")
    assert any("优化遍" in d for d in renamed), renamed


def test_everyday_words_count_only_as_links():
    """"pass" the verb is not the glossary's pass; "Node.js" is not a node."""
    assert _term_problems(PAGE, "The tests pass on Node.js 18.",
                          "测试在 Node.js 18 上通过。") == []


def test_the_glossary_keeps_each_entry_name():
    """The glossary's own heading must hold the entry's Chinese name."""
    assert _term_problems("glossary", "Constant folding", "常量折叠（constant folding）") == []
    found = _term_problems("glossary", "Constant folding", "常数折叠")
    assert any("heading" in d for d in found), found


def test_search_dictionary_keeps_glossary_names_whole(tmp_path):
    """Chinese search: jieba gets every glossary name as one word."""
    words = glossary.jieba_dictionary(GLOSSARY, tmp_path / "words.txt")
    lines = words.read_text(encoding="utf-8").splitlines()
    assert "常量折叠 100000 n" in lines
    assert all(re.fullmatch(r"\S+ \d+ n", line) for line in lines), lines[:5]
