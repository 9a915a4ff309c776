"""Grading that students cannot game or break: one class run of lab 3 with attacks.

Every attack of issue 14 is a short notebook built here from an honest base (the lab 3
solution with a planted bug: it earns exactly HONEST points). The class also holds
two correct victims (dup.ipynb and dup/lab3.ipynb: two rows), a renamed hand-out and
the untouched release. All are graded in ONE sandboxed class run with two workers.
Each attack must score at most what its honest part earns (exactly that when the
attack only runs before the tests), its peers, the zip and the scores stay
untouched, no process outlives grading, and every lost point has a reason.
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import os
import shutil
import socket
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
grading = importlib.import_module("grading.classrun")
from grading import build as gbuild  # noqa: E402
from grading import sandbox  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    sandbox.why_unavailable() is not None, reason=f"{sandbox.why_unavailable()}")]

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "labs"
FULL, HONEST = 23.0, 17.0   # 9 public points (3+ per task) and 14 hidden ones
HONEST_3_1, POINTS_3_3 = 5.0, 5.0   # Task 3.1 with the planted bug; all of Task 3.3
CASE_TIMEOUT, CELL_TIMEOUT = 10, 45
PLANTED = [  # the purity guard forgotten in both passes: loses 3.1 #4, #6 and 3.2 #5
    ('elif (node.op.startswith("call_") and not is_impure(node)',
     'elif (node.op.startswith("call_")'),
    ("node.users or is_impure(node):", "node.users:"),
]

# Attack code, run by _attack() ({where}: "top" = once while the cells run,
# "call" = also inside fold_constants, i.e. while the tests run). Placeholders are
# filled with the real paths and numbers of this run.
ATTACKS = {
    "doctest_summarize": """
        import doctest
        doctest.DocTestRunner.summarize = lambda self, v=None: doctest.TestResults(0, 0)
        doctest.OutputChecker.check_output = lambda self, want, got, flags: True
    """,
    "otter_check": """
        import otter.check.notebook as nb
        nb.Notebook.check = lambda self, *a, **k: None
    """,
    "fake_task": """
        import os, sys
        os.makedirs("tests", exist_ok=True)
        open("tests/task_9_9.py", "w").write("test = dict(name='task_9_9', points=100)")
        fd = int(sys.argv[-1])
        for case in ["task_9_9#1", "task_3_1#4", "task_3_1#6", "task_3_2#5"]:
            record = dict(done=case, passed=True, error="", nonce="")
            os.write(fd, (json.dumps(record) + "\\n").encode())
    """,
    "assert_close_noop": """
        torch.testing.assert_close = lambda *a, **k: None
        torch.equal = lambda *a, **k: True
    """,
    "equivalent_noop": """
        graphopt.equivalent = lambda *a, **k: True
        import builtins
        builtins.any = lambda *a, **k: True
    """,
    "read_tests": """
        import glob
        found = glob.glob("/tmp/**/*.py", recursive=True) + glob.glob("tests/*.py")
        # the grader's folders first: a venv under /tmp lists thousands of files,
        # and the output cap would drop what comes after them
        for path in glob.glob("/grader/*") + glob.glob("/autograder/**/*.py") + found:
            print("FOUND", path)
            open(path, "w").write(">>> True\\n")
    """,
    "peers_via_proc": """
        import glob, os
        for root in glob.glob("/proc/*/cwd") + glob.glob("/proc/*/root/tmp"):
            for path in glob.glob(root + "/*.ipynb") + glob.glob(root + "/*/*.ipynb"):
                open(path, "w").write("{{}}")
        for path in glob.glob("{klass}/**/*.ipynb", recursive=True):
            open(path, "w").write("{{}}")
    """,
    "rewrite_zip": """
        open("{zip}", "wb").write(b"PK")
    """,
    "detached_rewriter": """
        import subprocess, sys
        code = ("import time, glob\\ntime.sleep(4)\\n"
                "for p in glob.glob('{out}/**/scores.csv', recursive=True):\\n"
                "    open(p, 'w').write('student,total\\\\nx,19\\\\n')\\n")
        subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            exec(code)
            os._exit(0)
    """,
    "kill_grader": """
        import os, signal
        for pid in [{grader_pid}, os.getppid()] + [int(p) for p in os.listdir("/proc")
                                                   if p.isdigit()]:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError as e:
                    print("kill", pid, e)
    """,
    "loopback": """
        import socket
        s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
        s.sendall(b"import os; os.system('touch /tmp/pwned')\\n")
    """,
    "gil_loop": """
        import threading, os
        def spin():
            while True:
                pass
        threading.Thread(target=spin).start()
        if os.fork() == 0:
            os.setsid()
            spin()
    """,
    "huge_output": """
        for _i in range(300000):
            print("x" * 200)
    """,
    "memory_bomb": """
        hog = [torch.empty(1 << 28) for _ in range(1000)]  # 1 GiB each
    """,
    "fork_bomb": """
        import os
        while True:
            os.fork()
    """,
}
PATCHES = {"doctest_summarize", "assert_close_noop", "equivalent_noop"}
TOP_ONLY = {"otter_check", "loopback", "rewrite_zip", "fake_task", "huge_output",
            "memory_bomb", "fork_bomb", "gil_loop", "detached_rewriter",
            "peers_via_proc", "read_tests", "kill_grader"}


def _cell_index(nb, needle):
    return next(i for i, c in enumerate(nb.cells)
                if c.cell_type == "code" and needle in c.source)


def _honest(solution: Path):
    nb = nbformat.read(solution, as_version=4)
    for cell in nb.cells:
        for old, new in PLANTED:
            cell.source = cell.source.replace(old, new)
    return nb


def _attack_nb(solution, code, where):
    nb = _honest(solution)
    body = textwrap.indent(textwrap.dedent(code).strip(), " " * 8)
    src = ("import json\n\n\ndef _attack():\n    try:\n" + body +
           "\n    except Exception as e:\n        print('attack failed:', e)\n\n\n"
           "_ = _attack()\n")
    where_ = _cell_index(nb, "import graphopt") + 1
    nb.cells.insert(where_, nbformat.v4.new_code_cell(src))
    if where == "call":
        i = _cell_index(nb, "def fold_constants")
        doc = ('"""Task 3.1: evaluate constant subgraphs once; '
               'their uses read buffers."""')
        assert doc in nb.cells[i].source
        nb.cells[i].source = nb.cells[i].source.replace(doc, doc + "\n    _attack()")
    return nb


