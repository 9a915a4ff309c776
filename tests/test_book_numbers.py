"""A number in prose is a number the reader's run printed.

Every markdown cell of every `book/*.ipynb` is scanned for machine-dependent numbers:

- times with a unit:          `0.874 ms`, `47.983 ms`, `9-16 s`, `3 µs`
- speed-ups:                  `1.35x`, `2.5-3.5x`, `2×`
- bandwidth and throughput:   `20 GB/s`, `36 GiB/s`, `150 GFLOP/s`
- percentages:                `3-5 %`, `7%`, `-15.4 %`

Each one must be **backed**: some output of a code cell on the same page prints the
same number with the same kind of unit (a prose `7 %` is backed by a printed `7 %` or
`7.2%`: the prose may round what the output says, never more). A range (`1.5-2x`)
is never backed by outputs: it is a claim about many runs and must be declared. So the way to state a
measured result is to print it from a code cell as a sentence built from the
measurement (or bind it with myst-nb `glue`), not to type it.

The only exception is explicit and narrow: a markdown cell may declare exact strings
in its metadata, each with the reason it is allowed, e.g.

    "metadata": {"numbers": {"20-33 GB/s": "range seen on 2-core CPUs; the text
                 explains why it moves", "5 %": "the lecture notes' claim, checked below"}}

A declared string must occur verbatim in that cell (a stale declaration fails) and
its reason must be a sentence (at least 10 characters). Use it for ranges the text
explains and for claims the chapter quotes in order to check them; never for a
result of this run. Not scanned: URLs, link targets and HTML tags (`width: 100%`);
`3x3` (a shape) and `2 x 9` (a product) are not speed-ups.

Deterministic counts (nodes, bytes, kernels) are not checked here.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
CHAPTERS = sorted(BOOK.glob("*.ipynb"))

_NUM = r"[-−]?\d+(?:\.\d+)?"
_RANGE = rf"(?P<lo>{_NUM})(?:\s*(?:-|–|to)\s*(?P<hi>{_NUM}))?"
_TIME_UNITS = {"ns": 1e-9, "µs": 1e-6, "μs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0,
               "sec": 1.0, "seconds": 1.0, "second": 1.0, "milliseconds": 1e-3,
               "microseconds": 1e-6, "nanoseconds": 1e-9, "min": 60.0,
               "minutes": 60.0}
_RATE_UNITS = {"GB/s": 1e9, "GiB/s": 2 ** 30, "MB/s": 1e6, "MiB/s": 2 ** 20,
               "TB/s": 1e12, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "GFLOPS": 1e9,
               "TFLOPS": 1e12}
_BEFORE = r"(?<![\w.\-−])"  # not inside a word, a longer number or a name


def _alt(units) -> str:
    return "|".join(re.escape(u) for u in sorted(units, key=len, reverse=True))


PATTERNS = {
    "time": re.compile(rf"{_BEFORE}{_RANGE}\s*(?P<unit>{_alt(_TIME_UNITS)})(?![\w/])"),
    "rate": re.compile(rf"{_BEFORE}{_RANGE}\s*(?P<unit>{_alt(_RATE_UNITS)})(?!\w)"),
    "speed-up": re.compile(rf"{_BEFORE}{_RANGE}(?P<unit>[x×])(?![\w\d])"),
    "percent": re.compile(rf"{_BEFORE}{_RANGE}\s*(?P<unit>%)"),
}
_SCALE = {"time": _TIME_UNITS, "rate": _RATE_UNITS}


@dataclass(frozen=True)
class Claim:
    """One machine-dependent number found in prose."""

    cell: int
    kind: str
    text: str
    values: tuple[float, ...]  # in base units (seconds, bytes/s, ratio, percent)
    decimals: int  # digits after the point, how precisely the prose states it

    def __str__(self) -> str:
        return f"cell {self.cell}: {self.kind} {self.text!r}"


def _strip(markdown: str) -> str:
    """Drop what is not prose: link targets, URLs, HTML tags, HTML entities."""
    text = re.sub(r"\]\([^)]*\)", "]", markdown)
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"<[^>]+>", " ", text)
    return html.unescape(text)


def _value(s: str) -> float:
    return float(s.replace("−", "-"))


def _decimals(s: str) -> int:
    return len(s.split(".")[1]) if "." in s else 0


def find_numbers(text: str, cell: int = 0) -> list[Claim]:
    """Every machine-dependent number in `text` (prose or output)."""
    found = []
    for kind, pattern in PATTERNS.items():
        for m in pattern.finditer(_strip(text)):
            scale = _SCALE.get(kind, {}).get(m["unit"], 1.0)
            ends = [m["lo"]] + ([m["hi"]] if m["hi"] else [])
            values = tuple(_value(e) * scale for e in ends)
            found.append(Claim(cell, kind, m.group(0).strip(), values,
                               min(_decimals(e) for e in ends)))
    return found


def output_text(cell: dict) -> str:
    """All text a code cell printed or displayed (stream, plain, markdown, HTML)."""
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append("".join(out["text"]))
        data = out.get("data", {})
        for mime in ("text/plain", "text/markdown", "text/html"):
            if mime in data:
                parts.append("".join(data[mime]))
        if out.get("output_type") == "error":
            parts.append(out.get("evalue", ""))
    return "\n".join(parts)


def _backs(printed: Claim, value: float, decimals: int, kind: str) -> bool:
    if printed.kind != kind:
        return False
    for v in printed.values:
        if kind in _SCALE:  # compare in the prose's own unit and precision
            if value and abs(v - value) <= 0.5 * 10 ** -decimals * _unit_of(value):
                return True
        elif round(v, decimals) == round(value, decimals):
            return True
    return False


def _unit_of(value: float) -> float:
    """The scale the prose number was written in (for rounding tolerance)."""
    for scale in (1e12, 1e9, 1.0, 1e-3, 1e-6, 1e-9):
        if abs(value) >= scale:
            return scale
    return 1e-9


def declared(cell: dict, index: int) -> tuple[dict[str, str], list[str]]:
    """The cell's declared strings and the problems with the declaration."""
    numbers = cell.get("metadata", {}).get("numbers", {})
    text = "".join(cell["source"])
    problems = []
    if not isinstance(numbers, dict):
        return {}, [f"cell {index}: metadata 'numbers' must map string -> reason"]
    for s, reason in numbers.items():
        if s not in text:
            problems.append(f"cell {index}: declared {s!r} does not occur in the cell")
        if not isinstance(reason, str) or len(reason.strip()) < 10:
            problems.append(f"cell {index}: declared {s!r} needs a reason (a sentence)")
    return numbers, problems


