"""What graphopt printed in a notebook's saved outputs, translated (the Chinese book).

The Chinese chapters run the English chapters' code with GRAPHOPT_LANG=zh, so what
the library prints comes out in Chinese (src/graphopt/i18n.py). Their saved outputs
are the English chapters' own, translated here with the same catalog, so a reader
opens them in Chinese and nbval's Chinese leg compares like with like:

- each msgid becomes a pattern: its {fields} match any text on the line, its spaces
  any run of whitespace (a printed sentence may wrap), and a match is replaced by the
  msgstr with the same field values;
- a field named in NESTED holds another message (or nothing) and is translated the
  same way; a fragment (a msgid that starts with punctuation, ", {n} threads") or a
  lone word that is the whole field ("memory-bound") is translated only there;
- only sentences are matched (a field, or three words or more): a lone word such as
  "baseline" may be a reader's own label, which the library never translates.

What a notebook's own code prints (its f-strings) stays English in both languages.
Chinese wraps and pads at other places than English, so the Chinese leg compares
outputs modulo whitespace (tests/nbval_sanitize_zh.cfg).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_PO = ROOT / "src/graphopt/locale/zh_CN/LC_MESSAGES/graphopt.po"
# fields that hold a message of their own (i18n.py's docstring names the convention)
NESTED = ("reason", "why", "details", "where", "bound")
# output kinds that carry text a reader sees (images are pixels; widget state is
# rebuilt when the cell runs)
TEXT_KINDS = ("text/plain", "text/html", "text/markdown")
_FIELD = re.compile(r"\{(\w+)\}")
# where a sentence that ends in a field ends: before ";" ":" "." and a space, ")",
# or at the end of the line (a label may hold "fx.fuse" or "fused, reference")
_SENTENCE_END = r"(?=[;:.](?:\s|$)|\)|\n|$)"


def _pattern(msgid: str) -> re.Pattern:
    parts, last = [], 0
    fields = list(_FIELD.finditer(msgid))
    for i, m in enumerate(fields):
        parts.append(_literal(msgid[last:m.start()]))
        at_end = i == len(fields) - 1 and m.end() == len(msgid)
        # a field ends where the text after it starts; a last one where the
        # sentence does (a notebook may print more after it on the line)
        many = "*" if m.group(1) in NESTED else "+"
        parts.append(f"(?P<{m.group(1)}>[^\\n]{many}?)"
                     + (_SENTENCE_END if at_end else ""))
        last = m.end()
    parts.append(_literal(msgid[last:]))
    return re.compile("".join(parts))


def _literal(text: str) -> str:
    return r"\s+".join(re.escape(word) for word in text.split(" "))


def _is_sentence(msgid: str) -> bool:
    return bool(_FIELD.search(msgid)) or len(msgid.split()) >= 3


def _is_fragment(msgid: str) -> bool:
    return not (msgid[:1].isalnum() or msgid.startswith("{"))


@functools.lru_cache(maxsize=8)
def rules(po_path: Path = LIBRARY_PO, nested: bool = False
          ) -> tuple[tuple[re.Pattern, str], ...]:
    """(pattern, msgstr) for each reviewed sentence, longest English first; with
    `nested`, the fragments too (for a field that holds a message)."""
    with po_path.open("rb") as f:
        po = read_po(f)
    found = []
    for m in po:
        if not m.id or m.fuzzy:
            continue
        ids = m.id if isinstance(m.id, (tuple, list)) else (m.id,)
        strings = m.string if isinstance(m.string, (tuple, list)) else (m.string,)
        for msgid in ids:
            sentence = _is_sentence(msgid) and not _is_fragment(msgid)
            # a field may hold a lone word of the catalog ("memory-bound"), whole
            if strings[0] and not m.context and (sentence or nested):
                found.append((msgid, strings[-1] if len(strings) == len(ids)
                              and msgid == ids[-1] else strings[0]))
    found.sort(key=lambda pair: -len(_FIELD.sub("", pair[0])))
    return tuple((_pattern(msgid) if _is_sentence(msgid)
                  else re.compile(f"^{re.escape(msgid)}$"), msgstr)
                 for msgid, msgstr in found)


def translate(text: str, po_path: Path = LIBRARY_PO, nested: bool = False) -> str:
    """`text` with every library sentence in it translated."""
    for pattern, msgstr in rules(po_path, nested):
        text = pattern.sub(lambda m, s=msgstr: _fill(s, m, po_path), text)
    return text


def _fill(msgstr: str, match: re.Match, po_path: Path) -> str:
    values = {k: (translate(v, po_path, nested=True) if k in NESTED else v)
              for k, v in match.groupdict().items()}
    return msgstr.format(**values)


def translate_outputs(cell: dict, po_path: Path = LIBRARY_PO) -> None:
    """Translate the text of a code cell's outputs in place."""
    for out in cell.get("outputs", []):
        if "text" in out:
            out["text"] = _map(out["text"], po_path)
        for kind in TEXT_KINDS:
            if kind in out.get("data", {}):
                out["data"][kind] = _map(out["data"][kind], po_path)


def _map(value, po_path: Path):
    if isinstance(value, list):  # nbformat's lines, each ending in "\n"
        return translate("".join(value), po_path).splitlines(keepends=True)
    return translate(value, po_path)
