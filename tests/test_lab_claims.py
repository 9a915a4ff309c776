"""What the lab hand-outs say about the library, the book and the grader holds.

The chapters keep their prose true with guard cells (tests/test_book_prose.py); the
hand-outs are held the same way, here, from the master notebooks and their Chinese
catalogs:

- every `graphopt.<name>` a hand-out mentions exists, and so does every
  "`name` (from `graphopt.module`)";
- every link to a chapter points to a chapter whose title is the link's text, in
  English and in Chinese (the book's catalogs), after "chapter N" of that number;
- what the grader forbids in a lab or a task is named in that lab or task's text;
- each hand-out says what the grader reads, and the grader does what it says;
- the chapter's steps a hand-out lists are the chapter's own;
- lab 1's levels count from 0, as chapter 1, the glossary and `graphopt.levels` do:
  the lab's reference solution and the comparison the task text gives agree with
  `graphopt.levels` on several graphs, and the task's tests name an off-by-one as one.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.fx as fx

import graphopt

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(ROOT / "tools"))
from grading import answers, build  # noqa: E402
from i18n import catalog, labs  # noqa: E402

LABS = sorted(build.LABS)
_NAME = re.compile(r"\bgraphopt(?:\.[A-Za-z_]\w*)+")
_FROM = re.compile(r"`(\w+)`\s+\(from\s+`(graphopt(?:\.\w+)*)`\)")
_LINK = re.compile(r"\[([^\]]+)\]\((0\d_\w+)\.ipynb\)")
_EN_CHAPTER_LINK = re.compile(r"chapter\s+(\d),?\s*\[[^\]]+\]\((0\d)_\w+\.ipynb\)")
_ZH_CHAPTER_LINK = re.compile(r"第 (\d) 章\[[^\]]+\]\((0\d)_\w+\.ipynb\)")


def _cells(lab: int, kind: str) -> list[str]:
    nb = json.loads(build.master(lab).read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def _markdown(lab: int) -> str:
    return "\n\n".join(_cells(lab, "markdown"))


def _resolve(dotted: str):
    """The object `dotted` names (an attribute or a submodule), or None."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 2):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                return None
    return obj


def _missing(text: str) -> list[str]:
    names = {m.rstrip(".") for m in _NAME.findall(text)}
    gone = [n for n in sorted(names) if _resolve(n) is None]
    gone += [f"{name} (from {module})" for name, module in _FROM.findall(text)
             if not hasattr(_resolve(module), name)]
    return gone


@pytest.mark.parametrize("lab", LABS)
def test_every_graphopt_name_a_hand_out_mentions_exists(lab):
    text = "\n".join(_cells(lab, "markdown") + _cells(lab, "code"))
    assert _NAME.search(text), "a hand-out that never names graphopt?"
    assert not _missing(text), _missing(text)


def test_the_name_check_catches_a_name_that_is_gone():
    text = ("`graphopt.levels(gm)`, `graphopt.passes.legality`, `graphopt.no_such_pass`,"
            " `is_impure` (from `graphopt.ops`), `is_pure` (from `graphopt.ops`)")
    assert _missing(text) == ["graphopt.no_such_pass", "is_pure (from graphopt.ops)"]


