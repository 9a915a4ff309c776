"""Labs 1, 2, 6 and 7 hold against the attacks that beat one process.

Each lab is graded once, sandboxed, with an instructor's secret, as a class of:
the solution; the untouched hand-out; the hand-out with an attack that reaches the
grader through the call stack (`stack`, at top level and inside an answer), that
empties the test cases it finds through the garbage collector (`gc_mutate`: the
tests' objects, without the stack) or that raises what it finds into its own
feedback (`exfiltrate`); the solution with one answer that returns its public
case's answer for every input (`lookup`); and the solution with the scratch lines
an honest notebook holds (`statements`). In one process (before the two), `stack`
and `gc_mutate` scored full marks with nothing solved and `exfiltrate` put the
hidden cases' code into its feedback. The tests run in a process that never runs
student code: each attack now earns what its honest part earns.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
grading = importlib.import_module("grading.classrun")
from grading import build as gbuild  # noqa: E402
from grading import sandbox  # noqa: E402
from grading.grade import Context  # noqa: E402

from lab_builds import built  # noqa: E402

attacks = importlib.import_module("test_grading_attacks")  # the same attacks
labs = importlib.import_module("test_labs")  # the same checks of a hand-out
EXFILTRATE, SCRATCH, STACK = attacks.EXFILTRATE, attacks.SCRATCH, attacks.STACK

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    sandbox.why_unavailable() is not None, reason=f"{sandbox.why_unavailable()}")]

# Empties every test case the collector can find (the tests' own objects).
GC_MUTATE = """
    import gc
    for obj in gc.get_objects():
        if isinstance(obj, dict) and "examples" in obj and "hidden" in obj:
            obj["examples"][:] = []
            obj["hidden"] = False
"""
# lab: (the answer the attacks run inside, the task of `lookup`, the answer it
# replaces, its code)
LABS = {
    1: ("op_names", "task_1_1", "op_names", "_public = op_names(model, *inputs)\n\n\n"
        "def op_names(model, *inputs):\n    return list(_public)\n"),
    2: ("capture_both", "task_2_2", "try_capture", "_public = try_capture(Plain(), example)\n\n\n"
        "def try_capture(model, *inputs):\n    return dict(_public)\n"),
    6: ("kernel_source", "task_6_1", "kernel_source", "_public = kernel_source(gm_chain)\n\n\n"
        "def kernel_source(gm, *args, **kwargs):\n    return _public\n"),
    7: ("between", "task_7_3", "verdict", "def verdict(times, before, after):\n"
        "    return 'faster'  # the public case's answer\n"),
}
# No hand-in here is meant to time out: a case gets the product's default. Lab 7's
# case 7.3 #3 times ResNet-18's pipeline through the grader's wire: 15-25 s alone
# on a slower 2-core machine, past 60 s beside CI's other work (2026-12-07).
CASE_TIMEOUT, CELL_TIMEOUT = Context.case_timeout, 90


def _lost(r) -> str:
    """Each lost case with its reason, then the notes, as one string: pytest cuts
    the repr of any other message to 240 characters (a CI run showed the case and
    cut its reason)."""
    return "\n".join([f"{label}: {why}" for label, why in r.why.items() if why] +
                     [f"note: {n}" for n in r.notes])


def _code_index(nb, needle):
    return next(i for i, c in enumerate(nb.cells)
                if c.cell_type == "code" and needle in c.source)


def _inside(nb, name, line):
    """`line` as the first statement of the answer `name` (after its docstring)."""
    i = _code_index(nb, f"def {name}(")
    lines = nb.cells[i].source.split("\n")
    fn = next(n for n in ast.parse(nb.cells[i].source).body
              if isinstance(n, ast.FunctionDef) and n.name == name)
    lines.insert(fn.body[0].end_lineno, f"    {line}")
    nb.cells[i].source = "\n".join(lines)
    return nb


def _attacked(path, code, name, where):
    nb = nbformat.read(path, as_version=4)
    body = textwrap.indent(textwrap.dedent(code).strip(), " " * 8)
    src = ("def _attack():\n    try:\n" + body + "\n    except Exception as e:\n"
           "        print('attack failed:', e)\n\n\n_ = _attack()\n")
    nb.cells.insert(_code_index(nb, "import graphopt") + 1,
                    nbformat.v4.new_code_cell(src))
    return _inside(nb, name, "_attack()") if where == "call" else nb


def _after_answer(path, name, code):
    """The solution with `code` in a cell right after the one that defines `name`."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(_code_index(nb, f"def {name}(") + 1,
                    nbformat.v4.new_code_cell(code))
    return nb


