"""A notebook in another language: its markdown blocks translated, everything else kept.

Only the text of each translated block changes (found by `blocks.find_blocks`, the
blocks Sphinx's gettext builder extracts). Code cells, outputs, attachments, cell and
notebook metadata and tags are the English notebook's own, and the file is written as
nbformat writes it (sorted keys, one-space indent), so a code cell of the translation
is byte for byte the English one: the two languages run the same code and show the
same outputs by construction. A block with no reviewed translation stays English and
is counted, so a reader of the report sees how much is missing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .blocks import Block, find_blocks

Lookup = Callable[[str], "str | None"]


@dataclass
class Report:
    """What one translated notebook holds: translated and English blocks."""

    name: str
    translated: int = 0
    untranslated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        total = self.translated + len(self.untranslated)
        line = f"{self.name}: {self.translated} of {total} blocks translated"
        if self.untranslated:
            line += (f", {len(self.untranslated)} left in English (first: "
                     f"{self.untranslated[0][:60]!r})")
        return line


def markdown_sources(nb: dict) -> list[str]:
    """The source of every markdown cell, as one string each."""
    return [_source(c) for c in nb["cells"] if c["cell_type"] == "markdown"]


def msgids(nb: dict) -> list[str]:
    """Every translatable block's msgid, in notebook order (repeats included)."""
    return [b.msgid for text in markdown_sources(nb) for b in find_blocks(text)]


def translate_notebook(raw: str, lookup: Lookup, name: str = "notebook",
                       outputs: Callable[[dict], None] | None = None
                       ) -> tuple[str, Report]:
    """The notebook JSON `raw` with its markdown translated by `lookup`, and a report.

    `lookup(msgid)` returns the translation or None; `outputs(cell)`, where given,
    translates a code cell's saved outputs in place (the book's: what the library
    printed, `outputs.translate_outputs`). The result is serialised as nbformat
    does, which reproduces the English file byte for byte when nothing is
    translated (tests/test_i18n_notebooks.py checks it on every chapter).
    """
    nb = json.loads(raw)
    report = Report(name)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and outputs is not None:
            outputs(cell)
        if cell["cell_type"] != "markdown":
            continue
        text = translate_text(_source(cell), lookup, report)
        cell["source"] = text.splitlines(keepends=True) if isinstance(
            cell["source"], list) else text
    return dumps(nb), report


def dumps(nb: dict) -> str:
    """A notebook as nbformat writes it (nbformat.writes, without its validation)."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def translate_text(text: str, lookup: Lookup, report: Report | None = None) -> str:
    """`text` (Markdown) with each block that `lookup` translates replaced."""
    report = report if report is not None else Report("text")
    pieces, cursor = [], 0
    for block in find_blocks(text):
        translation = lookup(block.msgid)
        if not translation:
            report.untranslated.append(block.msgid)
            continue
        report.translated += 1
        pieces += [text[cursor:block.start], _fit(translation, block, text)]
        cursor = block.end
    return "".join(pieces) + text[cursor:]


def _fit(translation: str, block: Block, text: str) -> str:
    """The translation shaped for the block's place: one line in a heading or a
    table cell (pipes escaped), continuation lines indented under a list item."""
    if block.kind in ("heading", "cell", "term", "title"):
        translation = " ".join(translation.split("\n"))
        if block.kind == "cell":
            translation = re.sub(r"(?<!\\)\|", r"\\|", translation)
        return translation
    line_start = text.rfind("\n", 0, block.start) + 1
    prefix = text[line_start:block.start]  # list markers, quote marks, indentation
    indent = "".join(c if c in "> \t" else " " for c in prefix)
    return translation.replace("\n", "\n" + indent)


def _source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source
