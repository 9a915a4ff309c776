"""`make grade`: every submission of a class folder, in parallel, each in its sandbox.

Each run writes into a fresh folder OUT/<lab>/<UTC time> that holds a file
INCOMPLETE until the run has finished; `latest` points at the last finished run. A
second section or a re-run never overwrites an earlier scores.csv.
"""

from __future__ import annotations

import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from . import feedback, gradebook, report, sandbox
from .build import DIST, build, lab_name, lab_number, release
from .grade import Context, Result, grade_one, sha256


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(key, path) per hand-in: a file, or the newest notebook of a sub-folder.

    The key is the path relative to the class folder, so `dup.ipynb` and
    `dup/lab2.ipynb` are two rows. gradebook.collect reads the layouts.
    """
    return [(e.key, e.path) for e in gradebook.collect(folder)]


def _refuse_unsafe() -> None:
    why = sandbox.why_unavailable()
    if why:
        raise SystemExit(
            "grade: refusing to run students' code without a sandbox: " + why + ".\n"
            "Without it a submission can read the hidden tests, overwrite other "
            "students' hand-ins and the scores, and reach the grader.\n"
            "Pass --unsafe to grade anyway (only for code you trust).")


def grade(lab, folder: Path, out: Path | None = None,
          timeout: float = Context.timeout,
          workers: int | None = None, dist: Path = DIST, unsafe: bool = False,
          secret: Path | None = None, case_timeout: float = Context.case_timeout,
          cell_timeout: float = Context.cell_timeout, student: str | None = None,
          deadline: str | None = None, late_penalty: float = 0.0) -> list[Result]:
    """Grade every submission in `folder` into a fresh folder under `out`.

    With `student`, only that student's hand-in is graded, into the latest run's
    gradebook.csv and feedback (the rest of the sheet is kept).
    """
    lab = lab_number(lab)
    if not unsafe:
        _refuse_unsafe()
    folder = Path(folder)
    if not folder.is_dir():
        raise SystemExit(f"{folder} is not a folder: SUBMISSIONS must name the folder "
                         "holding one notebook per student")
    entries = gradebook.collect(folder)
    if student:
        entries = [e for e in entries if e.student_id == student]
        if not entries:
            raise SystemExit(f"no hand-in of student {student} in {folder}")
    if not entries:
        raise SystemExit(f"no submissions in {folder}")
    jobs = list(dict.fromkeys((e.key, e.path) for e in entries))
    rel = release(lab, dist)
    if not rel.autograder.exists():
        build([lab], dist)
    base = Path(out or Path(dist) / "grades") / lab_name(lab)
    run_dir = base / "latest" if student else None
    if student and not (run_dir / "gradebook.csv").exists():
        raise SystemExit(f"no graded class in {base}: grade the whole class first")
    run_dir = run_dir.resolve() if student else _fresh_folder(base)
    key = _secret(secret)
    ctx = Context.for_lab(lab, dist, run_dir / "logs", key, timeout=timeout,
                          case_timeout=case_timeout, cell_timeout=cell_timeout,
                          unsafe=unsafe)
    before = sha256(rel.autograder)
    start = time.monotonic()
    workers = workers or os.cpu_count() or 1
    results = _run_all(jobs, ctx, workers)
    for r in results:  # a folder with several notebooks: say which one was graded
        entry = next(e for e in entries if e.key == r.student)
        rest = gradebook.others(entry)
        if rest:
            r.notes.append(f"graded {entry.key}, the newest of {len(rest) + 1} "
                           f"notebooks in its folder (not {', '.join(rest[:5])})")
            r.review.append(r.notes[-1])
    wall = time.monotonic() - start
    after = sha256(rel.autograder)
    if after != before:
        raise SystemExit(f"the autograder zip changed during the run: {rel.autograder}")
    by_key = {r.student: r for r in results}
    rows = gradebook.rows(entries, by_key, gradebook.parse_deadline(deadline),
                          late_penalty)
    gradebook.write(run_dir / "gradebook.csv", rows, merge=bool(student))
    feedback.write_all(run_dir / "feedback", lab, ctx.cases, results)
    if student:
        with open(run_dir / "regrades.txt", "a") as f:
            f.write(f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ} {student}: "
                    f"{results[0].total:g} / {results[0].possible:g}\n")
        print(f"regraded {student}: {results[0].total:g} / {results[0].possible:g} "
              f"into {run_dir / 'gradebook.csv'}")
        return results
    report.write(run_dir, lab, results, wall, workers, before, unsafe, key is not None)
    return results


def _run_all(jobs, ctx, workers) -> list[Result]:
    """grade_one for every (key, path), `workers` at a time, one uid per worker."""
    uids = queue.Queue()
    for i in range(workers):
        uids.put(sandbox.UID_BASE + i)

    def one(job):
        uid = uids.get()
        try:
            return grade_one(*job, ctx, uid)
        finally:
            uids.put(uid)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, jobs))


def _secret(path: Path | None) -> bytes | None:
    """The instructor's secret: --secret FILE or $GRADER_SECRET (a file path)."""
    path = path or os.environ.get("GRADER_SECRET")
    if not path:
        return None
    data = Path(path).read_bytes().strip()
    if len(data) < 16:
        raise SystemExit(f"the secret in {path} is too short (16 bytes at least)")
    return data


def _fresh_folder(base: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        path = base / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        (path / "INCOMPLETE").write_text("grading is running or was interrupted\n")
        return path
    raise SystemExit(f"cannot make a fresh folder in {base}")
