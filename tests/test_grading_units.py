"""The grader's reading of a hand-in, without a sandbox: fast checks of each rule."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from grading import answers, build, classrun, sandbox  # noqa: E402

NAMES = {"task_2_1": {"fold_constants", "evaluate"},
         "task_2_2": {"eliminate_dead_code"}}
FORBIDDEN = build.FORBIDDEN[3]  # the lab these two tasks come from


def _nb(tmp_path, *cells, tags=False):
    nb = nbformat.v4.new_notebook()
    for source in cells:
        if source.startswith("## "):
            nb.cells.append(nbformat.v4.new_markdown_cell(source))
            continue
        cell = nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = ["otter_answer_cell"]
        nb.cells.append(cell)
    path = tmp_path / "sub.ipynb"
    nbformat.write(nb, path)
    return path


def test_every_statement_runs_except_otters_and_magics_which_are_named(tmp_path):
    """The hand-in runs in a process of its own: a patch, a bare call or a rebound
    builtin reaches nothing of the tests, so it runs (an honest `helpers.extend`
    must); otter's lines and IPython magics cannot run, and each is named."""
    path = _nb(tmp_path,
               "# Initialize Otter\nimport otter\n"
               "grader = otter.Notebook('lab2.ipynb')",
               "import doctest\nimport torch\n"
               "doctest.DocTestRunner.summarize = lambda *a: (0, 0)\n"
               "isinstance = lambda *a: True\n"
               "helpers = []\nhelpers.extend([len])\n"
               "print('shown')\n%time y = 1\n_ = grader.check('task_2_1')\n"
               "def fold_constants(gm):\n    return gm\n",
               'grader.check("task_2_1")')
    sub = answers.read_submission(path, NAMES)
    assert len(sub.cells) == 1  # otter's init and check cells are not run
    code = sub.cells[0].source
    for kept in ("summarize", "isinstance", "helpers.extend", "print(",
                 "def fold_constants"):
        assert kept in code, kept
    assert "get_ipython" not in code and "grader" not in code
    assert sub.cells[0].dropped == [
        "line 8: an IPython magic (% or !), which runs only in Jupyter",
        "line 9: uses otter's grader (the grader runs the tests itself)"]
    assert sub.cells[0].task == "task_2_1"
    assert sub.warnings and "no otter metadata" in sub.warnings[0]
    # kept lines keep their line numbers: tracebacks point into the notebook's cell
    assert code.splitlines().index("def fold_constants(gm):") == 9


def test_a_notebook_of_another_lab_is_named_as_such(tmp_path):
    path = _nb(tmp_path, "## Task 1.2: classify", "def classify(node):\n    return 0")
    sub = answers.read_submission(path, NAMES)
    why = answers.wrong_lab(sub, NAMES, 2)
    assert "this is lab 1's notebook, not lab 2's" in why and "fold_constants" in why
    ours = answers.read_submission(_nb(tmp_path, "def fold_constants(gm):\n    ..."),
                                   NAMES)
    assert answers.wrong_lab(ours, NAMES, 2) == ""


def test_syntax_error_names_its_cell_and_line_and_the_rest_is_kept(tmp_path):
    path = _nb(tmp_path, "x = 1", "def eliminate_dead_code(gm)\n    return gm",
               "%timeit x + 1\ny = 2", tags=True)
    sub = answers.read_submission(path, NAMES)
    assert sub.problems == ["syntax error in cell 2 line 1: expected ':'"]
    assert [c.label for c in sub.cells] == ["<cell 1>", "<cell 3>"]
    assert "y = 2" in sub.cells[1].source and "timeit" not in sub.cells[1].source
    assert not sub.warnings


@pytest.mark.parametrize("cells, task", [
    (["from graphopt.passes import eliminate_dead_code"], "task_2_2"),
    (["## Task 2.1: folding", "import graphopt\n\ndef fold_constants(gm):\n"
      "    return graphopt.passes.fold_constants(gm)"], "task_2_1"),
    (["from graphopt import passes as p", "## Task 2.2: dead code",
      "def eliminate_dead_code(gm):\n    return p.eliminate_dead_code(gm)"],
     "task_2_2"),
    (["def fold_constants(gm):\n    import importlib\n"
      "    return importlib.import_module('graphopt.optimize')(gm)"], "task_2_1"),
    # graphopt.optimize's own module (issue 22): not a prefix of graphopt.optimize.
    (["from graphopt.optimizer import optimize",
      "def fold_constants(gm):\n    return optimize(gm).module"], "task_2_1"),
    (["from graphopt import optimizer", "## Task 2.2: dead code",
      "def eliminate_dead_code(gm):\n"
      "    return optimizer.optimize(gm, passes=['eliminate_dead_code']).module"],
     "task_2_2"),
])
def test_forbidden_code_is_charged_to_the_task_it_bypasses(tmp_path, cells, task):
    sub = answers.read_submission(_nb(tmp_path, *cells), NAMES, FORBIDDEN)
    assert set(sub.forbidden) == {task}, sub.forbidden


