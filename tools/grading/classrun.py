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

from . import feedback, report, sandbox
from .build import DIST, build, lab_name, lab_number, release
from .grade import Context, Result, grade_one, sha256


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(key, path) per hand-in: a file, or a sub-folder holding one notebook.

    The key is the path relative to the class folder, so `dup.ipynb` and
    `dup/lab2.ipynb` are two rows.
    """
    found = []
    for path in sorted(Path(folder).iterdir()):
        if path.name.startswith((".", "__")):
            continue
        if path.is_dir():
            notebooks = sorted(path.glob("*.ipynb"))
            path = notebooks[0] if len(notebooks) == 1 else path
        found.append((str(path.relative_to(folder)), path))
    return found


def _refuse_unsafe() -> None:
    why = sandbox.why_unavailable()
    if why:
        raise SystemExit(
            "grade: refusing to run students' code without a sandbox: " + why + ".\n"
            "Without it a submission can read the hidden tests, overwrite other "
            "students' hand-ins and the scores, and reach the grader.\n"
            "Pass --unsafe to grade anyway (only for code you trust).")


def grade(lab, folder: Path, out: Path | None = None, timeout: float = 300,
          workers: int | None = None, dist: Path = DIST, unsafe: bool = False,
          secret: Path | None = None, case_timeout: float = 60,
          cell_timeout: float = 120) -> list[Result]:
    """Grade every submission in `folder` into a fresh folder under `out`."""
    lab = lab_number(lab)
    if not unsafe:
        _refuse_unsafe()
    folder = Path(folder)
    if not folder.is_dir():
        raise SystemExit(f"{folder} is not a folder: SUBMISSIONS must name the folder "
                         "holding one notebook per student")
    jobs = submissions(folder)
    if not jobs:
        raise SystemExit(f"no submissions in {folder}")
    rel = release(lab, dist)
    if not rel.autograder.exists():
        build([lab], dist)
    run_dir = _fresh_folder(Path(out or Path(dist) / "grades") / lab_name(lab))
    key = _secret(secret)
    ctx = Context.for_lab(lab, dist, run_dir / "logs", key, timeout=timeout,
                          case_timeout=case_timeout, cell_timeout=cell_timeout,
                          unsafe=unsafe)
    before = sha256(rel.autograder)
    workers = workers or os.cpu_count() or 1
    uids = queue.Queue()
    for i in range(workers):
        uids.put(sandbox.UID_BASE + i)

    def one(job):
        uid = uids.get()
        try:
            return grade_one(*job, ctx, uid)
        finally:
            uids.put(uid)

    start = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(one, jobs))
    wall = time.monotonic() - start
    after = sha256(rel.autograder)
    if after != before:
        raise SystemExit(f"the autograder zip changed during the run: {rel.autograder}")
    feedback.write_all(run_dir / "feedback", lab, ctx.cases, results)
    report.write(run_dir, lab, results, wall, workers, before, unsafe, key is not None)
    return results


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
