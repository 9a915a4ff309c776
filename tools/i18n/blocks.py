"""The translatable blocks of a Markdown text, as Sphinx's gettext builder finds them.

Sphinx (with MyST) writes one catalog entry per paragraph, heading and table cell; its
msgid is the block's inline Markdown source (MyST's `rawsource`) with the line breaks
turned into spaces. To put a translation back into a notebook we need more than the
msgid: where the block's text starts and ends in the cell, so that only that text is
replaced and the list markers, indentation, table pipes and everything between the
blocks (code fences, math, HTML) stay byte for byte. markdown-it, configured as MyST
configures it, gives each block its source lines; the text is then found in them.

Directive bodies (`:::{note}`, `:::{dropdown}`) are parsed again, as MyST parses them
when the directive runs; code directives are not prose and are skipped. A dropdown's
title is a block of its own (tools/site/book_dropdown.py makes it a text node).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# book/conf.py's myst_enable_extensions (tests/test_i18n_notebooks.py compares them).
MYST_EXTENSIONS = ("colon_fence", "deflist", "dollarmath", "amsmath", "attrs_inline")
# Tokens whose inline child Sphinx extracts: paragraphs, headings, table cells and
# definition-list terms.
_OPENERS = {"paragraph_open": "paragraph", "heading_open": "heading",
            "th_open": "cell", "td_open": "cell", "dt_open": "term"}
# Directives whose argument is a translated title (tools/site/book_dropdown.py; an
# admonition's title is a title node, which Sphinx's gettext builder extracts).
_TITLED = {"dropdown", "admonition"}
# Directives whose body is Markdown prose (MyST parses it nested).
_PROSE_DIRECTIVES = {"admonition", "attention", "caution", "danger", "dropdown",
                     "epigraph", "error", "hint", "important", "note", "seealso",
                     "sidebar", "tip", "topic", "warning", "margin", "card"}
_DIRECTIVE = re.compile(r"\{([\w:-]+)\}")
_OPTION = re.compile(r"\s*:[\w-]+:")


@dataclass(frozen=True)
class Block:
    """One translatable block: its msgid and where its text lies in the source."""

    msgid: str
    kind: str  # paragraph, heading, cell, term or title
    start: int  # character offsets into the text: text[start:end] is the block
    end: int
    line: int  # 0-based line of the block's first character


@lru_cache(maxsize=1)
def _parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    config = MdParserConfig(enable_extensions=set(MYST_EXTENSIONS))
    return create_md_parser(config, RendererHTML)


def msgid_of(content: str) -> str:
    """The msgid Sphinx's gettext builder writes for a block's inline source."""
    return " ".join(line.strip() for line in content.splitlines()).strip()


def find_blocks(text: str) -> list[Block]:
    """Every translatable block of `text`, in source order."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return list(_walk(_parser().parse(text), text, starts, 0))


def _walk(tokens, text: str, starts: list[int], base: int):
    row_cursor = 0  # table cells share a line: search each after the one before
    for i, token in enumerate(tokens):
        opener = tokens[i - 1] if i else None
        if token.type == "inline" and opener is not None and opener.type in _OPENERS:
            kind = _OPENERS[opener.type]
            first, last = token.map[0] + base, max(token.map) + base
            last = max(last, first + 1)  # a definition term's map is empty
            low = max(starts[first], row_cursor) if kind == "cell" else starts[first]
            source = token.content
            if kind == "cell":  # markdown-it unescapes \| in a cell, the source has it
                source = source.replace("|", "\\|")
            block = _locate(source, kind, text, starts, first, last, low)
            row_cursor = block.end
            yield block
        elif token.type in ("colon_fence", "fence") and token.map:
            yield from _directive_body(token, text, starts, base)


def _directive_body(token, text: str, starts: list[int], base: int):
    """The blocks of a prose directive's body, parsed again as MyST does."""
    match = _DIRECTIVE.match(token.info.strip())
    if not match or match.group(1) not in _PROSE_DIRECTIVES:
        return
    opening = token.map[0] + base
    title = token.info.strip()[match.end():].strip()
    if match.group(1) in _TITLED and title:
        yield _locate(title, "title", text, starts, opening, opening + 1,
                      starts[opening] + text[starts[opening]:].index("}") + 1)
    first = opening + 1  # the line after the opening fence
    body = token.content.splitlines(keepends=True)
    skip = 0
    if body and body[0].strip() == "---":  # a YAML block of options
        closing = [k for k, line in enumerate(body[1:], 1) if line.strip() == "---"]
        skip = closing[0] + 1 if closing else 0
    else:
        while skip < len(body) and _OPTION.match(body[skip]):
            skip += 1
    nested = _parser().parse("".join(body[skip:]))
    yield from _walk(nested, text, starts, first + skip)


def _locate(content: str, kind: str, text: str, starts: list[int], first: int,
            last: int, low: int) -> Block:
    """Find a block's inline source between lines `first` and `last` of `text`."""
    parts = content.split("\n")
    start = text.find(parts[0], low, starts[first + 1])
    if len(parts) == 1:
        end = start + len(parts[0])
    else:
        final = last - 1
        while final > first and parts[-1] not in text[starts[final]:starts[final + 1]]:
            final -= 1
        end = text.rfind(parts[-1], starts[final], starts[final + 1]) + len(parts[-1])
    if start < 0 or end < start + len(parts[-1]):
        raise ValueError(
            f"cannot find the {kind} {content[:60]!r} in lines {first + 1}-{last} of "
            "its cell: the Markdown parser and the cell disagree; report the cell")
    msgid = content.replace("\\|", "|") if kind == "cell" else content
    return Block(msgid_of(msgid), kind, start, end, first)