# Run in a child process: the guard replaces library functions by spies for good.
_SPIED = """
import importlib, sys
folder, banned = sys.argv[1], sys.argv[2:]
del sys.argv[1:]
sys.path.insert(0, folder)
import student as runner  # the hand-in's process records the calls
import torch.fx as fx
runner.guard_forbidden(sorted(banned))  # as student.main does
gm = fx.symbolic_trace(lambda x: (x + 1).relu())
for code in ("import graphopt\\ngraphopt.optimize(gm, stats=False)",
             "from graphopt.optimizer import optimize\\noptimize(gm, stats=False)",
             "importlib.import_module('graphopt.' + 'optimizer').optimize(gm)",
             "from graphopt.stages import run_stages\\n"
             "run_stages(gm, passes=['eliminate_dead_code'])"):
    runner.USED.clear()
    exec(compile(code, "<cell 1>", "exec"), {"gm": gm, "importlib": importlib})
    print(sorted(u.split(" (")[0] for u in runner.USED))
"""


def test_the_runner_notes_every_road_to_graphopt_optimize():
    """The ban holds at run time, however the hand-in reaches the pipeline: the
    lazy name, its module graphopt.optimizer (which runs its own table of passes,
    not the spied functions), a name built at run time, the stage driver."""
    out = subprocess.run(
        [sys.executable, "-c", _SPIED, str(ROOT / "tools" / "grading"), *FORBIDDEN],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:4] == [
        "['graphopt.optimize']", "['graphopt.optimizer']",
        "['graphopt.optimizer']", "['graphopt.stages']"], out.stdout


def test_graphopt_itself_is_allowed(tmp_path):
    path = _nb(tmp_path, "import graphopt\nimport graphopt.ops\n"
               "def fold_constants(gm):\n    return graphopt.capture(gm)")
    assert answers.read_submission(path, NAMES, FORBIDDEN).forbidden == {}


SCOPED = {"task_1_3": ("graphopt.run", "graphopt.interpret")}
BYTES = {"task_1_3": {"predict_bytes"}, "task_1_4": {"levels"}}


@pytest.mark.parametrize("cells, charged", [
    # the answer runs the graph: Task 1.3 loses its points
    (["## Task 1.3: bytes", "import graphopt\n\ndef predict_bytes(gm, fused=False):\n"
      "    return graphopt.run(gm, *gm.example).bytes_moved"], {"task_1_3"}),
    (["from graphopt.interpret import Profiler as P",
      "def predict_bytes(gm, fused=False):\n    return P(gm).run()"], {"task_1_3"}),
    # a scratch cell under the task checks the answer with it: allowed
    (["## Task 1.3: bytes", "def predict_bytes(gm, fused=False):\n    return 0",
      "assert predict_bytes(g) == graphopt.run(g, x).bytes_moved"], set()),
    # another task may use it
    (["def levels(gm):\n    graphopt.run(gm)\n    return {}"], set()),
])
def test_a_task_scoped_ban_reads_only_that_tasks_answers(tmp_path, cells, charged):
    """FORBIDDEN_IN: Task 1.3's formula may not run the graph; the rest of lab 1 may."""
    sub = answers.read_submission(_nb(tmp_path, *cells), BYTES, (), SCOPED)
    assert set(sub.forbidden_in) == charged, sub.forbidden_in
    assert sub.forbidden == {}


