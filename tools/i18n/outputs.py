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
- only sentences are matched (a field, or three words or more, a colon counting as
  one): a lone word such as "baseline" may be a reader's own label, which the
  library never translates;
- a field never runs across a table's columns: not over two spaces in a row (a text
  table's gap) nor over a `</td>` (an HTML table's cell);
- an entry with a context (pgettext) is not a pattern: the context says its English
  alone is too short or too common to find in a line (a verdict word, "fails: ...").
  The rows of ch. 7's saving table (`peers.attribution.Step`) are found by their
  own pattern, STEP_LINE, and their words are read from the catalog there.

What a notebook's own code prints (its f-strings) stays English in both languages.
The passes' notes (graphopt.i18n.note) are English data: a cell's saved notes are
translated (with the "notes" catalog, NOTES_PO) only where the cell prints them with
`graphopt.i18n.translated`, which is what a Chinese run of that cell prints.
A drawing's SVG (graphopt.draw) keeps its English layout with the library's words
put in place: the legend, a fused group's cluster title, a default graph title.
A Chinese run lays the Chinese words out at other widths, so the zh nbval leg
compares a drawing by its alt text (title, nodes, edges), not by its SVG.
Chinese wraps and pads at other places than English, so the Chinese leg compares
outputs modulo whitespace (tests/nbval_sanitize_zh.cfg).
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from pathlib import Path

from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_PO = ROOT / "src/graphopt/locale/zh_CN/LC_MESSAGES/graphopt.po"
# the passes' notes (graphopt.i18n.note): a cell that prints them through
# `translated` prints them in the reader's language, so its saved notes are translated
NOTES_PO = LIBRARY_PO.with_name("notes.po")
PRINTS_NOTES = re.compile(r"\btranslated\(")
# fields that hold a message of their own (i18n.py's docstring names the convention;
# a note's {policy} holds the policy's own note, `Policy.describe`)
NESTED = ("reason", "why", "details", "where", "bound", "policy")
# fields that hold a position, digits only ("output {i}: ..." must not read "one
# output per group: ..." as output number "per group")
INTEGERS = ("i", "index")
# output kinds that carry text a reader sees (images are pixels; widget state is
# rebuilt when the cell runs)
TEXT_KINDS = ("text/plain", "text/html", "text/markdown")
SVG = "image/svg+xml"
# graphopt.draw's words in an SVG (viz.py): each inside the <g> of its node or cluster
_IN_GROUP = r"(?:(?!</g>).)*?<text[^>]*>"
_SVG_LEGEND = re.compile(rf"(<title>legend_(?P<kind>\w+)</title>{_IN_GROUP})(?P=kind)"
                         r"(?=</text>)", re.S)
_SVG_LEGEND_TITLE = re.compile(rf"(<title>cluster_legend</title>{_IN_GROUP})op kind"
                               r"(?=</text>)", re.S)
_SVG_FUSED = re.compile(rf"(<title>cluster_(?P<name>[\w.]+)</title>{_IN_GROUP})"
                        r"(?P=name) \(fused: 1 kernel\)(?=</text>)", re.S)
# a drawing's default titles (its <title>, its label, the comment Graphviz writes)
_SVG_TITLES = ("computation graph",
               "autograd graph (backward runs from the output to the leaves)",
               "the memory hierarchy")
# the concept figure whose every line of text is a message of figures.py
_FIGURE = ("the memory hierarchy", "src/graphopt/figures.py")
_SVG_TEXT = re.compile(r"(<text[^>]*>)([^<]*)(?=</text>)")
_FIELD = re.compile(r"\{(\w+)\}")
# where a sentence that ends in a field ends: before ";" ":" "." and a space, ")",
# or at the end of the line (a label may hold "fx.fuse" or "fused, reference")
_SENTENCE_END = r"(?=[;:.](?:\s|$)|\)|\n|$)"
# one character of a field: not a line break, nor the start of a column's gap
_FIELD_CHAR = r"(?:(?!  |</t[dh]>)[^\n])"
# ...or, in a note (printed with textwrap.fill: names are long), a line's wrap too
_NOTE_FIELD_CHAR = r"(?:(?!  |</t[dh]>)[^\n]|\n[ \t]*)"
# a row of peers.attribution.Step's table: mechanism, saving, (low to high), verdict
STEP_LINE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<mechanism>\S.*?)(?P<saved>\s+-?\d+(?:\.\d+)?%)  "
    r"\((?P<low>-?\d+(?:\.\d+)?%) to (?P<high>-?\d+(?:\.\d+)?%)\)  "
    r"(?P<verdict>saves|costs|within noise)$", re.MULTILINE)
