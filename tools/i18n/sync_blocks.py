"""Does a translation parse as the same kind of block as its English?

Sphinx translates a page by parsing each msgstr again with the page's parser (MyST
here) and keeping it only when it is a paragraph (or, for a heading, a heading):
anything else is dropped without a warning and the English stays. "3. 常量折叠"
starts an ordered list, "- 注意" a bullet list, a blank line starts a second
paragraph that is cut off. This parses a msgstr the way Sphinx's i18n transform
does (a heading gets an `===` underline) with the book's MyST extensions.
"""

from __future__ import annotations

from functools import lru_cache

# book/conf.py's myst_enable_extensions (the ones that change block parsing)
EXTENSIONS = {"colon_fence", "deflist", "dollarmath", "amsmath", "attrs_inline"}
_FIX = {
    "ordered_list_open": "it starts with a number and a full stop, which Markdown "
    "reads as a numbered list: escape the full stop (`3\\. 常量折叠`, in the .po "
    "file `3\\\\. 常量折叠`)",
    "bullet_list_open": "it starts with '-', '*' or '+', a bullet list: rephrase or "
    "escape it with a backslash",
    "heading_open": "it starts with '#', a heading: escape it with a backslash",
    "blockquote_open": "it starts with '>', a quotation: escape it with a backslash",
}


@lru_cache(maxsize=1)
def _parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(MdParserConfig(enable_extensions=EXTENSIONS), RendererHTML)


def blocks(text: str) -> list[str]:
    """The top-level block tokens MyST makes of `text` (opening tokens only)."""
    tokens = _parser().parse(text)
    return [t.type for t in tokens if t.level == 0 and not t.type.endswith("_close")]


def renders_as(msgstr: str, kind: str) -> str:
    """'' when `msgstr` renders as one `kind` ("heading" or "paragraph") block, else
    what it renders as and how to fix it."""
    if kind == "heading":
        # what sphinx.transforms.i18n does before parsing a title's translation
        found = blocks(msgstr + "\n" + "=" * len(msgstr) * 2)
        want = "heading_open"
    else:
        found = blocks(msgstr)
        want = "paragraph_open"
    if found == [want]:
        return ""
    first = found[0] if found else "nothing"
    if first == want:
        return (f"the translation is {len(found)} blocks, the English one: Sphinx "
                "keeps only the first; join them (no blank line inside an entry)")
    hint = _FIX.get(first, "rephrase its start so that it reads as plain text")
    return (f"Sphinx drops this translation of a {kind}: MyST reads it as "
            f"{first.removesuffix('_open')}; {hint}")