def unbacked(nb: dict) -> list[str]:
    """Problems in one notebook: unbacked numbers and bad declarations."""
    cells = nb["cells"]
    printed = [c for i, cell in enumerate(cells) if cell["cell_type"] == "code"
               for c in find_numbers(output_text(cell), i)]
    problems = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        allowed, bad = declared(cell, i)
        problems += bad
        for claim in find_numbers("".join(cell["source"]), i):
            if any(claim.text in s for s in allowed):
                continue
            if len(claim.values) > 1:
                problems.append(f"{claim}: a range must be declared with its reason")
                continue
            if any(_backs(p, claim.values[0], claim.decimals, claim.kind)
                   for p in printed):
                continue
            problems.append(f"{claim}: no output on the page prints it")
    return problems


# ---------------------------------------------------------------- the scanner itself

def _nb(*cells):
    out = []
    for kind, body, *rest in cells:  # (kind, source[, output | declarations])
        cell = {"cell_type": kind, "source": [body], "metadata": {}}
        if kind == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout",
                                "text": [rest[0] if rest else ""]}]
        elif rest:
            cell["metadata"]["numbers"] = rest[0]
        out.append(cell)
    return {"cells": out}


def test_scanner_catches_the_issues_examples():
    nb = _nb(
        ("code", "...", "time saved: -15.4%\nfused 1.35x faster than eager, "
                        "2.34x than captured\nbaseline 0.874 ms; 7.0 % of the time"),
        ("markdown", "Folding ran 3-5 % faster."),
        ("markdown", "Fusion is 1.5-2x faster than eager, 2.5-3.5x than the graph."),
        ("markdown", "Folding saves 1-4 % of the time."),
        ("markdown", "The baseline takes 47.983 ms; after folding 0.177 ms (0.00x)."),
        ("markdown", "Copy runs at 20-33 GB/s here."),
    )
    problems = unbacked(nb)
    for text in ("'3-5 %'", "'1.5-2x'", "'2.5-3.5x'", "'1-4 %'", "'47.983 ms'",
                 "'0.177 ms'", "'0.00x'", "'20-33 GB/s'"):
        assert any(text in p for p in problems), (text, problems)
    assert len(problems) == 8


def test_scanner_accepts_backed_declared_and_non_numbers():
    nb = _nb(
        ("code", "...", "fused ran 1.35x faster; 7.2 % of the time; 0.874 ms; "
                        "copy 31.4 GB/s"),
        ("markdown", "Here fusion ran 1.35x faster, saving 7 % in 0.874 ms."),
        ("markdown", "Copy reached 31 GB/s. A 3x3 conv does 2 x 9 x C FLOPs; "
                     "<div style='width: 100%'>[x](https://e.org/5%20x)</div>"),
        ("markdown", "On 2-core CPUs copy moves 20-33 GB/s.",
         {"20-33 GB/s": "range seen on this class of machine, explained above"}),
    )
    assert unbacked(nb) == []


def test_prose_must_not_be_more_precise_than_the_output():
    nb = _nb(("code", "...", "7 % of the time"), ("markdown", "It saves 7.3 %."))
    assert unbacked(nb) == ["cell 1: percent '7.3 %': no output on the page prints it"]


def test_declarations_must_be_present_and_explained():
    nb = _nb(("markdown", "Copy moves 20-33 GB/s.", {"20-33 GB/s": "because"}),
             ("markdown", "No number here.", {"5 %": "the lecture notes' claim"}))
    problems = unbacked(nb)
    assert any("needs a reason" in p for p in problems)
    assert any("does not occur" in p for p in problems)


# ---------------------------------------------------------------- the book

@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_prose_number_is_printed_on_its_page(path):
    problems = unbacked(json.loads(path.read_text()))
    assert not problems, (f"{path.name}: machine-dependent numbers in prose that no "
                          "output backs (see this test's docstring):\n  "
                          + "\n  ".join(problems))