# the header of the stage table (`OptimizeResult.table`): its words, their widths
STAGE_HEADER = re.compile(r"^stage +nodes +kernels +moved +peak$", re.MULTILINE)
STAGE_COLUMNS = (("stage", -34), ("nodes", 7), ("kernels", 9), ("moved", 12),
                 ("peak", 12))


def _pattern(msgid: str, field_char: str = _FIELD_CHAR) -> re.Pattern:
    parts, last, seen = [], 0, set()
    fields = list(_FIELD.finditer(msgid))
    for i, m in enumerate(fields):
        parts.append(_literal(msgid[last:m.start()]))
        if m.group(1) in seen:  # a field said twice holds the same text twice
            parts.append(f"(?P={m.group(1)})")
            last = m.end()
            continue
        seen.add(m.group(1))
        at_end = i == len(fields) - 1 and m.end() == len(msgid)
        # a field ends where the text after it starts; a last one where the
        # sentence does (a notebook may print more after it on the line)
        many = "*" if m.group(1) in NESTED else "+"
        char = r"\d" if m.group(1) in INTEGERS else field_char
        parts.append(f"(?P<{m.group(1)}>{char}{many}?)"
                     + (_SENTENCE_END if at_end else ""))
        last = m.end()
    parts.append(_literal(msgid[last:]))
    return re.compile("".join(parts))


def _literal(text: str) -> str:
    return r"\s+".join(re.escape(word) for word in text.split(" "))


def _is_sentence(msgid: str) -> bool:
    # "static: torch.export" (a label, a colon, a name) counts as three words
    words = len(msgid.split()) + (": " in msgid.strip())
    return bool(_FIELD.search(msgid)) or words >= 3


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
    char = _NOTE_FIELD_CHAR if po_path == NOTES_PO else _FIELD_CHAR
    return tuple((_pattern(msgid, char) if _is_sentence(msgid)
                  else re.compile(f"^{re.escape(msgid)}$"), msgstr)
                 for msgid, msgstr in found)


def translate(text: str, po_path: Path = LIBRARY_PO, nested: bool = False) -> str:
    """`text` with every library sentence in it translated."""
    if not nested:
        text = STEP_LINE.sub(lambda m: _step_line(m, po_path), text)
        text = STAGE_HEADER.sub(lambda m: _stage_header(po_path), text)
    for pattern, msgstr in rules(po_path, nested):
        text = pattern.sub(lambda m, s=msgstr: _fill(s, m, po_path), text)
    return text


def _fill(msgstr: str, match: re.Match, po_path: Path) -> str:
    values = {k: (translate(v, po_path, nested=True) if k in NESTED else v)
              for k, v in match.groupdict().items()}
    return msgstr.format(**values)


@functools.lru_cache(maxsize=8)
def entries(po_path: Path = LIBRARY_PO) -> dict[tuple[str | None, str], str]:
    """{(context, msgid): msgstr} of every reviewed singular entry."""
    with po_path.open("rb") as f:
        po = read_po(f)
    return {(m.context, m.id): m.string for m in po
            if isinstance(m.id, str) and m.id and m.string and not m.fuzzy}


def _step_line(m: re.Match, po_path: Path) -> str:
    """One row of ch. 7's saving table, as `Step.__str__` prints it in Chinese."""
    found = entries(po_path)
    interval = found.get(("saving", "({low} to {high})"), "({low} to {high})")
    mechanism = found.get((None, m["mechanism"]), m["mechanism"])
    pad = " " * max(0, 32 - _width(mechanism))  # Step pads it to 32 columns
    return (m["indent"] + mechanism + pad + m["saved"].strip().rjust(7) + "  "
            + interval.format(low=m["low"], high=m["high"]) + "  "
            + found.get(("saving", m["verdict"]), m["verdict"]))


