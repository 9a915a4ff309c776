"""Build the lab releases and grade a class folder offline, with otter-grader.

    python tools/grade.py build [LAB ...]              # make labs
    python tools/grade.py grade LAB SUBMISSIONS [--timeout S] [--workers N] [--out DIR]

`build` runs `otter assign` on each master notebook in labs/ and writes, per lab,
labs/dist/<lab>/student/<labN>.ipynb (the hand-out), labs/dist/<lab>/autograder.zip
(what a course platform such as Gradescope takes) and
labs/dist/<lab>/autograder/<labN>.ipynb (the solution notebook, outputs stripped).

`grade` grades every submission in a folder: each one runs `otter run` in its own
process (in parallel across cores), under a wall-clock limit. A submission that is not
a notebook, crashes the grader or runs out of time gets zero and a reason; the run goes
on. It writes scores.csv (one row per student: total, per task, per test case),
summary.txt (also printed) and one grading log per student, by default under
labs/dist/grades/<lab>/.

This is instructor tooling, not library code: it needs otter-grader (a dev extra) and
lives beside the labs it builds rather than in the `graphopt` package learners import.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABS_DIR = ROOT / "labs"
DIST = LABS_DIR / "dist"
LABS = {
    1: "lab1_graphs_and_operators",
    2: "lab2_constant_folding",
    3: "lab3_operator_fusion",
    4: "lab4_write_a_pass",
}
# One thread per grading kernel: N kernels on N cores beat N kernels fighting over
# every core (torch, MKL and numba would each start one thread per core).
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
               "PYTHONHASHSEED": "0", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def _lab_name(lab: int | str) -> str:
    lab = int(str(lab).removeprefix("lab"))
    if lab not in LABS:
        raise SystemExit(f"unknown lab {lab}; choose one of {sorted(LABS)}")
    return LABS[lab]


def master(lab: int | str) -> Path:
    """The otter master notebook of a lab (solutions and hidden tests inside)."""
    name = _lab_name(lab)
    return LABS_DIR / name / f"lab{name[3]}.ipynb"


@dataclass
class Release:
    """What `build` wrote for one lab."""

    student: Path
    autograder: Path
    solution: Path


def release(lab: int | str, dist: Path = DIST) -> Release:
    name = _lab_name(lab)
    nb = f"lab{name[3]}.ipynb"
    out = dist / name
    return Release(out / "student" / nb, out / "autograder.zip",
                   out / "autograder" / nb)


def build(labs=None, dist: Path = DIST) -> dict[int, Release]:
    """Run `otter assign` for each lab and make each autograder zip self-contained.

    otter runs in this process: its command line spends seconds starting up, the
    assignment itself takes a tenth of one.
    """
    with warnings.catch_warnings():  # traitlets deprecations inside otter's imports
        warnings.simplefilter("ignore", DeprecationWarning)
        from otter.assign import main as otter_assign

    labs = sorted(int(lab) for lab in (labs or LABS))
    dist.mkdir(parents=True, exist_ok=True)
    wheel = _graphopt_wheel(dist)
    releases = {}
    for lab in labs:
        out = dist / _lab_name(lab)
        shutil.rmtree(out, ignore_errors=True)
        with warnings.catch_warnings():  # traitlets deprecations inside otter
            warnings.simplefilter("ignore", DeprecationWarning)
            otter_assign(str(master(lab)), str(out), no_pdfs=True, no_run_tests=True)
        rel = release(lab, dist)
        stamped = sorted((out / "autograder").glob("*.zip"))  # the name holds the time
        if not stamped or not rel.student.exists():
            raise RuntimeError(f"otter assign wrote no release for lab {lab} in {out}")
        stamped[-1].replace(rel.autograder)
        _add_platform_requirements(rel.autograder, wheel)
        releases[lab] = rel
    return releases


def _graphopt_wheel(dist: Path) -> Path:
    """A wheel of this checkout: a course platform's grader installs it from the zip."""
    out = dist / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True)
    return next(out.glob("graphopt-*.whl"))


