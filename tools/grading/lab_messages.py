"""The lab tests' own words in the student's language: one gettext catalog.

Each test case of a lab master says what it checks (otter's `failure_message`) and,
in its asserts, what to fix. Those English texts are the msgids of one catalog,
labs/locales/zh_CN/LC_MESSAGES/lab_tests.po, compiled to lab_tests.mo beside it:
`make lab-tests-catalog` extracts them with Babel (`extract` below is Babel's
extraction method for a master notebook; tools/grading/lab_tests.cfg maps it),
updates the .po and compiles it. An f-string message is one msgid whose values are
numbered fields: f"got {n} nodes" -> "got {0} nodes" (a translator's comment names
each field's expression).

Where a message is translated: in the grader's process, after the run, on the text
the tests' process reported (feedback.py). The templates a reason may match come
from the autograder zip's own test code (hashed before and after the run), never
from the hand-in. What a submission controls is a public case's values (a hidden
case's are "..."): they are copied into the translation as text, never formatted or
looked up, by a matcher that only calls str.find (no regex to stall). So a hand-in
can change neither a mark nor which words of the lab its feedback shows.
"""

from __future__ import annotations

import ast
import json
import re
import string
from pathlib import Path

from .answers import parse

DOMAIN = "lab_tests"
LABS_LOCALE = Path(__file__).resolve().parents[2] / "labs" / "locales"
# An autograder zip (build.py) carries the .mo beside the grader's own catalog.
BESIDE = Path(__file__).resolve().with_name("locale")
LOCALE = LABS_LOCALE if LABS_LOCALE.is_dir() else BESIDE
CUT = 200   # runner._short keeps this many characters of a public failure
_CONFIG = re.compile(r'"""\s*# BEGIN TEST CONFIG\n(.*?)"""\s*# END TEST CONFIG',
                     re.S)


def _parse(text: str) -> list[tuple]:
    """string.Formatter's parts of `text`; [] when its braces do not pair."""
    try:
        return list(string.Formatter().parse(text))
    except ValueError:
        return []


def catalog():
    from graphopt.i18n import Catalog
    return Catalog(DOMAIN, LOCALE)


def _gettext(msgid: str, lang: str) -> str:
    try:
        return catalog().gettext(msgid, lang)
    except OSError:  # no compiled catalog here: the page stays English, not lost
        return msgid


# --------------------------------------------------------------- the msgids


def msgid_of(node: ast.expr) -> tuple[str, list[str]] | None:
    """The msgid of an assert's or raise's message and its fields' sources; None
    when the message is a value (`assert x == y, x`: data, not words)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _escape(node.value), []
    if not isinstance(node, ast.JoinedStr):
        return None
    text, fields = "", []
    for part in node.values:
        if isinstance(part, ast.Constant):
            text += _escape(part.value)
        else:
            text += "{%d}" % len(fields)
            fields.append(ast.unparse(part.value))
    return text, fields


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def messages(source: str) -> list[tuple[int, str, list[str]]]:
    """(line, msgid, fields) of every assert and raise message in `source`."""
    try:
        tree = parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        msg = node.msg if isinstance(node, ast.Assert) else (
            node.exc.args[0] if isinstance(node, ast.Raise)
            and isinstance(node.exc, ast.Call) and node.exc.args else None)
        got = msgid_of(msg) if msg is not None else None
        if got and re.search(r"[A-Za-z]", re.sub(r"\{\d+\}", "", got[0])):
            found.append((node.lineno, *got))
    return sorted(found)


def description(source: str) -> str:
    """A test cell's `failure_message` (what the case checks), or ''."""
    import yaml
    config = _CONFIG.search(source)
    data = yaml.safe_load(config[1]) if config else None
    return str(data.get("failure_message") or "") if isinstance(data, dict) else ""


def extract(fileobj, keywords, comment_tags, options):
    """Babel's extraction method for a lab master: (line, None, msgid, comments)
    per test case's description and per message of its asserts; the "line" is the
    notebook's cell number."""
    import yaml
    nb = json.loads(fileobj.read().decode("utf-8"))
    task = ""
    for number, cell in enumerate(nb["cells"], 1):
        source = "".join(cell["source"])
        if source.startswith("# BEGIN QUESTION"):
            task = (yaml.safe_load(source.split("\n", 1)[1]) or {}).get("name", "")
        if cell["cell_type"] != "code" or "# BEGIN TEST CONFIG" not in source:
            continue
        what = description(source)
        if what:
            yield number, None, what, [f"{task}: what this test case checks"]
        for _line, msgid, fields in messages(source):
            notes = [f"{task}: an assertion's message (what to fix)"]
            notes += [f"{{{i}}} = {src}" for i, src in enumerate(fields)]
            yield number, None, msgid, notes


def templates(examples) -> list[str]:
    """The msgids a failure of these examples (the zip's test code) may show."""
    return [msgid for source, _want in examples
            for _line, msgid, _fields in messages(source)]


# --------------------------------------------------------------- translation


def _segments(msgid: str) -> tuple[list[str], list[int]] | None:
    """The literal parts and the field numbers of a msgid (None: not ours)."""
    literals, fields, text = [], [], ""
    if not _parse(msgid):
        return None
    for literal, field, _spec, _conv in _parse(msgid):
        text += literal   # "{{" comes as a literal of its own
        if field is not None:
            if not field.isdigit():
                return None
            literals.append(_space(text))
            fields.append(int(field))
            text = ""
    return literals + [_space(text)], fields


