"""scores.csv and summary.txt of one class run."""

from __future__ import annotations

import csv
import os
import re
import statistics
from pathlib import Path


def _natural(label: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", label)]


def zero_reasons(r) -> str:
    """'Task 2.2: timeout: still running after 60 s (killed)', per task that lost."""
    parts = []
    for task in r.tasks:
        lost = [why for label, why in r.why.items() if label.startswith(task + " ")]
        if lost:
            parts.append(f"{task}: {lost[0]}")
    return "; ".join(parts)


def write_csv(results, path: Path) -> None:
    tasks = sorted({t for r in results for t in r.tasks}, key=_natural)
    cases = sorted({c for r in results for c in r.cases}, key=_natural)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "status", "reason", "total", "possible", "seconds",
                    "lost points because", "review", *tasks, *cases])
        for r in results:
            w.writerow([r.student, r.status, r.reason, f"{r.total:g}",
                        f"{r.possible:g}", f"{r.seconds:.1f}", zero_reasons(r),
                        " | ".join(r.review)[:2000],
                        *(f"{r.tasks.get(t, 0.0):g}" for t in tasks),
                        *(f"{r.cases.get(c, 0.0):g}" for c in cases)])
    os.replace(tmp, path)


def summary(lab, results, wall: float, workers: int, zip_hash: str, unsafe: bool,
            secret: bool) -> str:
    graded = [r for r in results if r.status in ("graded", "partial")]
    possible = max((r.possible for r in results), default=0.0)
    lines = [f"lab {lab}: {len(results)} submissions, {len(graded)} graded, "
             f"{len(results) - len(graded)} given zero, in {wall:.1f} s "
             f"on {workers} workers"
             + (" WITHOUT A SANDBOX (--unsafe)" if unsafe else " (sandboxed)"),
             f"autograder zip sha256 {zip_hash[:16]} (unchanged during the run); "
             "hidden inputs from "
             + ("the instructor's secret" if secret else "the public seed")]
    if graded:
        totals = [r.total for r in graded]
        times = [r.seconds for r in graded]
        lines.append(f"score (graded): mean {statistics.mean(totals):.2f} / "
                     f"{possible:g}, median {statistics.median(totals):g}, "
                     f"min {min(totals):g}, max {max(totals):g}")
        cpu = statistics.median(r.cpu for r in graded)
        lines.append(f"seconds per submission: median {statistics.median(times):.1f}, "
                     f"max {max(times):.1f}; CPU seconds: median {cpu:.1f}, so a "
                     f"class of 200 needs about {200 * cpu / 60:.0f} CPU minutes")
    for r in results:
        if r.status not in ("graded", "partial"):
            lines.append(f"  zero for {r.student}: {r.status}: {r.reason}")
        elif r.review:
            lines.append(f"  review {r.student}: {r.review[0][:160]}")
    return "\n".join(lines) + "\n"


def write(run_dir: Path, lab, results, wall, workers, zip_hash, unsafe, secret):
    write_csv(results, run_dir / "scores.csv")
    text = summary(lab, results, wall, workers, zip_hash, unsafe, secret)
    (run_dir / "summary.txt").write_text(text)
    (run_dir / "INCOMPLETE").unlink()
    latest = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, latest)
    print(text, end="")
    print(f"scores: {run_dir / 'scores.csv'}\nlogs:   {run_dir / 'logs'}")
