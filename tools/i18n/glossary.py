"""The glossary's terms: each English heading, its anchor and its Chinese names.

book/glossary.md holds one `### English term` heading per entry, and the entry's
body opens with its Chinese name in bold: `**计算图.**`, `**归约算子 (also 归约).**`,
`**前向传播 / 反向传播.**`, `**中间表示 (IR).**`. Two readers need the same parse:
the Chinese site's search (every Chinese name is one word to jieba, so `常量折叠`
is found as a whole) and the translation sync test (a term is rendered one way).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CJK = re.compile(r"[\u3400-\u9fff]")
_HEADING = re.compile(r"^### (.+?)\s*$", re.M)
_BOLD = re.compile(r"\*\*(.+?)\*\*")


@dataclass(frozen=True)
class Term:
    """One glossary entry: what the English calls it, where it lives, its Chinese."""

    english: str  # the heading, e.g. "Constant folding"
    slug: str  # its anchor on glossary.html, e.g. "constant-folding"
    names: tuple[str, ...]  # the Chinese name(s) the book uses, e.g. ("常量折叠",)
    aliases: tuple[str, ...]  # other accepted forms: "归约", "IR", "Pass"

    @property
    def renderings(self) -> tuple[str, ...]:
        """Every form a translation may use for this term."""
        return self.names + self.aliases


def slug(heading: str) -> str:
    """The anchor MyST gives a heading (myst_heading_anchors): lower case, words
    joined by '-', punctuation other than '-' and '_' dropped."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _names(bold: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split `归约算子 (also 归约)` into names ("归约算子",) and aliases ("归约",)."""
    bold = bold.strip().rstrip(".").strip()
    main, _, rest = bold.partition(" (")
    names = tuple(n.strip() for n in main.split(" / ") if n.strip())
    aliases = []
    for part in rest.rstrip(")").split(","):
        part = re.sub(r"^also\s+", "", part.strip())
        if part:
            aliases.append(part)
    return names, tuple(aliases)


def terms(glossary: str | Path) -> list[Term]:
    """Every entry of the glossary (a path, or its Markdown text), in page order."""
    text = glossary
    if isinstance(glossary, Path):
        text = glossary.read_text(encoding="utf-8")
    found = []
    heads = list(_HEADING.finditer(text))
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        bold = _BOLD.search(text, head.end(), end)
        if bold is None or not CJK.search(bold.group(1)):
            raise ValueError(
                f"glossary entry {head.group(1)!r} has no Chinese name: open its body "
                "with the name in bold, like **计算图.**")
        names, aliases = _names(bold.group(1))
        english = head.group(1)
        found.append(Term(english, slug(english), names, aliases))
    return found


def jieba_dictionary(glossary: Path, out: Path) -> Path:
    """Write a jieba user dictionary with every Chinese name of the glossary.

    jieba's own dictionary splits `常量折叠` into `常量` + `折叠`; Sphinx's search
    then finds no page for the query `常量折叠`. A high count keeps each name whole.
    """
    words = sorted({w for t in terms(glossary) for w in t.renderings if CJK.search(w)})
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{w.replace(' ', '')} 100000 n" for w in words]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