def _add_platform_requirements(zip_path: Path, wheel: Path) -> None:
    """Add the packages the labs import to the zip's environment.yml, and the wheel.

    `otter run` grades in this environment and ignores them; Gradescope builds its
    image from environment.yml (CPU torch: the default index serves a CUDA build of
    several GB).
    """
    import yaml
    from importlib.metadata import version

    with zipfile.ZipFile(zip_path) as z:  # ZipInfo keeps run_autograder executable
        entries = {info.filename: (info, z.read(info)) for info in z.infolist()}
    info, text = entries["environment.yml"]
    env = yaml.safe_load(text)
    pip = next(d for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    pip["pip"] += [
        "--extra-index-url https://download.pytorch.org/whl/cpu",
        f"torch=={version('torch').split('+')[0]}",
        *(f"{name}=={version(name)}" for name in _PLATFORM_PACKAGES),
        f"/autograder/source/{wheel.name}",
    ]
    entries["environment.yml"] = (info, yaml.safe_dump(env, sort_keys=False).encode())
    entries[wheel.name] = (zipfile.ZipInfo(wheel.name), wheel.read_bytes())
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in entries.values():
            z.writestr(info, data)


# what the labs import besides torch (graphopt's own dependencies)
_PLATFORM_PACKAGES = ("numpy", "numba", "graphviz", "matplotlib", "ipywidgets")


# ---------------------------------------------------------------- grading

@dataclass
class Result:
    """One student's grade: total, per task, per test case, or zero and why."""

    student: str
    file: str
    status: str = "graded"       # graded | not a notebook | crashed | timeout
    reason: str = ""
    total: float = 0.0
    possible: float = 0.0
    tasks: dict[str, float] = field(default_factory=dict)
    cases: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student, path) for each file in the folder; a sub-folder is one hand-in."""
    found = []
    for path in sorted(Path(folder).iterdir()):
        if path.name.startswith(".") or path.name.startswith("__"):
            continue
        if path.is_dir():
            notebooks = sorted(path.glob("*.ipynb"))
            path = notebooks[0] if len(notebooks) == 1 else path
            found.append((path.parent.name if path.suffix else path.name, path))
        else:
            found.append((path.stem, path))
    return found


def _not_a_notebook(path: Path) -> str | None:
    """Why `path` cannot be graded as a notebook, or None when it can."""
    import nbformat

    if path.is_dir():
        return "a folder without exactly one .ipynb file"
    if path.suffix != ".ipynb":
        return f"not a notebook ({path.suffix or 'no extension'} file)"
    try:
        nbformat.validate(nbformat.read(path, as_version=4))
    except Exception as e:  # invalid JSON, wrong schema, binary junk
        first = " ".join(str(e).split()) or type(e).__name__
        return f"not a valid notebook: {first[:120]}"
    return None


def grade_one(student: str, path: Path, autograder: Path, timeout: float,
              logs: Path) -> Result:
    """Grade one submission in a child process; never raises."""
    result = Result(student, path.name)
    why = _not_a_notebook(path)
    if why:
        result.status, result.reason = "not a notebook", why
        return result
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{student}.log"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, open(log, "w") as out:
        report = Path(tmp) / "report.json"
        # its own session, so a timeout can kill the kernel it started as well
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_one", str(autograder),
             str(path.resolve()), str(report)],
            cwd=tmp, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **_ONE_THREAD})
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            proc.wait()
            result.status = "timeout"
            result.reason = f"still running after {timeout:.0f} s (killed)"
        result.seconds = time.perf_counter() - start
        if result.status == "graded":
            _read_report(result, report, proc.returncode, log)
    return result


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kill the grader and the kernel it started (its own session on POSIX)."""
    if hasattr(os, "killpg"):
        os.killpg(proc.pid, signal.SIGKILL)
    else:  # Windows has no process groups here: the kernel may linger
        proc.kill()


def _read_report(result: Result, report: Path, returncode: int, log: Path) -> None:
    if returncode != 0 or not report.exists():
        text = log.read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        result.status = "crashed"
        result.reason = f"grader exited with {returncode}: {(lines or ['?'])[-1][:200]}"
        return
    data = json.loads(report.read_text())
    result.possible = data["possible"]
    result.tasks, result.cases = data["tasks"], data["cases"]
    if data["error"]:
        result.status, result.reason = "crashed", data["error"]
        result.tasks = dict.fromkeys(result.tasks, 0.0)
        result.cases = dict.fromkeys(result.cases, 0.0)
    result.total = sum(result.tasks.values())


def _one(autograder: str, notebook: str, report: str) -> None:
    """Child process: `otter run` one notebook, write per-task and per-case points."""
    from otter.run import main as otter_run

    results = otter_run(notebook, autograder=autograder, output_dir=None, no_logo=True)
    tasks, cases = {}, {}
    for key, test_file in sorted(results.results.items()):
        task = task_label(key)
        tasks[task] = float(test_file.score)
        for i, tcr in enumerate(test_file.test_case_results, 1):
            cases[case_label(task, i, tcr.test_case)] = (
                float(tcr.test_case.points) if tcr.passed else 0.0)
    error = results.catastrophic_error
    Path(report).write_text(json.dumps({
        "tasks": tasks, "cases": cases, "possible": float(results.possible),
        "error": f"{type(error).__name__}: {error}" if error else ""}))