def test_hidden_inputs_follow_the_instructors_secret(tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    secret.write_bytes(b"a" * 32)
    assert classrun._secret(secret) == b"a" * 32
    monkeypatch.setenv("GRADER_SECRET", str(secret))
    assert classrun._secret(None) == b"a" * 32
    secret.write_bytes(b"short")
    with pytest.raises(SystemExit, match="too short"):
        classrun._secret(secret)
    monkeypatch.delenv("GRADER_SECRET")
    assert classrun._secret(None) is None


def test_sandbox_command_mounts_no_class_folder_and_drops_privileges(tmp_path):
    cmd = sandbox.command(["python", "x.py"], uid=61003, limits=sandbox.Limits(),
                          env={"HOME": "/tmp"})
    text = " ".join(cmd)
    assert {"--unshare-net", "--unshare-pid", "--die-with-parent"} <= set(cmd)
    assert "--ro-bind / /" not in text and str(ROOT / "labs") not in text
    assert "--nproc=64" in text and "--as=" in text and "--cpu=" in text
    assert ("--reuid=61003" in text) or ("--uid 65534" in text)
    assert cmd[-2:] == ["python", "x.py"]


def test_cell_order_traps_are_named_for_the_student(tmp_path):
    path = _nb(tmp_path,
               "def fold_constants(gm):\n    return helper(gm)",
               "x = helper(1)",
               "def helper(gm):\n    return gm",
               "def fold_constants(gm):\n    return None")
    sub = answers.read_submission(path, NAMES, FORBIDDEN)
    redefined = [n for n in sub.notes if n.startswith("redefined")]
    late = [n for n in sub.notes if n.startswith("used before defined")]
    assert len(redefined) == 1 and "cell 1, cell 4" in redefined[0], sub.notes
    assert "tests the last one (cell 4)" in redefined[0]
    assert len(late) == 1 and "helper is used in cell 1 line 2" in late[0], sub.notes
    assert "defined only later, in cell 3" in late[0] and "NameError" in late[0]


def test_gradebook_reads_a_gradescope_export_and_charges_late_days(tmp_path):
    from datetime import datetime, timezone

    from grading import gradebook
    from grading.grade import Result

    (tmp_path / "submission_1").mkdir()
    (tmp_path / "submission_1" / "old.ipynb").write_text("{}")
    (tmp_path / "submission_1" / "lab2.ipynb").write_text("{}")
    os.utime(tmp_path / "submission_1" / "old.ipynb", (1e9, 1e9))
    (tmp_path / "submission_2").mkdir()
    (tmp_path / "submission_2" / "lab2.ipynb").write_text("{}")
    (tmp_path / "submission_metadata.yml").write_text(
        "submission_1:\n  :submitters:\n  - :name: Ada Lovelace\n    :sid: '101'\n"
        "  :created_at: 2026-12-01 23:00:00.000000000 +00:00\n"
        "submission_2:\n  :submitters:\n  - :name: Bo Li\n    :sid: '102'\n"
        "  :created_at: 2026-12-03 01:00:00 +01:00\n")
    entries = gradebook.collect(tmp_path)
    assert [(e.student_id, e.name, e.key) for e in entries] == [
        ("101", "Ada Lovelace", "submission_1/lab2.ipynb"),
        ("102", "Bo Li", "submission_2/lab2.ipynb")]
    deadline = gradebook.parse_deadline("2026-12-02T00:00")
    assert deadline == datetime(2026, 12, 2, tzinfo=timezone.utc)
    results = {e.key: Result(e.key, total=20.0, possible=23.0) for e in entries}
    rows = gradebook.rows(entries, results, deadline, penalty=10)
    assert [(r["days late"], r["late penalty"], r["final"]) for r in rows] == [
        (0, "0", "20"), (1, "2", "18")]
    sheet = tmp_path / "gradebook.csv"
    gradebook.write(sheet, rows)
    again = gradebook.rows(entries[1:], {entries[1].key: Result("x", total=23.0,
                                                                possible=23.0)})
    gradebook.write(sheet, again, merge=True)
    text = sheet.read_text().splitlines()
    assert text[0].startswith("student id,name,score,max")
    assert len(text) == 3 and text[2].startswith("102,Bo Li,23,23")


def test_gradebook_reads_canvas_and_moodle_names(tmp_path):
    from grading import gradebook

    (tmp_path / "lovelaceada_late_101_555_lab2.ipynb").write_text("{}")
    moodle = tmp_path / "Bo Li_102_assignsubmission_file_"
    moodle.mkdir()
    (moodle / "lab2.ipynb").write_text("{}")
    (tmp_path / "s103.ipynb").write_text("{}")
    got = {e.student_id: (e.name, e.key) for e in gradebook.collect(tmp_path)}
    assert got == {"101": ("Lovelaceada", "lovelaceada_late_101_555_lab2.ipynb"),
                   "102": ("Bo Li", f"{moodle.name}/lab2.ipynb"),
                   "s103": ("", "s103.ipynb")}


def test_predictions_are_graded_only_as_literals_written_out(tmp_path):
    """Issue 24: PREDICTED computed with try_capture would always be right."""
    names = {"task_2_2": {"try_capture", "PREDICTED"}}
    honest = answers.read_submission(_nb(
        tmp_path, "def try_capture(m, *x):\n    return {}\n",
        "PREDICTED = {'Plain': (True, True)}\n"
        "for name in ['Plain']:\n    PREDICTED = try_capture(name)\n"
        "PREDICTED = {'Plain': (True, False)}\n"), names)
    assert answers.pin_predictions(honest, ("PREDICTED",)) == {}
    assert honest.cells[-1].source == "PREDICTED = {'Plain': (True, False)}\n"
    for computed, call in [
            ("PREDICTED = {n: try_capture(n) for n in ['Plain']}\n", "try_capture"),
            ("PREDICTED = {}\nfor n in ['Plain']:\n    PREDICTED[n] = try_capture(n)\n",
             "try_capture"),
            ("PREDICTED = {}\n_ = PREDICTED.update(Plain=(True, True))\n", "")]:
        sub = answers.read_submission(_nb(tmp_path, computed), names)
        why = answers.pin_predictions(sub, ("PREDICTED",))
        assert "PREDICTED is a prediction: write it out by hand" in why["PREDICTED"]
        assert call in why["PREDICTED"] and "cell 1 line" in why["PREDICTED"], why
        assert all(c.label != "<predictions>" for c in sub.cells)


def test_a_gradescope_export_is_read_from_the_folder_that_holds_its_root(tmp_path):
    """The layout of "Download Submissions" as public scripts that read real exports
    use it: a root folder, `:submitters:` with `:email:`, `:score:`, `:history:`, a
    student without an SID (the email keys the row), a group of two."""
    from grading import gradebook

    root = tmp_path / "assignment_4242_export"
    for n in (11, 12):
        (root / f"submission_{n}").mkdir(parents=True)
        (root / f"submission_{n}" / "lab5.ipynb").write_text("{}")
    (root / "submission_metadata.yml").write_text(
        "submission_11:\n  :submitters:\n  - :name: Ada Lovelace\n    :sid: '101'\n"
        "    :email: ada@example.edu\n"
        "  :created_at: 2026-12-01 22:59:59.123456789 -01:00\n"
        "  :score: 14.0\n  :history:\n  - :id: 9\n"
        "    :created_at: 2026-11-30 10:00:00.000000000 -01:00\n    :score: 3.0\n"
        "submission_12:\n  :submitters:\n  - :name: Bo Li\n    :sid:\n"
        "    :email: bo@example.edu\n  - :name: Cy Chen\n    :sid: '103'\n"
        "    :email: cy@example.edu\n"
        "  :created_at: 2026-12-01 10:00:00.000000000 +00:00\n"
        "  :score: 0.0\n  :history: []\n")
    entries = gradebook.collect(tmp_path)
    from datetime import timezone as tz

    got = [(e.student_id, e.name, e.key, e.submitted.astimezone(tz.utc).isoformat())
           for e in entries]
    at = "2026-12-01T10:00:00+00:00"
    assert got == [
        ("101", "Ada Lovelace", "submission_11/lab5.ipynb",
         "2026-12-01T23:59:59.123456+00:00"),
        ("bo@example.edu", "Bo Li", "submission_12/lab5.ipynb", at),
        ("103", "Cy Chen", "submission_12/lab5.ipynb", at)], got


# ---------------------------------------------------------------- the wire


def _cross(value, trusting=False, named=None):
    """value, encoded by one side and decoded by the other, as a message is."""
    import io

    import torch

    sys.path.insert(0, str(ROOT / "tools" / "grading"))
    import wire

    sender, receiver = wire.Side(named or {}, True), wire.Side(named or {}, trusting)
    buffer = io.BytesIO()
    torch.save(sender.encode(value), buffer)
    buffer.seek(0)
    return receiver.decode(torch.load(buffer, weights_only=True)), wire


def test_a_graph_crosses_as_data_and_runs_the_same():
    import torch
    import torch.fx as fx

    import graphopt

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    for gm in (fx.symbolic_trace(model), graphopt.capture(model, x, level="aten")):
        copy, _ = _cross(gm)
        assert isinstance(copy, fx.GraphModule) and copy is not gm
        assert [n.format_node() for n in copy.graph.nodes] == [
            n.format_node() for n in gm.graph.nodes]
        torch.testing.assert_close(copy(x), gm(x))


def _graph_calling(target, *args):
    import torch
    import torch.fx as fx

    g = fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(target, (x, *args)))
    return fx.GraphModule(torch.nn.Module(), g)


