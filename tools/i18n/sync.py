"""Is the Chinese book in step with the English? The check behind the sync test.

The English pages are the source; book/locales/zh_CN/LC_MESSAGES/<page>.po holds one
entry per paragraph (heading, list item, table cell, caption), keyed by its English
text (the msgid). This module regenerates the catalog templates from the English as
it is now (Sphinx's gettext builder, notebooks not executed, no source locations, no
uuids: what sphinx-intl read) and reports, naming the page and the paragraph:

- untranslated: an English paragraph has no Chinese entry (new or changed English);
- fuzzy: `sphinx-intl update` matched a changed paragraph to an old translation,
  which nobody has reviewed since (Sphinx does not show fuzzy entries);
- stale: a translated entry whose English is no longer on the page;
- glossary: a term named in the English is not rendered with the glossary's
  Chinese name, or a link to the glossary lost its target;
- heading/block: a translation that MyST parses as another kind of block than its
  English ("3. 常量折叠" is a list, not a heading), which Sphinx drops in silence.

`python tools/i18n/sync.py` prints the report; tests/test_translation_sync.py runs it.
"""

from __future__ import annotations

import io
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from babel.messages.pofile import read_po

if __package__ in (None, ""):  # run as a script: python tools/i18n/sync.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from i18n import sync_terms  # noqa: E402
from i18n.sync_blocks import renders_as  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
LANGUAGE = "zh_CN"


@dataclass(frozen=True)
class Problem:
    """One thing that keeps a page's translation from being complete and current."""

    page: str  # the catalog's name: the page's file name without its suffix
    kind: str  # untranslated | fuzzy | stale | glossary | block
    english: str  # the paragraph's English (its msgid)
    detail: str = ""  # what is wrong and what to do

    def __str__(self) -> str:
        text = " ".join(self.english.split())
        text = text if len(text) <= 100 else text[:97] + "..."
        tail = f": {self.detail}" if self.detail else ""
        return f"{self.page}.po [{self.kind}] {text!r}{tail}"


@dataclass
class English:
    """What the gettext builder found on each page: msgids in order, and which are
    headings (a heading's translation must parse as a heading)."""

    messages: dict[str, list[str]] = field(default_factory=dict)
    titles: dict[str, set[str]] = field(default_factory=dict)


def english(book: Path = BOOK, confdir: Path | None = None) -> English:
    """Run Sphinx's gettext builder on `book` (in a temporary folder) and collect
    every page's messages; `confdir` defaults to the book's own conf.py."""
    from sphinx.application import Sphinx

    found = English()
    with tempfile.TemporaryDirectory(prefix="graphopt-gettext-") as tmp:
        out = Path(tmp) / "gettext"
        app = Sphinx(
            str(book), str(confdir or book), str(out), str(Path(tmp) / "doctrees"),
            "gettext", status=None, warning=io.StringIO(), freshenv=True,
            confoverrides={"nb_execution_mode": "off", "gettext_location": False,
                           "gettext_uuid": False, "language": "en"},
        )
        app.connect("doctree-resolved", _titles_of(found))
        app.build()
        for pot in sorted(out.rglob("*.pot")):
            with pot.open("rb") as f:
                catalog = read_po(f)
            page = str(pot.relative_to(out).with_suffix(""))
            found.messages[page] = [m.id for m in catalog if m.id]
    return found


def _titles_of(found: English):
    """A doctree-resolved handler that records each page's heading messages."""
    from docutils import nodes
    from sphinx.util.i18n import docname_to_domain
    from sphinx.util.nodes import extract_messages

    def record(app, doctree, docname):
        domain = docname_to_domain(docname, app.config.gettext_compact)
        titles = found.titles.setdefault(domain, set())
        for node, msg in extract_messages(doctree):
            if isinstance(node, nodes.title):
                titles.add(msg)

    return record


def catalog_path(locales: Path, page: str) -> Path:
    return locales / LANGUAGE / "LC_MESSAGES" / f"{page}.po"


def check_page(page: str, msgids: list[str], titles: set[str],
               locales: Path) -> list[Problem]:
    """Untranslated, fuzzy, stale and mis-parsed entries of one page's catalog."""
    path = catalog_path(locales, page)
    if not path.is_file():
        return [Problem(page, "untranslated", "(the whole page)",
                        f"no catalog {path.relative_to(locales.parent)}: create it "
                        "with `sphinx-intl update -p <gettext dir> -l zh_CN`")]
    with path.open("rb") as f:
        catalog = read_po(f)
    problems = []
    wanted = set(msgids)
    for msgid in msgids:
        entry = catalog.get(msgid)
        if entry is None or not entry.string:
            problems.append(Problem(page, "untranslated", msgid,
                                    "translate it in " + path.name))
        elif entry.fuzzy:
            problems.append(Problem(page, "fuzzy", msgid,
                                    "its English changed: review the translation, "
                                    "then delete the '#, fuzzy' line"))
        else:
            kind = "heading" if msgid in titles else "paragraph"
            wrong = renders_as(entry.string, kind)
            if wrong:
                problems.append(Problem(page, "block", msgid, wrong))
    for entry in catalog:
        if entry.id and entry.id not in wanted and entry.string:
            problems.append(Problem(page, "stale", entry.id,
                                    "this English is no longer on the page: run "
                                    "`sphinx-intl update` (it marks a changed "
                                    "paragraph fuzzy) and review"))
    return problems


def translations(locales: Path, pages: dict[str, list[str]]) -> dict[str, dict]:
    """Every reviewed translation (not empty, not fuzzy) of English that is on the
    page now, page by page."""
    done = {}
    for page, msgids in pages.items():
        path = catalog_path(locales, page)
        if not path.is_file():
            continue
        current = set(msgids)
        with path.open("rb") as f:
            done[page] = {m.id: m.string for m in read_po(f)
                          if m.id in current and m.string and not m.fuzzy}
    return done


def check(book: Path = BOOK, locales: Path | None = None,
          confdir: Path | None = None) -> list[Problem]:
    """Every problem of the Chinese book against the English as it is now."""
    locales = locales or book / "locales"
    found = english(book, confdir)
    problems = []
    for page, msgids in found.messages.items():
        problems += check_page(page, msgids, found.titles.get(page, set()), locales)
    done = translations(locales, found.messages)
    for page, msgid, detail in sync_terms.check(book / "glossary.md", done):
        problems.append(Problem(page, "glossary", msgid, detail))
    return problems


def main() -> int:
    problems = check()
    for problem in problems:
        print(problem)
    kinds = sorted({p.kind for p in problems})
    counts = ", ".join(f"{sum(p.kind == k for p in problems)} {k}" for k in kinds)
    print(f"{len(problems)} problem(s)" + (f": {counts}" if counts else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
