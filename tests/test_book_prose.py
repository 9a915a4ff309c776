"""The book's prose is held to its own outputs and its own glossary (issue 23).

Claims. A markdown cell that talks about an output (it says "above", "prints",
"shows", "faster", or gives a number with a unit) sits next to a *guard cell*: a
code cell, hidden on the site, that asserts what the sentence says, so a run where
the sentence became false fails nbval instead of shipping. A cell that only looks
like a claim (an introduction, an exercise) says why in its metadata,
``"graphopt": {"prose": "<why this states nothing about an output>"}``.

Terms. Every Chinese term in a chapter is a glossary entry's Chinese name, so one
concept has one name (核函数启动, never also 内核启动).
"""

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
CHAPTERS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
GUARD_HEADER = "# Checks that keep the prose true on every run"

# Words that point at an output, and numbers with a unit of something measured.
_POINTS_AT_OUTPUT = re.compile(
    r"\b(above|below|prints?|printed|shows?|shown|drawn|measured|the output|"
    r"the table|fewer|faster|slower)\b",
    re.IGNORECASE,
)
_MEASURED_NUMBER = re.compile(
    r"(?<![\w.`])\d[\d,.]*\s*(%|µs|ms|s\b|MB|MiB|GB|GiB|KiB|kB|bytes|x\b|×|"
    r"kernels?|ops|nodes|launches|accesses)"
)


def _prose(cell):
    """The cell's sentences: code, inline code and link targets removed."""
    text = "".join(cell["source"])
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def is_claim(cell):
    if cell["cell_type"] != "markdown":
        return False
    if cell.get("metadata", {}).get("graphopt", {}).get("prose"):
        return False
    text = _prose(cell)
    return bool(_POINTS_AT_OUTPUT.search(text) or _MEASURED_NUMBER.search(text))


def is_guard(cell):
    source = "".join(cell["source"])
    return (
        cell["cell_type"] == "code"
        and source.startswith(GUARD_HEADER)
        and "remove-cell" in cell.get("metadata", {}).get("tags", [])
        and re.search(r"^\s*assert\b", source, re.M) is not None
    )


def _neighbour_code(cells, i):
    """The code cells between the markdown cell before ``i`` and the one after."""
    around = []
    for step in (-1, 1):
        j = i + step
        while 0 <= j < len(cells) and cells[j]["cell_type"] == "code":
            around.append(cells[j])
            j += step
    return around


def unguarded_claims(path):
    cells = json.loads(path.read_text())["cells"]
    return [
        i
        for i, cell in enumerate(cells)
        if is_claim(cell) and not any(map(is_guard, _neighbour_code(cells, i)))
    ]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem[:2])
def test_every_claim_has_a_guard(path):
    bad = unguarded_claims(path)
    assert not bad, (
        f"{path.name}: markdown cells {bad} talk about an output but no guard cell "
        f"({GUARD_HEADER!r}, tagged remove-cell, with an assert) sits in the code "
        "next to them; add one, or say in the cell's metadata "
        '{"graphopt": {"prose": "..."}} why it states nothing about an output'
    )


def test_guard_cells_are_hidden_on_the_site():
    for path in CHAPTERS:
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and source.startswith(GUARD_HEADER):
                assert is_guard(cell), f"{path.name} cell {i}: tag it remove-cell"



# --- a guard asserts what its claim says -------------------------------------------
# A guard can hold and still say nothing: it finds a string in the library's source
# (the code contains a word; it may not do what the sentence says), accepts a range
# so wide that any run passes, calls two timings different without their spread, or
# checks that names start with a prefix. Each kind below was found guarding a claim
# it did not check.

_SOURCE_OF_CODE = re.compile(r"getsource\(")
_RANGE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*<=?\s*[^<>\n]+?<=?\s*(\d+(?:\.\d+)?)\b")
_RATIO_AGAINST_ONE = re.compile(
    r"^\s*assert\b[^\n]*\b\w*(speedup|ratio|gain|saving|faster|slower)\w*\b"
    r"\s*[<>]=?\s*1(?:\.0)?\b(?!\s*[\d.*/+-])", re.M | re.I)
_SPREAD = re.compile(r"below_noise|verdict|\.q1|\.q3|iqr|spread", re.I)
_ASSERT = re.compile(r"^\s*assert\b(.*)$", re.M)
_TEXT_CHECK = re.compile(r"""["'][^"']*["']\s+(not\s+)?in\s+[\w.\[\]"']+\s*(,|$|and|#)""")
_TIME_CLAIM = re.compile(r"\b(faster|slower|memory-bound|compute-bound|per element)\b",
                         re.I)


def weak_guard_reasons(source: str, claim: str = "") -> list[str]:
    """Why a guard cell's asserts do not check the claim next to it ([] if they do)."""
    reasons = []
    if _SOURCE_OF_CODE.search(source):
        reasons.append("it searches inspect.getsource text: assert what the code "
                       "does (run it), not which words it contains")
    for lo, hi in _RANGE.findall(source):
        if float(lo) > 0 and float(hi) / float(lo) >= 4:
            reasons.append(f"it accepts a {float(hi) / float(lo):.0f}-fold range "
                           f"({lo} to {hi}): assert the claim's own bound")
    if _RATIO_AGAINST_ONE.search(source) and not _SPREAD.search(source):
        reasons.append("it compares a ratio of times with 1 without their spread: "
                       "use Comparison.below_noise or verdict")
    asserts = [a.strip() for a in _ASSERT.findall(source)]
    if asserts and all("startswith(" in a for a in asserts):
        reasons.append("it only checks that names start with a prefix: assert the "
                       "count or value the prose states")
    if (_TIME_CLAIM.search(claim) and asserts
            and all(_TEXT_CHECK.search(a) for a in asserts)):
        reasons.append("the prose makes a claim about time and the guard only "
                       "searches text: assert on the measurement")
    return reasons