def test_a_graph_that_reaches_for_the_tests_process_is_refused():
    """A rebuilt graph may call aten, operator, math, torch's and F's public
    functions; anything else stays in the hand-in's process (a handle), and a
    private attribute is refused."""
    import os

    import torch

    copy, wire = _cross(_graph_calling(os.system))
    target = next(n.target for n in copy.graph.nodes if n.op == "call_function")
    assert isinstance(target, wire.Remote)  # it would run in the hand-in's process
    with pytest.raises(wire.WireError, match="private"):
        _cross(_graph_calling(getattr, "__globals__"))
    with pytest.raises(wire.WireError, match="not a function a graph may call"):
        wire.Side({}, False).decode({"$": "fn", "module": "torch", "name": "load"})
    same, _ = _cross(_graph_calling(torch.add, 1))
    assert any(n.target is torch.add for n in same.graph.nodes)


def test_a_hidden_failure_shows_only_the_assertions_own_words():
    sys.path.insert(0, str(ROOT / "tools" / "grading"))
    import runner

    source = ('_secret = 41\nassert _secret == 42, (\n'
              '    f"expected 42, got {_secret}: check the sign")\n')
    try:
        exec(compile(source, "<hidden test>", "exec"), {})
    except AssertionError as e:
        e.grader_source = source
        why = runner.hidden_reason(e)
    assert why == "AssertionError: expected 42, got ...: check the sign"
    assert "41" not in why and "_secret" not in why