def _class(lab, rel, klass):
    name, _, answer, lookup = LABS[lab]
    shutil.copy(rel.solution, klass / "solution.ipynb")
    shutil.copy(rel.student, klass / "untouched.ipynb")
    zh = rel.student.with_name(f"{rel.student.stem}_zh.ipynb")
    if zh.exists():  # the hand-out built with LANG=zh
        shutil.copy(zh, klass / "untouched_zh.ipynb")
    for attack, code, wheres in (("stack", STACK, ("top", "call")),
                                 ("gc_mutate", GC_MUTATE, ("call",)),
                                 ("exfiltrate", EXFILTRATE, ("call",))):
        for where in wheres:
            nbformat.write(_attacked(rel.student, code, name, where),
                           klass / f"{attack}-{where}.ipynb")
    nbformat.write(_after_answer(rel.solution, answer, lookup), klass / "lookup.ipynb")
    nbformat.write(_after_answer(rel.solution, name, SCRATCH),
                   klass / "statements.ipynb")


@pytest.fixture(scope="module", params=sorted(LABS), ids=lambda lab: f"lab{lab}")
def run(request, tmp_path_factory):
    lab = request.param
    base = tmp_path_factory.mktemp(f"attacks{lab}")
    dist = base / "dist"
    built([lab], dist)  # every lab built once per run, shared
    rel = gbuild.release(lab, dist)
    klass = base / "class"
    klass.mkdir()
    _class(lab, rel, klass)
    secret = base / "secret"
    secret.write_bytes(b"an instructor's secret, not in the repository")
    results = grading.grade(lab, klass, out=base / "out", timeout=240, workers=2,
                            dist=dist, secret=secret, case_timeout=CASE_TIMEOUT,
                            cell_timeout=CELL_TIMEOUT)
    run_dir = (base / "out" / gbuild.lab_name(lab) / "latest").resolve()
    return dict(lab=lab, results={r.student: r for r in results}, run_dir=run_dir,
                cases=grading.Context.for_lab(lab, dist, base / "logs").cases)


def test_the_solution_scores_full_marks_and_the_hand_out_zero(run):
    """The untouched release's checks of test_labs (it grades these labs' untouched
    release only here)."""
    r, untouched = (run["results"][f"{n}.ipynb"] for n in ("solution", "untouched"))
    assert r.total == r.possible > 0, _lost(r)
    assert untouched.total == 0 and all(untouched.why.values()), untouched.why
    labs.untouched_scores_zero(untouched, r)


@pytest.mark.parametrize("name", ["stack-top", "stack-call", "gc_mutate-call",
                                  "exfiltrate-call"])
def test_an_empty_hand_in_that_attacks_the_tests_scores_zero(run, name):
    """One process: `stack` and `gc_mutate` emptied the cases (full marks)."""
    r = run["results"][f"{name}.ipynb"]
    assert r.total == 0, (r.why, r.review)
    assert all(r.why.values()), r.why


def test_a_hard_coded_answer_loses_every_hidden_case_of_its_task(run):
    """The hidden cases are drawn from the secret: the public answer fails them."""
    task = LABS[run["lab"]][1]
    r = run["results"]["lookup.ipynb"]
    label = f"Task {task.split('_')[1]}.{task.split('_')[2]} #"
    hidden = {k: v for k, v in r.cases.items() if k.startswith(label)
              and " hidden" in k}
    assert hidden and not any(hidden.values()), r.cases
    assert r.total < r.possible
    assert all(r.why[k] for k in hidden), r.why


def test_honest_scratch_lines_run_and_what_is_not_run_is_named(run):
    r = run["results"]["statements.ipynb"]
    assert r.total == r.possible, _lost(r)
    notes = "\n".join(r.notes)
    assert "IPython magic" in notes and "os._exit" in notes, notes
    page = next((run["run_dir"] / "feedback").glob("statements*.md")).read_text()
    assert "os._exit" in page and "IPython magic" in page


def test_no_feedback_file_holds_a_hidden_case(run):
    """One process: `exfiltrate` raised the hidden cases' code into its reasons."""
    attacks._no_hidden_in_feedback(run)
    r = run["results"]["exfiltrate-call.ipynb"]
    hidden = [why for label, why in r.why.items() if " hidden" in label]
    assert hidden and not any("LEAK" in why for why in hidden), hidden


def test_a_chinese_hand_in_gets_its_feedback_in_chinese(run):
    """The grader's words (headings, its reasons) and the tests' own (what each
    case checks, from the labs' catalog) in the hand-in's language."""
    if "untouched_zh.ipynb" not in run["results"]:
        pytest.skip("this lab has no Chinese hand-out")
    r = run["results"]["untouched_zh.ipynb"]
    assert r.lang == "zh" and r.total == 0, (r.lang, r.why)
    page = (run["run_dir"] / "feedback" / "untouched_zh.md").read_text()
    assert f"实验 {run['lab']}：untouched_zh.ipynb 的反馈" in page, page[:300]
    assert "未通过" in page and "问题所在" in page and "隐藏测试" in page, page
    failed = [line for line in page.splitlines() if line.startswith("- 未通过")]
    assert failed and all(re.search(r"#\d+：.*[\u4e00-\u9fff]", line)
                          for line in failed), failed
    english = (run["run_dir"] / "feedback" / "untouched.md").read_text()
    assert "FAILED" in english and "未通过" not in english