def weak_guards(path):
    """(cell index, reasons) of every guard that does not check its claim."""
    cells = json.loads(path.read_text())["cells"]
    found = []
    for i, cell in enumerate(cells):
        if not is_guard(cell):
            continue
        before = [c for c in cells[max(0, i - 3):i] if c["cell_type"] == "markdown"]
        claim = _prose(before[-1]) if before else ""
        reasons = weak_guard_reasons("".join(cell["source"]), claim)
        if reasons:
            found.append((i, reasons))
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem[:2])
def test_guards_assert_what_their_claims_say(path):
    weak = weak_guards(path)
    assert not weak, f"{path.name}: guards that do not check their claim: {weak}"


@pytest.mark.parametrize("source, claim", [
    # each of these once guarded a sentence in this book
    ("assert speedup > 1        # fused is faster", "fused is faster"),
    ("if cpu:\n    assert 0.25 < wrong.median / right.median < 4", "both time it"),
    ('library = inspect.getsource(mod)\nfor r in rules:\n    assert r in library',
     "the pass checks each rule"),
    ('assert kernels and all(k.startswith("cpp_fused_") for k in kernels)',
     "inductor fuses the chain into one kernel"),
    ('assert "EXP(" in kernel.source and "math.tanh(" in kernel.source',
     "the chain stops being memory-bound: transcendentals are slower"),
])
def test_the_weak_guard_check_rejects_each_kind(source, claim):
    assert weak_guard_reasons(source, claim)


@pytest.mark.parametrize("source, claim", [
    ("assert cmp.verdict('a', 'b').startswith('a ran')\nassert ratio > 1.5",
     "a ran faster"),
    ("assert before.kernels == 5 and after.kernels == 1", "5 kernels become 1"),
    ('assert kernel.source.count("a0 = in0[i]") == 2', "one load per element"),
    ("assert not cmp.below_noise('fused', 'eager') and gain > 1", "fused is faster"),
])
def test_the_weak_guard_check_accepts_real_checks(source, claim):
    assert not weak_guard_reasons(source, claim)

# --- one Chinese name per concept -------------------------------------------------

_HAN = r"[\u3400-\u9fff]"
_HAN_RUN = re.compile(rf"{_HAN}[\u3400-\u9fff·\-\w ]*{_HAN}|{_HAN}")
# a name that ends in Latin letters, as the community writes it: 图优化 Pass
_HAN_LATIN = re.compile(rf"{_HAN}[\u3400-\u9fff]* [A-Za-z]+")


def glossary_names():
    """Every Chinese name the glossary gives: the bold name and any "also" names."""
    names = set()
    for body in re.findall(r"^\*\*(.+?)\*\*", (BOOK / "glossary.md").read_text(), re.M):
        names.update(m.group(0).strip() for m in _HAN_RUN.finditer(body))
    for also in re.findall(r"also ([^)]*)\)", (BOOK / "glossary.md").read_text()):
        names.update(m.group(0).strip() for m in _HAN_RUN.finditer(also))
        names.update(m.group(0) for m in _HAN_LATIN.finditer(also))
    return names


def chinese_terms(path):
    """The Chinese strings a chapter's prose puts in brackets after an English term."""
    cells = json.loads(path.read_text())["cells"]
    text = "\n".join(_prose(c) for c in cells if c["cell_type"] == "markdown")
    terms = set()
    for bracket in re.findall(r"\(([^()]*)\)", text):
        for part in re.split(r"[,;，；]| also | or ", bracket):
            part = part.strip()
            if re.fullmatch(rf"{_HAN}[\u3400-\u9fff·\- A-Za-z]*", part):
                terms.add(part)
    return terms


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem[:2])
def test_chinese_terms_are_the_glossarys(path):
    unknown = sorted(chinese_terms(path) - glossary_names())
    assert not unknown, (
        f"{path.name} names {unknown} in Chinese, and the glossary does not: use the "
        "glossary's name for the concept, or add the term to book/glossary.md"
    )


# --- printed lines fit the column ---------------------------------------------------

# The site's code and output blocks hold 88 characters at 1280 px (the browser tests
# measure it); a longer printed line is cut at the column edge or scrolls sideways.
COLUMN = 88


def _printed_lines(cell):
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        rich = ("text/html", "image/svg+xml", "image/png",
                "application/vnd.jupyter.widget-view+json")
        if any(kind in data for kind in rich):
            continue  # laid out by the browser (a widget's text is only a fallback)
        text = output.get("text") or data.get("text/plain") or ""
        yield from "".join(text).splitlines()


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem[:2])
def test_printed_lines_fit_the_column(path):
    cells = json.loads(path.read_text())["cells"]
    long = [
        (i, line[:60])
        for i, cell in enumerate(cells)
        for line in _printed_lines(cell)
        if len(line) > COLUMN
    ]
    assert not long, (
        f"{path.name}: {len(long)} printed lines are longer than {COLUMN} characters "
        f"(cell, start): {long[:5]}; wrap them (textwrap) or print fewer columns"
    )


# --- the project's own bookkeeping stays out of the book ----------------------------

def test_the_book_never_cites_the_projects_issue_numbers():
    pages = [*BOOK.glob("*.md"), *BOOK.glob("*.ipynb"), *BOOK.glob("locales/*/*/*.po")]
    cited = [(p.name, m.group(0)) for p in pages
             for m in re.finditer(r"\bissues? #?\d+\b", p.read_text(), re.I)]
    assert not cited, f"internal issue numbers in the book: {cited[:5]}"