def test_the_tests_take_no_builtin_or_helper_from_the_hand_in():
    """Its list of names is the hand-in's to forge: `sum` would reach the hand-out's
    helpers (call_count sums), so the tests' process filters it itself."""
    sys.path.insert(0, str(ROOT / "tools" / "grading"))
    import runner

    class Conn:
        on_other = None
        side = type("Side", (), {"decode": staticmethod(lambda v: v)})()

        def wait(self):
            return {"names": {"sum": "forged", "__import__": "forged",
                              "call_count": "forged", "fold_constants": "answer",
                              "scratch": 1}}

    ns = {"call_count": "the instructor's"}
    runner.wait_for_handin(Conn(), ns, {"fold_constants"})
    assert ns == {"call_count": "the instructor's", "fold_constants": "answer",
                  "scratch": 1}


# ---------------------------------------------------------------- Chinese feedback

def test_the_graders_catalog_is_complete_and_compiled():
    from i18n import messages
    keywords = {**messages.KEYWORDS, "N_": None}
    assert not messages.problems([ROOT / "tools" / "grading"],
                                 ROOT / "tools" / "grading" / "locale", "grading",
                                 keywords)


def test_a_chinese_hand_in_gets_chinese_headings_and_reasons():
    from grading import feedback, language
    from grading.grade import Result, case_label
    case = answers.Case("task_1_1", 1, True, 1.0, "every consumer is listed once",
                        [("x", "")])
    label = case_label(case)
    why = "KeyError raised by your code (cell 5 line 4)"
    r = Result("alice.ipynb", total=0.0, possible=1.0, cases={label: 0.0},
               why={label: why}, notes=["not run: cell 3 line 1: an IPython magic"])
    assert "what went wrong" in feedback.markdown(1, [case], r)
    r.lang = "zh"
    page = feedback.markdown(1, [case], r)
    assert "实验 1：alice.ipynb 的反馈" in page and "未通过" in page, page
    assert "你的代码引发了 KeyError (cell 5 line 4)" in page, page
    assert "未运行：cell 3 line 1" in page and "隐藏测试" in page, page
    assert language.reason("AssertionError: the lab's words", "zh") == \
        "AssertionError: the lab's words"
