"""One term, one Chinese name: the glossary's half of the translation sync check.

Each glossary entry (tools/i18n/glossary.py) gives a term's Chinese name. Wherever
the English names the term, the Chinese must use that name (or an alias the glossary
lists, such as 归约 for 归约算子), so a reader never meets 常量折叠 on one page and
常数折叠 on the next:

- a link to the glossary (`[constant folding](glossary.md#constant-folding)`) must
  stay a link to the same entry, and its text must hold the entry's Chinese name;
- a plain mention of a term whose English means only that term ("constant
  folding", "memory bandwidth") must be rendered with the name; English words the
  book also uses in their everyday sense ("pass", "kernel", "node", ...) are checked
  only where they link to the glossary;
- the glossary's own translation keeps each entry's name: the heading and the
  bold name that opens the entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from i18n.glossary import CJK, Term, terms

# English words that also have an everyday (or a Jupyter) meaning in the book: a
# mention counts only as a link. "kernel" is also the notebook's kernel, "pass",
# "register" and "guard" are verbs too, a "wrapper" any function around another.
# "operator" is also Python's `+`, and PyTorch's autograd is often left as a name.
EVERYDAY = {"pass", "kernel", "register", "guard", "wrapper", "operator", "autograd"}
_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")
_CODE = re.compile(r"`[^`]*`")
_BOLD_START = re.compile(r"\*\*(.+?)\*\*")


def _targets(text: str, glossary_page: bool) -> list[tuple[str, str]]:
    """(link text, glossary slug) for each link to a glossary entry in `text`."""
    found = []
    for label, url in _LINK.findall(text):
        page, _, slug = url.partition("#")
        if slug and (page.endswith("glossary.md") or (glossary_page and not page)):
            found.append((label, slug))
    return found


def _mentions(term: Term, english: str) -> bool:
    """True when `english` (code spans and links removed) names `term` in words."""
    words = "[- ]".join(re.escape(w) for w in re.split(r"[- ]", term.english.lower()))
    # not "Node" in "Node.js", not "pass" in "pass-through"
    pattern = rf"\b{words}(?:s|es)?\b(?![.\-]\w)"
    return re.search(pattern, english.lower()) is not None


def _plain(text: str) -> str:
    """`text` without code spans and without the links' targets."""
    text = _CODE.sub(" ", text)
    return _LINK.sub(lambda m: m.group(1), text)


def _uses(term: Term, chinese: str) -> bool:
    """True when `chinese` renders `term` the glossary's way. An acronym or a name
    with capitals (DAG, MLAS, CUDA graphs) may also stay as it is."""
    lower = chinese.lower()
    if any(c.isupper() for c in term.english[1:]) and term.english.lower() in lower:
        return True
    return any(r.lower() in lower for r in term.renderings)


def _own_chinese(label: str) -> tuple[str, ...]:
    """The Chinese an English link text carries in brackets: `kernel (核函数)` gives
    ("核函数",), `reduction (归约算子; the lecture notes write 规约)` ("归约算子",)."""
    inside = " ".join(re.findall(r"[(（]([^()（）]*)[)）]", label))
    return tuple(p.strip() for p in re.split(r"[,;，；]", inside)
                 if p.strip() and CJK.match(p.strip()))


def _entry(page: str, msgid: str, msgstr: str, by_slug: dict[str, Term],
           glossary_page: bool) -> Iterator[str]:
    """What is wrong with the terms of one translated entry."""
    zh_slugs = {slug for _, slug in _targets(msgstr, glossary_page)}
    for label, slug in _targets(msgid, glossary_page):
        term = by_slug.get(slug)
        if term is None:
            continue  # a heading anchor of the glossary that is not an entry
        if slug not in zh_slugs:
            yield (f"the link to the glossary's '{term.english}' (#{slug}) is missing "
                   "from the translation: keep the link")
        own = _own_chinese(label)
        if own and not any(w in msgstr for w in own):
            yield (f"the English names '{term.english}' {' / '.join(own)}: use that")
        elif not own and _mentions(term, label) and not _uses(term, msgstr):
            yield (f"'{term.english}' (linked) is the glossary's "
                   f"{' / '.join(term.names)}: use that name")
    plain = _plain(msgid)
    for term in by_slug.values():
        if term.english.lower() in EVERYDAY or not _mentions(term, plain):
            continue
        if not _uses(term, msgstr):
            yield (f"'{term.english}' is the glossary's {' / '.join(term.names)}: "
                   "use that name (or add an alias to its glossary entry)")


def _glossary_names(translated: dict[str, str], all_terms: list[Term]) -> Iterator:
    """The glossary page's own translation keeps every entry's Chinese name: in its
    heading, and in the bold name that opens its body (`**计算图.** A ...`)."""
    for term in all_terms:
        msgstr = translated.get(term.english)
        if msgstr is not None and not _uses(term, msgstr):
            yield (term.english, f"the heading must hold the entry's name "
                   f"{' / '.join(term.names)}")
    for msgid, msgstr in translated.items():
        bold, zh_bold = _BOLD_START.match(msgid), _BOLD_START.match(msgstr)
        if not bold or not zh_bold or not CJK.search(zh_bold.group(1)):
            continue  # a body may open with the English name instead
        for term in all_terms:
            name = term.names[0]
            if name in bold.group(1) and not _uses(term, zh_bold.group(1)):
                yield (msgid, f"the entry opens with **{name}**: keep that name")


def check(glossary: Path, done: dict[str, dict[str, str]]) -> Iterator[tuple]:
    """(page, msgid, what is wrong) for every term rendered another way."""
    all_terms = terms(glossary)
    by_slug = {t.slug: t for t in all_terms}
    for page, entries in done.items():
        glossary_page = page == glossary.stem
        for msgid, msgstr in entries.items():
            for detail in _entry(page, msgid, msgstr, by_slug, glossary_page):
                yield page, msgid, detail
    for msgid, detail in _glossary_names(done.get(glossary.stem, {}), all_terms):
        yield glossary.stem, msgid, detail
