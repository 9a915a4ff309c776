"""Is a message catalog of code (not of the book's prose) complete and current?

A code catalog is gettext's: the strings a program prints, wrapped in `_("...")`,
extracted by Babel (as `make library-catalog` runs `pybabel extract`), translated in
`<localedir>/zh_CN/LC_MESSAGES/<domain>.po` and compiled beside it to `.mo`. The
library's catalog is one (domain "graphopt", src/graphopt/locale); the grader may keep
its own with the same check. `problems(...)` lists, one line each:

- a msgid the code wraps that the .po lacks (missing), or the reverse (stale);
- an entry that is empty, fuzzy or obsolete (not reviewed);
- a translation whose {placeholders} differ from the English (it would raise or
  print the wrong value);
- a .mo that says something else than the .po (compiled from an older one).
"""

from __future__ import annotations

import re
from pathlib import Path

from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.mofile import read_mo
from babel.messages.pofile import read_po

LOCALE = "zh_CN"
# graphopt.i18n.gettext_in(lang, message): the message is the second argument
KEYWORDS = {**DEFAULT_KEYWORDS, "gettext_in": (2,)}
# the passes' notes (graphopt.i18n.note), a catalog of their own
NOTE_KEYWORDS = {"note": None}
_FIELD = re.compile(r"\{(\w*)[^{}]*\}")


def catalog_paths(localedir: Path, domain: str) -> tuple[Path, Path]:
    base = localedir / LOCALE / "LC_MESSAGES" / domain
    return base.with_suffix(".po"), base.with_suffix(".mo")


def extracted(source: Path, keywords: dict = KEYWORDS) -> set[str]:
    """Every msgid the Python files under `source` wrap (Babel's extraction)."""
    found = set()
    for _file, _line, message, _comments, context in extract_from_dir(
            str(source), keywords=keywords):
        found.add(_with_context(context, message[0] if isinstance(message, tuple)
                                else message))
    return found


def _with_context(context: str | None, msgid: str) -> str:
    """A msgid with its context (pgettext), as gettext keys them."""
    return f"{context}\x04{msgid}" if context else msgid


def _key(message) -> str:
    """The singular msgid (read_mo gives a plural entry's ids as a list), with its
    context where it has one."""
    msgid = message.id[0] if isinstance(message.id, (tuple, list)) else message.id
    return _with_context(message.context, msgid)


def _strings(message) -> tuple[str, ...]:
    s = message.string
    return tuple(s) if isinstance(s, (tuple, list)) else (s,)


def _fields(text: str) -> list[str]:
    return sorted(_FIELD.findall(text.replace("{{", "").replace("}}", "")))


def problems(sources: list[Path], localedir: Path, domain: str,
             keywords: dict = KEYWORDS) -> list[str]:
    """What keeps the catalog `domain` from matching the code under `sources`."""
    po_path, mo_path = catalog_paths(localedir, domain)
    if not po_path.exists():
        return [f"{po_path}: missing (make library-catalog creates it)"]
    with po_path.open("rb") as f:
        po = read_po(f)
    wrapped = set().union(*(extracted(s, keywords) for s in sources))
    entries = {_key(m): m for m in po if m.id}
    found = [f"missing: {m!r} is wrapped in the code but not in {po_path.name}"
             for m in sorted(wrapped - entries.keys())]
    found += [f"stale: {m!r} is in {po_path.name} but no longer in the code"
              for m in sorted(entries.keys() - wrapped)]
    found += [f"obsolete: {_key(m)!r}" for m in po.obsolete.values()]
    for key, m in sorted(entries.items()):
        if m.fuzzy:
            found.append(f"fuzzy (not reviewed): {key!r}")
        if not all(_strings(m)):
            found.append(f"untranslated: {key!r}")
        elif any(_fields(s) != _fields(key.split("\x04")[-1]) for s in _strings(m)):
            found.append(f"placeholders differ: {key!r}")
    return found + _compiled_problems(po, mo_path)


def _compiled_problems(po, mo_path: Path) -> list[str]:
    if not mo_path.exists():
        return [f"{mo_path}: missing (make library-catalog compiles it)"]
    with mo_path.open("rb") as f:
        mo = read_mo(f)
    want = {_key(m): _strings(m) for m in po if m.id and not m.fuzzy}
    have = {_key(m): _strings(m) for m in mo if m.id}
    if want != have:
        differ = sorted(k for k in want.keys() | have.keys()
                        if want.get(k) != have.get(k))
        return [f"{mo_path.name} differs from the .po ({len(differ)} entries, first "
                f"{differ[0]!r}): run make library-catalog"]
    return []
