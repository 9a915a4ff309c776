"""Gettext catalogs: read the reviewed translations, write a lab's catalog.

The book's catalogs come from Sphinx's gettext builder and sphinx-intl; the labs'
(labs/locales/zh_CN/LC_MESSAGES/<lab>.po) are written here from the lab masters in
the same format (babel, lines unwrapped, no source locations), so one set of tools
and one sync test reads both. Only an entry that is neither empty nor fuzzy counts as
a translation: a fuzzy entry is one whose English changed and was not reviewed again,
and Sphinx does not use it either.
"""

from __future__ import annotations

import difflib
import io
from collections.abc import Iterable
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

LOCALE = "zh_CN"


def read(path: Path) -> Catalog:
    """The catalog at `path`; a clear error when it is missing."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no catalog {path}: write it with `python tools/zh_notebooks.py extract`"
            " (labs) or `make gettext` / sphinx-intl (the book)")
    with path.open("rb") as f:
        return read_po(f, locale=LOCALE)


def reviewed(catalog: Catalog) -> dict[str, str]:
    """msgid -> msgstr for every entry that has a reviewed translation."""
    return {m.id: m.string for m in catalog
            if m.id and isinstance(m.id, str) and m.string and not m.fuzzy}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("graphopt")
    except PackageNotFoundError:  # a checkout without the package installed
        return "0"


def update(path: Path, msgids: Iterable[str], project: str = "graphopt") -> Catalog:
    """Write `path` with `msgids`, in order, keeping each translation already there.

    Unchanged English keeps its entry as it was. Changed English (a new msgid close to
    one that is gone, as gettext's msgmerge matches them) gets the old translation
    marked fuzzy: a draft to review, which no notebook uses until it is reviewed. Any
    other new block gets an empty entry; a translation whose English is gone is
    dropped (the old text stays in git).
    """
    path = Path(path)
    old = read(path) if path.is_file() else Catalog(locale=LOCALE)
    wanted = list(dict.fromkeys(msgids))  # first occurrence, like Sphinx
    gone = {m.id: m.string for m in old if m.id and m.id not in wanted and m.string}
    new = Catalog(locale=LOCALE, project=project, version=_version(),
                  msgid_bugs_address="the project's issue tracker",
                  copyright_holder="the graphopt authors",
                  last_translator="the graphopt authors",
                  language_team="zh_CN, the graphopt authors", fuzzy=False)
    for msgid in wanted:
        kept = old.get(msgid)
        close = difflib.get_close_matches(msgid, gone, n=1, cutoff=0.6)
        if kept is not None:
            new.add(msgid, kept.string, flags=kept.flags)
        elif close:
            new.add(msgid, gone.pop(close[0]), flags=["fuzzy"])
        else:
            new.add(msgid, "")
    if path.is_file():  # keep the header's dates: a rerun changes nothing
        new.creation_date = old.creation_date
        new.revision_date = old.revision_date
    write(path, new)
    return new


def write(path: Path, entries: Catalog) -> None:
    """Write a catalog as the book's are written: lines unwrapped, no locations; an
    unchanged file is not touched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    write_po(buffer, entries, width=0, no_location=True, omit_header=False)
    if not path.is_file() or path.read_bytes() != buffer.getvalue():
        path.write_bytes(buffer.getvalue())
