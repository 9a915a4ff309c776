"""The labs: releases build, grading is right, and bad submissions never stop a run.

One session builds every lab once (tools/grade.py build into a temporary dist) and
grades, all at once and in parallel: each lab's solution notebook and its untouched
student release, a planted partly-wrong lab 2, and a folder of submissions that must
get zero with a reason (broken JSON, a text file, a notebook of another lab, one
that never finishes).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "labs"
_spec = importlib.util.spec_from_file_location("grade", ROOT / "tools" / "grade.py")
grade = importlib.util.module_from_spec(_spec)
sys.modules["grade"] = grade  # dataclasses look their module up there
_spec.loader.exec_module(grade)

LABS = sorted(grade.LABS)
HANG_TIMEOUT = 45  # s: time enough to refuse the wrong-lab notebook on a busy machine

# Lab 2 with the purity guard forgotten in both passes: folding then evaluates random
# and in-place ops ahead of time, and dead-code elimination drops them. Exactly these
# hidden cases must fail; everything else still passes.
PLANTED = [
    ("elif (node.op.startswith(\"call_\") and not is_impure(node)",
     "elif (node.op.startswith(\"call_\")"),
    ("node.users or is_impure(node):", "node.users:"),
]
PLANTED_LOSSES = {"Task 2.1 #3", "Task 2.1 #5", "Task 2.2 #4"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def dist(tmp_path_factory):
    path = tmp_path_factory.mktemp("labs") / "dist"
    grade.build(dist=path)
    return path


def _plant(solution: Path, target: Path) -> None:
    text = solution.read_text()
    for old, new in PLANTED:
        assert text.count(json.dumps(old)[1:-1]) == 1, f"planted edit gone: {old}"
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    target.write_text(text)


def _hang(student: Path, target: Path) -> None:
    """The lab 2 release with an endless loop in its first answer cell."""
    nb = nbformat.read(student, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if "def fold_constants" in c.source)
    nb.cells.insert(first, nbformat.v4.new_code_cell(
        "import time\n\nwhile True:  # waits for something that never comes\n"
        "    time.sleep(1)"))
    nbformat.write(nb, target)


@pytest.fixture(scope="session")
def graded(dist, tmp_path_factory):
    """{lab: {student: Result}}, plus 'bad': the zero-with-a-reason folder."""
    base = tmp_path_factory.mktemp("grading")
    folders = {}
    for lab in LABS:
        rel = grade.release(lab, dist)
        folder = base / f"lab{lab}"
        folder.mkdir()
        shutil.copy(rel.solution, folder / "solution.ipynb")
        shutil.copy(rel.student, folder / "student.ipynb")
        folders[lab] = folder
    _plant(grade.release(2, dist).solution, folders[2] / "planted.ipynb")
    bad = base / "bad"
    bad.mkdir()
    for name in ("broken.ipynb", "notes.txt"):
        shutil.copy(FIXTURES / name, bad / name)
    _hang(grade.release(2, dist).student, bad / "hang.ipynb")
    shutil.copy(grade.release(1, dist).student, bad / "wrong_lab.ipynb")
    folders["bad"] = bad

    def run(key):
        lab, timeout = (2, HANG_TIMEOUT) if key == "bad" else (key, 600)
        results = grade.grade(lab, folders[key], out=base / f"out-{key}",
                              timeout=timeout, workers=2, dist=dist)
        return key, {r.student: r for r in results}

    with ThreadPoolExecutor(len(folders)) as pool:
        results = dict(pool.map(run, folders))
    results["out"] = base
    return results


@pytest.mark.parametrize("lab", LABS)
def test_solution_scores_full_marks(graded, lab):
    r = graded[lab]["solution"]
    assert r.status == "graded", r.reason
    assert r.possible > 0 and r.total == r.possible, r.cases
    assert all(points > 0 for points in r.cases.values())


@pytest.mark.parametrize("lab", LABS)
def test_untouched_release_scores_zero_on_every_task(graded, lab):
    r = graded[lab]["student"]
    assert r.status == "graded", r.reason  # the tests ran and failed; nothing crashed
    assert r.tasks and all(score == 0 for score in r.tasks.values()), r.tasks
    assert r.total == 0 and r.possible == graded[lab]["solution"].possible


def test_planted_submission_loses_exactly_its_points(graded):
    r = graded[2]["planted"]
    assert r.status == "graded", r.reason
    lost = {label for label, points in r.cases.items() if points == 0}
    assert {label.split(" hidden")[0] for label in lost} == PLANTED_LOSSES
    expected = sum(float(re.search(r"\(([\d.]+) pt\)", label)[1]) for label in lost)
    assert expected == 6 and r.total == r.possible - expected


def test_bad_submissions_get_zero_with_a_reason_and_the_run_finishes(graded):
    bad = graded["bad"]
    assert set(bad) == {"broken", "hang", "notes", "wrong_lab"}
    assert bad["broken"].status == "not a notebook"
    assert "not a valid notebook" in bad["broken"].reason
    assert bad["notes"].status == "not a notebook" and ".txt" in bad["notes"].reason
    assert bad["hang"].status == "timeout" and f"{HANG_TIMEOUT}" in bad["hang"].reason
    assert bad["wrong_lab"].status == "crashed" and bad["wrong_lab"].reason
    assert all(r.total == 0 for r in bad.values())
    out = graded["out"] / "out-bad"
    rows = list(csv.DictReader(open(out / "scores.csv")))
    assert {row["student"]: row["status"] for row in rows} == {
        s: r.status for s, r in bad.items()}
    summary = (out / "summary.txt").read_text()
    assert "4 submissions, 0 graded, 4 given zero" in summary
    assert all(f"zero for {s} " in summary for s in bad)


@pytest.mark.parametrize("lab", LABS)
def test_csv_has_a_column_per_task_and_per_test_case(graded, lab):
    rows = list(csv.DictReader(open(graded["out"] / f"out-{lab}" / "scores.csv")))
    assert {row["student"] for row in rows} >= {"solution", "student"}
    for row in rows:
        tasks = [k for k in row if re.fullmatch(r"Task \d\.\d", k)]
        cases = [k for k in row if re.match(r"Task \d\.\d #\d+ (public|hidden)", k)]
        assert tasks and len(cases) > len(tasks)
        assert sum(float(row[k]) for k in cases) == float(row["total"])
        assert sum(float(row[k]) for k in tasks) == float(row["total"])


# ---------------------------------------------------------------- the release itself

def _student_text(dist, lab) -> str:
    return grade.release(lab, dist).student.read_text()


def _solution_lines(lab) -> set[str]:
    """Lines between BEGIN and END SOLUTION that appear nowhere else in the master."""
    inside, outside = set(), set()
    for cell in nbformat.read(grade.master(lab), as_version=4).cells:
        block = False
        for line in cell.source.splitlines():
            s = line.strip()
            if s.endswith("# BEGIN SOLUTION") or s.endswith("# END SOLUTION"):
                block = s.endswith("BEGIN SOLUTION")
                continue
            (inside if block else outside).add(s)
    return {s for s in inside - outside if len(s) > 8 and not s.startswith("#")}


def _cases(dist, lab):
    with zipfile.ZipFile(grade.release(lab, dist).autograder) as z:
        for name in sorted(n for n in z.namelist() if n.startswith("tests/")):
            namespace = {}
            exec(z.read(name).decode(), namespace)
            test = namespace["test"]
            for case in test["suites"][0]["cases"]:
                yield test["name"], case


@pytest.mark.parametrize("lab", LABS)
def test_release_has_no_solution_code(dist, lab):
    text = _student_text(dist, lab)
    lines = _solution_lines(lab)
    assert len(lines) >= 5
    leaked = [s for s in lines if json.dumps(s)[1:-1] in text]
    assert not leaked, leaked
    assert "BEGIN SOLUTION" not in text


def _lines(case) -> list[str]:
    return [ln[4:].strip() for ln in case["code"].splitlines()
            if ln.startswith(">>> ") and len(ln) > 24]


@pytest.mark.parametrize("lab", LABS)
def test_release_has_no_hidden_test_text(dist, lab):
    text = _student_text(dist, lab)
    cases = [case for _, case in _cases(dist, lab)]
    hidden = [case for case in cases if case["hidden"]]
    public = {ln for case in cases if not case["hidden"] for ln in _lines(case)}
    assert hidden
    for case in hidden:
        lines = [ln for ln in _lines(case) if ln not in public]  # shared lines are fine
        lines.append(case["failure_message"])
        leaked = [ln for ln in lines if json.dumps(ln)[1:-1] in text]
        assert not leaked, leaked
    assert "hidden: true" not in text.lower() and '"hidden": true' not in text


@pytest.mark.parametrize("lab", LABS)
def test_every_task_has_an_id_goals_public_and_hidden_tests_and_points(dist, lab):
    nb = nbformat.read(grade.release(lab, dist).student, as_version=4)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "Learning goals" in markdown
    assert re.search(r"\]\(\.\./\.\./book/0\d_\w+\.ipynb\)", markdown)
    by_task = {}
    for name, case in _cases(dist, lab):
        by_task.setdefault(name, []).append(case)
    assert len(by_task) >= 2
    for name, cases in by_task.items():
        task_id = grade.task_label(name)  # task_2_1 -> Task 2.1
        assert f"## {task_id}" in markdown, task_id
        assert f'grader.check("{name}")' in code
        stub = rf'def \w+\(.*\):\n    """{task_id}: .*"""\n    \.\.\.'
        assert re.search(stub, code), f"no stub with {task_id} in its docstring"
        assert any(not c["hidden"] for c in cases) and any(c["hidden"] for c in cases)
        assert all(c.get("points", 0) > 0 for c in cases), name
        assert all(c.get("failure_message") for c in cases), name


def test_submissions_lists_files_and_one_notebook_folders(tmp_path):
    (tmp_path / "ada.ipynb").write_text("{}")
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "lab2.ipynb").write_text("{}")
    (tmp_path / "cy.txt").write_text("x")
    (tmp_path / ".DS_Store").write_text("x")
    found = {student: path.name for student, path in grade.submissions(tmp_path)}
    assert found == {"ada": "ada.ipynb", "bob": "lab2.ipynb", "cy": "cy.txt"}
    assert grade.task_label("task_3_2") == "Task 3.2"


@pytest.mark.parametrize("lab", LABS)
def test_autograder_zip_installs_what_the_labs_import(dist, lab):
    """A course platform builds its grader from the zip alone: graphopt and CPU torch."""
    import yaml

    with zipfile.ZipFile(grade.release(lab, dist).autograder) as z:
        names = z.namelist()
        env = yaml.safe_load(z.read("environment.yml"))
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    wheels = [n for n in names if n.startswith("graphopt-") and n.endswith(".whl")]
    assert len(wheels) == 1 and f"/autograder/source/{wheels[0]}" in pip
    assert any(p.startswith("torch==") for p in pip)
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    assert {"run_autograder", "run_otter.py", "setup.sh", "otter_config.json"} <= set(names)