def _stage_header(po_path: Path) -> str:
    """The stage table's header as `OptimizeResult.table` prints it in Chinese
    (a negative width: padded on the right)."""
    found, cells = entries(po_path), []
    for word, width in STAGE_COLUMNS:
        text = found.get(("stage table", word), word)
        pad = " " * max(0, abs(width) - _width(text))
        cells.append(text + pad if width < 0 else pad + text)
    return "".join(cells)


def _width(text: str) -> int:
    """Display columns (graphopt.i18n.display_width, without importing torch)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def translate_svg(svg: str, po_path: Path = LIBRARY_PO) -> str:
    """A drawing's SVG with graphopt.draw's words in Chinese, in place."""
    found = entries(po_path)

    def word(context, msgid: str) -> str:
        return html.escape(found.get((context, msgid), msgid), quote=False)

    svg = _SVG_LEGEND.sub(lambda m: m[1] + word("op kind", m["kind"]), svg)
    svg = _SVG_LEGEND_TITLE.sub(lambda m: m[1] + word(None, "op kind"), svg)
    fused = found.get((None, "{name} (fused: 1 kernel)"), "{name} (fused: 1 kernel)")
    svg = _SVG_FUSED.sub(lambda m: m[1] + html.escape(fused.format(name=m["name"]),
                                                       quote=False), svg)
    if f"<title>{_FIGURE[0]}</title>" in svg:
        svg = _SVG_TEXT.sub(lambda m: m[1] + _figure_line(m[2], po_path), svg)
    for title in _SVG_TITLES:
        english = html.escape(title, quote=False)
        for before, after in ((">", "<"), ("<!-- Title: ", " Pages")):
            svg = svg.replace(before + english + after,
                              before + word(None, title) + after)
    return svg


@functools.lru_cache(maxsize=8)
def figure_lines(po_path: Path = LIBRARY_PO) -> dict[str, str]:
    """{msgid: msgstr} of the messages figures.py draws (a line of text each)."""
    with po_path.open("rb") as f:
        po = read_po(f)
    return {m.id: m.string for m in po if isinstance(m.id, str) and m.string
            and not m.fuzzy and not m.context
            and any(loc == _FIGURE[1] for loc, _line in m.locations)}


def _figure_line(escaped: str, po_path: Path) -> str:
    """One line of the memory hierarchy's SVG, translated ("CPU: " kept)."""
    text, lines = html.unescape(escaped), figure_lines(po_path)
    prefix = next((p for p in ("CPU: ", "GPU: ") if text.startswith(p)
                   and text[len(p):] in lines), "")
    rest = text[len(prefix):]
    return html.escape(prefix + lines[rest], quote=False) if rest in lines else escaped


def translate_outputs(cell: dict, po_path: Path = LIBRARY_PO) -> None:
    """Translate the text of a code cell's outputs in place (the passes' notes too
    where the cell prints them with `graphopt.i18n.translated`)."""
    source = cell.get("source", "")
    notes = bool(PRINTS_NOTES.search("".join(source) if isinstance(source, list)
                                     else source))
    for out in cell.get("outputs", []):
        if "text" in out:
            out["text"] = _map(out["text"], po_path, notes)
        for kind in TEXT_KINDS:
            if kind in out.get("data", {}):
                out["data"][kind] = _map(out["data"][kind], po_path, notes)
        if SVG in out.get("data", {}):
            svg = out["data"][SVG]
            svg = translate_svg("".join(svg) if isinstance(svg, list) else svg,
                                po_path)
            out["data"][SVG] = (svg.splitlines(keepends=True)
                                if isinstance(out["data"][SVG], list) else svg)


def _map(value, po_path: Path, notes: bool = False):
    text = "".join(value) if isinstance(value, list) else value
    if notes:  # first: a note may hold words a library sentence also has
        text = translate(text, NOTES_PO)
    text = translate(text, po_path)
    # nbformat's lines, each ending in "\n"
    return text.splitlines(keepends=True) if isinstance(value, list) else text