def _title(chapter: str) -> str:
    """A chapter's title: its first heading, without the chapter's number."""
    nb = json.loads((BOOK / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    first = "".join(nb["cells"][0]["source"]).splitlines()[0]
    return re.sub(r"^#\s+\d+\.\s*", "", first)


def _zh_title(chapter: str) -> str:
    """The chapter's title as the Chinese edition's catalog translates it."""
    path = BOOK / "locales" / catalog.LOCALE / "LC_MESSAGES" / f"{chapter}.po"
    heading = re.sub(r"^#\s+", "", "".join(json.loads(
        (BOOK / f"{chapter}.ipynb").read_text(encoding="utf-8"))["cells"][0]["source"]
        ).splitlines()[0])
    zh = catalog.reviewed(catalog.read(path))[heading]
    return re.sub(r"^\d+\\?\.\s*", "", zh)


def _zh_entries(lab: int) -> list[str]:
    entries = catalog.reviewed(catalog.read(labs.catalog_path(build.LABS[lab])))
    return [zh for en, zh in entries.items() if _LINK.search(en)]


@pytest.mark.parametrize("lab", LABS)
def test_chapter_links_carry_the_chapters_titles(lab):
    english = _LINK.findall(_markdown(lab))
    assert english, "the hand-out links no chapter"
    chinese = [link for zh in _zh_entries(lab) for link in _LINK.findall(zh)]
    assert sorted(c for _, c in chinese) == sorted(c for _, c in english)
    for text, chapter in english:
        assert (BOOK / f"{chapter}.ipynb").exists(), chapter
        assert text == _title(chapter), (text, _title(chapter))
    for text, chapter in chinese:
        assert text == _zh_title(chapter), (text, _zh_title(chapter))


@pytest.mark.parametrize("lab", LABS)
def test_chapter_numbers_before_links_are_the_linked_chapters(lab):
    pairs = _EN_CHAPTER_LINK.findall(_markdown(lab))
    pairs += [p for zh in _zh_entries(lab) for p in _ZH_CHAPTER_LINK.findall(zh)]
    assert pairs
    assert all(int(number) == int(file) for number, file in pairs), pairs


def _module_of_another(name: str, names) -> bool:
    """`graphopt.optimizer` beside `graphopt.optimize`: the module goes with it, and
    so does the module whose functions it runs (the stage driver, `graphopt.stages`):
    banning the name a hand-out gives bans what runs behind it."""
    for other in names:
        module = getattr(_resolve(other), "__module__", None) if other != name else None
        if module == name:
            return True
        if module and any(getattr(v, "__module__", None) == name
                          for v in vars(importlib.import_module(module)).values()):
            return True
    return False


def _named(name: str, text: str) -> bool:
    return name in text or f"`{name.rsplit('.', 1)[-1]}`" in text


@pytest.mark.parametrize("lab", LABS)
def test_what_the_grader_forbids_is_named_in_the_text(lab):
    names = build.FORBIDDEN.get(lab, ())
    text = _markdown(lab)
    unnamed = [n for n in names if not _named(n, text)
               and not _module_of_another(n, names)]
    assert not unnamed, f"lab {lab} forbids {unnamed} without saying so"
    for task, banned in build.FORBIDDEN_IN.get(lab, {}).items():
        header = f"## {task.replace('task_', 'Task ').replace('_', '.', 1)}"
        cell = next(c for c in _cells(lab, "markdown") if c.startswith(header))
        unnamed = [n for n in banned if not _named(n, cell)
                   and not _module_of_another(n, banned)]
        assert not unnamed, f"{header} forbids {unnamed} without saying so"


@pytest.mark.parametrize("lab", LABS)
def test_hand_out_says_what_the_grader_reads(lab):
    text = _markdown(lab)
    flat = " ".join(text.split())
    assert "**What the grader reads.**" in flat
    assert "`## Task N.M` header" in flat and "do not rename your answers" in flat
    headers = answers._TASK_HEADER.findall(text)
    assert headers and all(int(a) == lab for a, _ in headers), headers


def test_the_grader_does_what_the_hand_outs_say():
    """Headers find tasks; every statement runs but otter's `grader` and IPython's
    magics (tools/grading/answers.py); the hand-out's own cells are the tests'."""
    assert answers._TASK_HEADER.findall("## Task 1.4: levels\n## Task 1.5") == [
        ("1", "4"), ("1", "5")]
    assert answers._TASK_HEADER.findall("Task 1.4 (no header)\n### Other") == []
    runs = "import torch\ndef f(): pass\nx = 1\nprint(levels(gm))\nhelpers.append(1)"
    assert [answers._drop_reason(s) for s in ast.parse(runs).body] == [None] * 5
    assert answers._drop_reason(ast.parse("grader.check('task_1_4')").body[0])
    from IPython.core.inputtransformer2 import TransformerManager
    magic = TransformerManager().transform_cell("%time levels(gm)")
    assert answers._drop_reason(ast.parse(magic).body[0])


def _steps(text: str) -> tuple[str, list[str]] | None:
    found = re.search(r"chapter's (\w+) steps \(([^)]*)\)", " ".join(text.split()))
    return found and (found[1], [s.strip() for s in found[2].split(",")])


def test_lab_5_lists_chapter_5s_steps():
    intro = "".join(json.loads((BOOK / "05_writing_a_pass.ipynb").read_text(
        encoding="utf-8"))["cells"][0]["source"])
    sentence = re.search(r"in\s+the same (\w+) steps every graph optimiser follows:"
                         r"(.*?)\.\s", intro, re.S)
    chapter = [s.replace("\n", " ") for s in re.findall(r"\*\*([^*]+)\*\*",
                                                         sentence[2])]
    count, steps = _steps(_markdown(5))
    assert (count, steps) == (sentence[1], chapter)
    assert ["one", "two", "three", "four", "five", "six"][len(steps) - 1] == count
    for lab in LABS:  # no other hand-out miscounts a chapter's steps
        listed = _steps(_markdown(lab))
        assert listed is None or listed == (count, steps), (lab, listed)


# ------------------------------------------------------------- lab 1: the levels

def _lab1_namespace() -> dict:
    """The lab's setup cell and its reference `levels`, run as the lab runs them."""
    code = _cells(1, "code")
    ns: dict = {}
    exec(compile(code[0], "<lab 1 setup>", "exec"), ns)
    exec(compile(next(c for c in code if c.startswith("def levels(gm):")),
                 "<lab 1 solution>", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def lab1():
    return _lab1_namespace()


def _as_dict_like_the_task_says(gm) -> dict[str, int]:
    """The comparison Task 1.4's text gives, evaluated as written there."""
    cell = next(c for c in _cells(1, "markdown") if c.startswith("## Task 1.4"))
    spans = [s for s in re.findall(r"`([^`]+)`", cell)
             if "graphopt.levels(gm)" in s and s.startswith("{")]
    assert len(spans) == 1, spans
    return eval(spans[0], {"graphopt": graphopt, "gm": gm})


def _graphs():
    def join(x, y):
        return x.relu() + y.exp()

    def branches(x, y):
        return (x.relu() + y.sin().cos()) * x.exp()

    def chunked(x):
        a, b = x.chunk(2)
        return (a - b).relu(), a * 2

    x4 = torch.randn(4)
    yield "seed block (aten)", graphopt.capture(
        *_example("seed_conv_block"), level="aten")
    yield "join (module)", graphopt.capture(join, x4, x4, level="module")
    yield "branches (module)", graphopt.capture(branches, x4, x4, level="module")
    yield "chunk, two outputs (aten)", graphopt.capture(chunked, x4, level="aten")
    yield "Linear+ReLU with _guards_fn (aten)", graphopt.capture(
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
        torch.randn(2, 4), level="aten")
    yield "Transformer block (aten)", graphopt.capture(
        *_example("transformer_block"), level="aten")
    yield "small ResNet (module)", graphopt.capture(
        *_example("small_resnet"), level="module")


def _example(name):
    torch.manual_seed(0)
    model, inputs = graphopt.models.example(name)
    return (model.eval(), *inputs)


def _library(gm) -> dict[str, int]:
    return {n.name: i for i, level in enumerate(graphopt.levels(gm)) for n in level}


def test_lab_1_levels_agree_with_graphopt_levels(lab1):
    for label, gm in _graphs():
        assert isinstance(gm, fx.GraphModule)
        mine, library = lab1["levels"](gm), _library(gm)
        assert mine == library, label
        assert _as_dict_like_the_task_says(gm) == library, label
        assert min(library.values()) == 0 and "_guards_fn" not in library, label
        widths = [len(level) for level in graphopt.levels(gm)]
        assert all(widths), label  # no empty level: each is one more than the last


def test_the_book_counts_levels_from_0():
    glossary = (BOOK / "glossary.md").read_text(encoding="utf-8")
    entry = glossary.split("### Topological level", 1)[1].split("###", 1)[0]
    assert "on level 0" in " ".join(entry.split())
    chapter = json.loads((BOOK / "01_graphs_and_operators.ipynb").read_text(
        encoding="utf-8"))
    prose = " ".join("".join(c["source"]) for c in chapter["cells"]
                     if c["cell_type"] == "markdown")
    assert "level 0" in prose
    task = next(c for c in _cells(1, "markdown") if c.startswith("## Task 1.4"))
    assert "counted from 0" in task and "level 0" in task


def _task_1_4_tests() -> list[str]:
    code = _cells(1, "code")
    return [c for c in code if "BEGIN TEST CONFIG" in c and "levels(" in c]


def _run_tests(ns: dict, levels) -> list[str | None]:
    """Each Task 1.4 test case run on `levels`: None when it passes, else its
    assertion's message."""
    out = []
    for source in _task_1_4_tests():
        env = dict(ns, levels=levels)
        try:
            exec(compile(source, "<Task 1.4 test>", "exec"), env)
            out.append(None)
        except AssertionError as e:
            out.append(str(e))
    return out


def test_lab_1_tests_pass_the_solution_and_name_an_off_by_one(lab1):
    tests = _task_1_4_tests()
    assert len(tests) == 4 and sum("hidden: true" in t for t in tests) == 1
    assert _run_tests(lab1, lab1["levels"]) == [None] * 4

    def from_one(gm):  # the old hand-out's convention, or a learner's slip
        return {k: v + 1 for k, v in lab1["levels"](gm).items()}

    failures = _run_tests(lab1, from_one)
    assert all(f and f.startswith("off by one") for f in failures), failures

    def graph_order(gm):  # the mistake the hidden case's other message is for
        return {k: i for i, k in enumerate(lab1["levels"](gm))}

    hidden = _run_tests(lab1, graph_order)[-1]
    assert hidden and "off by one" not in hidden and "graph order" in hidden, hidden


def _teaching_rows() -> dict[int, list[str]]:
    """The teaching guide's table of lab costs: {lab: its cells}."""
    text = (BOOK / "teaching.md").read_text(encoding="utf-8")
    part = text.split("## How long the labs take", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].isdigit():
            rows[int(cells[0])] = cells
    return rows


def test_teaching_guide_lab_costs_are_the_measured_ones():
    """Tasks and lines of the solution as the masters have them, and the run time
    as `python -m tools.grading.labtimes` measured it (benchmarks/results/labs.md)."""
    from grading import labtimes

    rows = _teaching_rows()
    assert sorted(rows) == list(range(1, 8)), rows
    measured = {}
    for line in labtimes.OUT.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].isdigit():
            measured[int(cells[0])] = cells
    for lab, cells in rows.items():
        lines = labtimes.solution_lines(lab)
        assert int(cells[1]) == len(lines), f"lab {lab}: {len(lines)} tasks"
        assert int(cells[2]) == sum(lines.values()), f"lab {lab}: {lines}"
        seconds = float(measured[lab][3])
        assert cells[4] == f"{seconds:.0f} s", f"lab {lab}: measured {seconds} s"
