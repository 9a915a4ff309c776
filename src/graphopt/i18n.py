"""The reader's language: every string the library prints comes from one catalog.

The English text is the key (gettext's msgid); the Chinese entries live in
`locale/zh_CN/LC_MESSAGES/graphopt.po`, beside the `.mo` that Babel compiles from it
(`make catalogs`; tests/test_i18n_catalog.py fails when the two differ, when an
entry is missing, empty or fuzzy, or when the code wraps a string the catalog lacks).
The language is the environment's GRAPHOPT_LANG, read at each call, so one process
can switch: `zh...` picks Chinese, anything else (or nothing) English.
`make lab LANG=zh` and the Chinese notebook tests set it.

    from graphopt.i18n import _
    print(_("{a} ran {r} faster than {b}").format(a=..., r=..., b=...))

Wrap the literal, then format: extraction (Babel's, as `pybabel extract` runs it)
reads string literals, never f-strings. A printed line is one message whose fields
are data (names, numbers, units); a field that holds another translated message is
named `reason`, `why`, `details` or `where`, so the Chinese book can translate the
English chapters' saved outputs into what this module prints (tools/i18n/outputs.py).
`N_` marks a literal for extraction where the translation must wait (a table of
labels built at import). Other catalogs, such as the grader's, use
`Catalog(domain, localedir)` with the same language rule.

Why a committed `.mo`: the standard library's `gettext` reads only compiled catalogs,
and compiling at import would make Babel a run-time dependency of every learner; the
sync test keeps the two files one.
"""

from __future__ import annotations

import functools
import gettext
import os
import unicodedata
from pathlib import Path

DOMAIN = "graphopt"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
# GRAPHOPT_LANG's short names -> the catalogs' locale directories
LOCALES = {"zh": "zh_CN"}


def language() -> str:
    """"zh" when GRAPHOPT_LANG starts with zh, else "en" (the default)."""
    lang = os.environ.get("GRAPHOPT_LANG", "").strip().lower()
    return "zh" if lang.startswith("zh") else "en"


@functools.lru_cache(maxsize=None)
def _translations(domain: str, localedir: str, lang: str) -> gettext.NullTranslations:
    if lang not in LOCALES:
        return gettext.NullTranslations()  # English: the msgid is the text
    # fallback=False: a Chinese reader must not get English silently because the
    # compiled catalog is missing from an install
    return gettext.translation(domain, localedir, languages=[LOCALES[lang]])


class Catalog:
    """One gettext domain in one locale directory, in the reader's language.

    `lang=None` follows GRAPHOPT_LANG at each call; "en" or "zh" fixes it (the
    static explorer draws both languages into one page).
    """

    def __init__(self, domain: str = DOMAIN, localedir: Path | str = LOCALE_DIR):
        self.domain, self.localedir = domain, str(localedir)

    def translations(self, lang: str | None = None) -> gettext.NullTranslations:
        return _translations(self.domain, self.localedir, lang or language())

    def gettext(self, message: str, lang: str | None = None) -> str:
        """`message` (English, the msgid) in `lang` or the reader's language."""
        return self.translations(lang).gettext(message)

    def ngettext(self, singular: str, plural: str, n: int,
                 lang: str | None = None) -> str:
        """The form of `singular`/`plural` for `n`, translated."""
        return self.translations(lang).ngettext(singular, plural, n)


LIBRARY = Catalog()


def _(message: str) -> str:
    """`message` in the reader's language (GRAPHOPT_LANG)."""
    return LIBRARY.gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """`singular` or `plural` for `n`, in the reader's language."""
    return LIBRARY.ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    """`message` in the reader's language, where `context` tells one sense of an
    English word from another ("measured" a machine's origin, or a status)."""
    return LIBRARY.translations().pgettext(context, message)


def gettext_in(lang: str, message: str) -> str:
    """`message` in `lang` ("en" or "zh"), whatever GRAPHOPT_LANG says."""
    return LIBRARY.gettext(message, lang)


def N_(message: str) -> str:
    """Mark `message` for extraction only; translate it with `_` where it is shown."""
    return message


def display_width(text: str) -> int:
    """Columns `text` takes in a terminal or a notebook's monospace output: a Chinese
    character takes two (pad a table's cells with this, not `len`)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in str(text))


def ljust(text: str, width: int) -> str:
    """`text` padded with spaces to `width` display columns (`str.ljust` for CJK)."""
    return text + " " * max(0, width - display_width(text))


def rjust(text: str, width: int) -> str:
    """`text` padded on the left to `width` display columns (`str.rjust` for CJK)."""
    return " " * max(0, width - display_width(text)) + text


def cjk_font() -> str | None:
    """The name of an installed font with Chinese glyphs (for matplotlib), or None.

    A figure in Chinese needs one; where the machine has none, draw English (boxes of
    tofu teach nothing): `figure_language()` says which.
    """
    from matplotlib import font_manager
    # a regular sans face first: a bold or serif one reads badly at 8-9 pt
    for path in sorted(font_manager.findSystemFonts(),
                       key=lambda f: ("Regular" not in f, "Sans" not in f, f)):
        if "CJK" in path or "WenQuanYi" in path:
            try:
                font_manager.fontManager.addfont(path)
                return font_manager.FontProperties(fname=path).get_name()
            except (OSError, RuntimeError, ValueError):
                continue
    return None


def figure_language() -> tuple[str, str | None]:
    """(language, font) for a matplotlib figure: the reader's language and a CJK
    font, or English and None where Chinese is asked for and no font has it."""
    if language() == "en":
        return "en", None
    font = cjk_font()
    return ("zh", font) if font else ("en", None)


# ------------------------------------------------------------------ pass notes

NOTES = Catalog("notes")


class Note(str):
    """A line a pass writes in `PassResult.notes`: English text, as tests and the
    book's checks read it, that remembers its message and fields, so a display (the
    explorer) can show it in the reader's language with `translated`.

    The notes are data: printing one prints English in either language, and the
    Chinese book's saved outputs keep them English too, except in a cell that prints
    them with `translated` (tools/i18n/outputs.py then translates them with their
    catalog, "notes").
    """

    message: str
    fields: dict

    def __new__(cls, message: str, /, **fields) -> Note:
        self = super().__new__(cls, message.format(**fields) if fields else message)
        self.message, self.fields = message, fields
        return self

    def translated(self, lang: str | None = None) -> str:
        fields = {k: translated(v, lang) for k, v in self.fields.items()}
        text = NOTES.gettext(self.message, lang)
        return text.format(**fields) if fields else text


def note(message: str, /, **fields) -> Note:
    """A pass's note: `message` (English, with {fields}) filled in (see `Note`)."""
    return Note(message, **fields)


def translated(text, lang: str | None = None):
    """`text` in `lang` (default: the reader's) when it is a `Note`, else as it is."""
    return text.translated(lang) if isinstance(text, Note) else text