def _space(text: str) -> str:
    return re.sub(r"\s+", " ", text)   # runner._short joins a message's whitespace


def match(msgid: str, text: str) -> dict[int, str] | None:
    """The values of the msgid's fields in `text`, or None when `text` is not the
    msgid with values filled in. A public failure cut at CUT characters matches
    the start of a msgid; the fields it lost read "..."."""
    parsed = _segments(msgid)
    if parsed is None:
        return None
    literals, fields = parsed
    text = _space(text)
    found = _whole(literals, fields, text)
    if found is None and len(text) >= CUT:
        found = _start(literals, fields, text)
    return found


def _whole(literals, fields, text) -> dict[int, str] | None:
    """Each field's text when `text` is the whole message (leftmost literals)."""
    if not fields:
        return {} if text == literals[0] else None
    if not text.startswith(literals[0]):
        return None
    values, pos = {}, len(literals[0])
    for i, field in enumerate(fields):
        following = literals[i + 1]
        if i == len(fields) - 1:
            end = len(text) - len(following)
            if end < pos or not text.endswith(following):
                return None
        else:
            end = text.find(following, pos)
            if end < 0:
                return None
        values[field] = text[pos:end]
        pos = end + len(following)
    return values


def _start(literals, fields, text) -> dict[int, str] | None:
    """Each field's text when `text` is the start of the message (cut short)."""
    values = {field: "..." for field in fields}
    if not (text.startswith(literals[0]) or literals[0].startswith(text)):
        return None
    pos = len(literals[0])
    for i, field in enumerate(fields):
        end = text.find(literals[i + 1], pos) if literals[i + 1] else -1
        if end < 0:
            values[field] = text[pos:] + "..."
            return values
        values[field], pos = text[pos:end], end + len(literals[i + 1])
    return values if literals[-1].startswith(text[pos:]) else None


def fill(msgstr: str, values: dict[int, str]) -> str | None:
    """msgstr with its fields replaced by `values`, as text (a value is never
    formatted again); None when msgstr names a field the msgid lacks."""
    out, parts = [], _parse(msgstr)
    if not parts:
        return None
    for literal, field, _spec, _conv in parts:
        out.append(literal)
        if field is not None:
            if not field.isdigit() or int(field) not in values:
                return None
            out.append(values[int(field)])
    return "".join(out)


def translate(text: str, examples, lang: str) -> str:
    """A failure's text ('AssertionError: <the message>') in `lang`, when its
    message is one of these examples' (else as it was)."""
    name, sep, message = text.partition(": ")
    if lang == "en" or not sep or not name.isidentifier():
        return text
    for msgid in templates(examples):
        values = match(msgid, message)
        out = values is not None and fill(_gettext(msgid, lang), values)
        if out:
            return f"{name}: {out}"
    return text


def describe(message: str, lang: str) -> str:
    """A case's description (its failure_message) in `lang`."""
    return message if lang == "en" or not message else _gettext(message, lang)


# --------------------------------------------------------------- the check


MAPPING = Path(__file__).with_name("lab_tests.cfg")


def extracted(labs: Path = LABS_LOCALE.parent) -> set[str]:
    """Every msgid of the masters' tests, as `make lab-tests-catalog` extracts them
    (Babel, with this module's method, mapped by lab_tests.cfg)."""
    from babel.messages.extract import extract_from_dir
    from babel.messages.frontend import parse_mapping_cfg
    with MAPPING.open() as f:
        method_map, options_map = parse_mapping_cfg(f)
    method_map = [(pattern, extract) for pattern, _method in method_map]
    return {message for _file, _line, message, _comments, _context
            in extract_from_dir(str(labs), method_map, options_map)}


def problems(labs: Path = LABS_LOCALE.parent,
             localedir: Path = LABS_LOCALE) -> list[str]:
    """What keeps lab_tests.po from matching the masters' tests: a message missing
    or stale, an entry empty or fuzzy, placeholders that differ, a .mo that is
    not the .po compiled. Empty when the catalog is complete and current."""
    from babel.messages.mofile import read_mo
    from babel.messages.pofile import read_po
    base = localedir / "zh_CN" / "LC_MESSAGES" / DOMAIN
    po_path, mo_path = base.with_suffix(".po"), base.with_suffix(".mo")
    if not po_path.exists() or not mo_path.exists():
        return [f"{base}.po/.mo missing: run make lab-tests-catalog"]
    with po_path.open("rb") as f:
        po = {m.id: m for m in read_po(f) if m.id}
    with mo_path.open("rb") as f:
        mo = {m.id: m.string for m in read_mo(f) if m.id}
    wanted = extracted(labs)
    found = [f"missing: {m!r} (make lab-tests-catalog, then translate it)"
             for m in sorted(wanted - po.keys())]
    found += [f"stale: {m!r} is no longer in a lab's tests"
              for m in sorted(po.keys() - wanted)]
    for msgid, m in sorted(po.items()):
        if m.fuzzy or not m.string:
            found.append(f"not translated or not reviewed: {msgid!r}")
        elif _numbers(m.string) != _numbers(msgid):
            found.append(f"placeholders differ: {msgid!r}")
    if {k: m.string for k, m in po.items() if not m.fuzzy} != mo:
        found.append(f"{mo_path.name} is not {po_path.name} compiled: run make "
                     "lab-tests-catalog")
    return found


def _numbers(text: str) -> list[int] | None:
    parsed = _segments(text)
    return sorted(parsed[1]) if parsed else None