def _special(solution, release):
    """Notebooks that are not a generic attack: {name: notebook}."""
    out = {}
    nb = _honest(solution)  # a hang in Task 3.3 only: 3.1 and 3.2 keep their points
    i = _cell_index(nb, "def fold_and_clean")
    nb.cells[i].source = nb.cells[i].source.replace(
        '"""Task 3.3: constant folding followed by dead-code elimination."""',
        '"""Task 3.3: hangs."""\n    while True:\n        pass')
    out["hang"] = nb
    nb = _honest(solution)  # a syntax error in Task 3.2's answer cell
    i = _cell_index(nb, "def eliminate_dead_code")
    nb.cells[i].source = nb.cells[i].source.replace("def eliminate_dead_code(gm):",
                                                    "def eliminate_dead_code(gm)")
    out["syntax_error"] = nb
    nb = _honest(solution)
    i = _cell_index(nb, "import graphopt")
    nb.cells.insert(i + 1, nbformat.v4.new_code_cell("exit()"))
    nb.cells.insert(i + 1, nbformat.v4.new_code_cell("import sys\nraise SystemExit(3)"))
    out["exit"] = nb
    nb = _honest(solution)
    nb.cells.insert(_cell_index(nb, "import graphopt") + 1, nbformat.v4.new_code_cell(
        "isinstance = lambda *a: True\n\n\ndef len(x):\n    return 5\n\n\n"
        "call_count = lambda gm: 2\n"))
    out["shadow_builtins"] = nb
    doc = ('"""Task 3.2: remove nodes without users, last to first, '
           'keeping impure ones."""')
    for name, head, call in [
            ("forbidden_import",
             "from graphopt.passes import eliminate_dead_code as _lib_dce\n\n\n",
             "_lib_dce(gm)"),
            ("forbidden_runtime", "",
             'import importlib\n    importlib.import_module("graphopt." + "passes")'
             '.eliminate_dead_code(gm)')]:
        nb = _honest(solution)
        i = _cell_index(nb, "def eliminate_dead_code")
        assert doc in nb.cells[i].source
        body = nb.cells[i].source.replace(doc, f"{doc}\n    {call}")
        nb.cells[i].source = head + body
        out[name] = nb
    out["wrong_lab"] = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x = 1")])
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sandbox_pids():
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = int(status.read_text().split("Uid:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        if sandbox.UID_BASE <= uid < sandbox.UID_BASE + 64:
            pids.append(status.parent.name)
    return pids


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("attacks")
    dist = base / "dist"
    gbuild.build([3], dist)
    rel = gbuild.release(3, dist)
    klass, out = base / "class", base / "out"
    (klass / "dup").mkdir(parents=True)
    shutil.copy(rel.solution, klass / "dup.ipynb")
    shutil.copy(rel.solution, klass / "dup" / "lab3.ipynb")
    shutil.copy(rel.student, klass / "untouched.ipynb")
    renamed = nbformat.read(rel.solution, as_version=4)
    nbformat.write(renamed, klass / "lab3 (1).ipynb")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.setblocking(False)
    fill = {"klass": klass, "zip": rel.autograder, "out": out,
            "grader_pid": os.getpid(), "port": listener.getsockname()[1]}
    for name, code in ATTACKS.items():
        for where in ("top",) if name in TOP_ONLY else ("top", "call"):
            nb = _attack_nb(rel.solution, code.format(**fill), where)
            nbformat.write(nb, klass / f"{name}-{where}.ipynb")
    for name, nb in _special(rel.solution, rel.student).items():
        nbformat.write(nb, klass / f"{name}.ipynb")
    for name in ("broken.ipynb", "notes.txt"):
        shutil.copy(FIXTURES / name, klass / name)
    peers = {p: _sha(p) for p in klass.rglob("*.ipynb")}
    zip_before = _sha(rel.autograder)
    start = time.monotonic()
    results = grading.grade(3, klass, out=out, timeout=150, workers=2, dist=dist,
                            case_timeout=CASE_TIMEOUT, cell_timeout=CELL_TIMEOUT)
    wall = time.monotonic() - start
    run_dir = (out / gbuild.lab_name(3) / "latest").resolve()
    scores = run_dir / "scores.csv"
    scores_sha = _sha(scores)
    time.sleep(5)  # the detached rewriter would have struck by now
    try:
        conn, _ = listener.accept()
        connected = True
    except BlockingIOError:
        connected = False
    return dict(results={r.student: r for r in results}, peers=peers,
                zip=rel.autograder,
                zip_before=zip_before, scores=scores, scores_sha=scores_sha,
                run_dir=run_dir, connected=connected, wall=wall, n=len(results))


def _attack_names():
    for name in ATTACKS:
        for where in ("top",) if name in TOP_ONLY else ("top", "call"):
            yield f"{name}-{where}"


@pytest.mark.parametrize("name", list(_attack_names()))
def test_attack_scores_only_its_honest_part(run, name):
    r = run["results"][f"{name}.ipynb"]
    assert r.possible == FULL
    assert set(r.tasks) == {"Task 3.1", "Task 3.2", "Task 3.3"}, r.tasks
    if name.endswith("-top"):  # the attack ran before the tests: honest score
        assert r.total == HONEST, (r.status, r.reason, r.why, r.review)
    else:  # it ran inside the tests: every case it touched fails
        assert r.total <= HONEST, (r.why, r.review)
        if name.split("-")[0] in PATCHES:
            assert any("patched" in why for why in r.why.values()), r.why
    lost = [label for label, points in r.cases.items() if points == 0]
    assert lost and all(r.why.get(label) for label in lost)


def test_peers_zip_and_scores_untouched(run):
    assert run["peers"] == {p: _sha(p) for p in run["peers"]}
    assert _sha(run["zip"]) == run["zip_before"]
    assert _sha(run["scores"]) == run["scores_sha"]
    assert not (run["run_dir"] / "INCOMPLETE").exists()
    assert not run["connected"], "a submission reached a port on 127.0.0.1"
    for key in ("dup.ipynb", "dup/lab3.ipynb", "lab3 (1).ipynb"):
        r = run["results"][key]
        assert r.total == FULL, (key, r.why, r.review)
    rows = list(csv.DictReader(open(run["scores"])))
    assert len(rows) == run["n"] and len({row["student"] for row in rows}) == run["n"]
    assert "no otter metadata" in run["results"]["dup.ipynb"].review[0]


def test_no_process_outlives_grading(run):
    assert _sandbox_pids() == []


def test_untouched_release_scores_zero_with_a_reason_per_task(run):
    r = run["results"]["untouched.ipynb"]
    assert r.total == 0 and r.status == "graded"
    row = next(row for row in csv.DictReader(open(run["scores"]))
               if row["student"] == "untouched.ipynb")
    assert all(f"Task 3.{i}:" in row["lost points because"] for i in (1, 2, 3))


def test_hang_keeps_the_finished_tasks(run):
    r = run["results"]["hang.ipynb"]
    assert r.tasks["Task 3.3"] == 0 and r.total == HONEST - POINTS_3_3, r.why
    assert all("timeout" in why for label, why in r.why.items()
               if label.startswith("Task 3.3")), r.why
    assert r.status == "partial"


def test_syntax_error_costs_its_task_with_the_reason(run):
    r = run["results"]["syntax_error.ipynb"]
    assert r.tasks["Task 3.2"] == 0 and r.tasks["Task 3.1"] == HONEST_3_1, r.why
    assert "syntax error in cell" in r.reason
    assert all("syntax error" in why for label, why in r.why.items()
               if label.startswith("Task 3.2")), r.why


@pytest.mark.parametrize("name", ["exit", "shadow_builtins"])
def test_exit_and_shadowing_score_the_honest_part(run, name):
    r = run["results"][f"{name}.ipynb"]
    assert r.total == HONEST, (r.why, r.review)


def test_logs_are_capped_and_hold_no_hidden_tests(run):
    logs = run["run_dir"] / "logs"
    huge = logs / "huge_output-top.ipynb.log"
    assert huge.stat().st_size < 300_000
    assert "more bytes of output dropped" in huge.read_text()
    text = "\n".join(p.read_text(errors="replace") for p in logs.iterdir())
    # The interpreter, venv and graphopt's source are mounted read-only on purpose (a
    # checkout under /tmp shows them to the glob); anything else is a leak.
    public = tuple(m.rstrip("/") + "/" for m in sandbox._python_mounts())
    found = [ln for ln in text.splitlines() if ln.startswith("FOUND")
             and not ln.removeprefix("FOUND ").startswith(public)]
    assert found == ["FOUND /grader/runner.py"]  # the runner alone: no tests, no zip
    assert "random ops have no variable input" not in text


@pytest.mark.parametrize("name", ["forbidden_import", "forbidden_runtime"])
def test_forbidden_library_code_costs_the_task_it_bypasses(run, name):
    r = run["results"][f"{name}.ipynb"]
    assert r.tasks["Task 3.2"] == 0 and r.tasks["Task 3.1"] == HONEST_3_1, r.why
    assert all("forbid" in why for label, why in r.why.items()
               if label.startswith("Task 3.2")), r.why


def test_bad_files_get_zero_with_a_reason_and_the_run_finishes(run):
    res = run["results"]
    assert res["broken.ipynb"].status == "not a notebook"
    assert "not a valid notebook" in res["broken.ipynb"].reason
    notes = res["notes.txt"]
    assert notes.status == "not a notebook" and ".txt" in notes.reason
    wrong = res["wrong_lab.ipynb"]
    assert wrong.total == 0 and all("NameError" in w for w in wrong.why.values())
    summary = (run["run_dir"] / "summary.txt").read_text()
    assert f"{run['n']} submissions" in summary
    assert "zero for broken.ipynb: not a notebook" in summary