def task_label(question: str) -> str:
    """'task_2_1' -> 'Task 2.1', the ID the notebook's header uses."""
    m = re.fullmatch(r"task_(\d+)_(\d+)", question)
    return f"Task {m[1]}.{m[2]}" if m else question


def case_label(task: str, index: int, case) -> str:
    """'Task 2.1 #3 hidden: random ops are never folded (2 pt)'.

    The description is the case's `failure_message` (otter keeps no comments)."""
    kind = "hidden" if case.hidden else "public"
    what = f": {case.failure_message}" if case.failure_message else ""
    return f"{task} #{index} {kind}{what} ({case.points:g} pt)"


def grade(lab: int | str, folder: Path, out: Path | None = None, timeout: float = 300,
          workers: int | None = None, dist: Path = DIST) -> list[Result]:
    """Grade every submission in `folder`; write scores.csv and summary.txt in `out`."""
    rel = release(lab, dist)
    if not rel.autograder.exists():
        build([int(str(lab).removeprefix("lab"))], dist)
    # beside the releases (git-ignored) but outside them: `build` does not wipe grades
    out = Path(out or dist / "grades" / _lab_name(lab))
    if not Path(folder).is_dir():
        raise SystemExit(f"{folder} is not a folder: SUBMISSIONS must name the folder "
                         "holding one notebook per student")
    jobs = submissions(Path(folder))
    if not jobs:
        raise SystemExit(f"no submissions in {folder}")
    start = time.perf_counter()
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        results = list(pool.map(
            lambda job: grade_one(*job, rel.autograder, timeout, out / "logs"), jobs))
    write_csv(results, out / "scores.csv")
    text = summary(lab, results, time.perf_counter() - start, workers)
    (out / "summary.txt").write_text(text)
    print(text)
    print(f"scores: {out / 'scores.csv'}\nlogs:   {out / 'logs'}")
    return results


def write_csv(results: list[Result], path: Path) -> None:
    tasks = sorted({t for r in results for t in r.tasks}, key=_natural)
    cases = sorted({c for r in results for c in r.cases}, key=_natural)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "file", "status", "reason", "total", "possible",
                    "seconds", *tasks, *cases])
        possible = max((r.possible for r in results), default=0.0)
        for r in results:
            w.writerow([r.student, r.file, r.status, r.reason, f"{r.total:g}",
                        f"{r.possible or possible:g}", f"{r.seconds:.1f}",
                        *(f"{r.tasks.get(t, 0.0):g}" for t in tasks),
                        *(f"{r.cases.get(c, 0.0):g}" for c in cases)])


def _natural(label: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", label)]


def summary(lab, results: list[Result], wall: float, workers) -> str:
    graded = [r for r in results if r.status == "graded"]
    possible = max((r.possible for r in results), default=0.0)
    lines = [f"lab {lab}: {len(results)} submissions, {len(graded)} graded, "
             f"{len(results) - len(graded)} given zero, in {wall:.1f} s "
             f"on {workers or os.cpu_count()} workers"]
    if graded:
        totals = [r.total for r in graded]
        times = [r.seconds for r in graded]
        mean = statistics.mean(totals)
        lines.append(f"score (graded): mean {mean:.2f} / {possible:g}, "
                     f"median {statistics.median(totals):g}, min {min(totals):g}, "
                     f"max {max(totals):g}")
        lines.append(f"seconds per submission: median {statistics.median(times):.1f}, "
                     f"max {max(times):.1f}")
    for r in results:
        if r.status != "graded":
            lines.append(f"  zero for {r.student} ({r.file}): {r.status}: {r.reason}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["_one"]:
        return _one(*argv[1:4])
    parser = argparse.ArgumentParser(prog="grade.py",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="otter assign every lab into labs/dist")
    b.add_argument("labs", nargs="*", type=int)
    g = sub.add_parser("grade", help="grade every submission in a folder")
    g.add_argument("lab")
    g.add_argument("submissions", type=Path)
    g.add_argument("--out", type=Path)
    g.add_argument("--timeout", type=float, default=300, help="seconds per submission")
    g.add_argument("--workers", type=int, default=None, help="default: one per core")
    args = parser.parse_args(argv)
    if args.cmd == "build":
        for lab, rel in build(args.labs).items():
            print(f"lab {lab}: {rel.student.relative_to(ROOT)}  "
                  f"{rel.autograder.relative_to(ROOT)}")
    else:
        grade(args.lab, args.submissions, args.out, args.timeout, args.workers)


if __name__ == "__main__":
    main()
