"""What each lab costs, measured: the lines a solution writes, its run, its grading.

    python -m tools.grading.labtimes [--labs 1 2 ...] [--no-run] [--dist DIR]
                                     [--out FILE]

For each lab: the lines of code the reference answers write per task (the master's
`# BEGIN SOLUTION` ... `# END SOLUTION` blocks and `# SOLUTION` lines, blank and
comment lines left out), the wall time of running the solution notebook top to
bottom in a fresh kernel, and the time to grade it as one hand-in (sandboxed when
bubblewrap is there, the tests and the hand-in in their two processes). The load
average before and after each measurement is printed beside it: on a shared
machine the times are upper bounds. A student's time is not measured here: the
lines and the run time are what an estimate can start from.
Writes a Markdown table (default benchmarks/results/labs.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grading import build, classrun, sandbox  # noqa: E402

OUT = build.ROOT / "benchmarks" / "results" / "labs.md"
_TASK = re.compile(r"^#+\s*Task (\d+)\.(\d+)", re.M)


def solution_lines(lab: int) -> dict[str, int]:
    """{'Task 1.1': lines of code its reference answers write} from the master."""
    nb = nbformat.read(build.master(lab), as_version=4)
    counts: dict[str, int] = {}
    task = None
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = _TASK.search(cell.source)
            task = f"Task {found[1]}.{found[2]}" if found else task
            continue
        if cell.cell_type != "code" or task is None:
            continue
        counts[task] = counts.get(task, 0) + _written(cell.source)
    return counts


def _written(source: str) -> int:
    """Code lines inside solution blocks, and lines marked `# SOLUTION`."""
    inside, n = False, 0
    for line in source.splitlines():
        text = line.strip()
        if text.startswith("# BEGIN SOLUTION"):
            inside = True
        elif text.startswith("# END SOLUTION"):
            inside = False
        elif text and not text.startswith("#") and (
                inside or text.endswith("# SOLUTION")):
            n += 1
    return n


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run_seconds(lab: int, dist: Path) -> tuple[float, str]:
    """Wall seconds to run the solution notebook in a fresh kernel, and the load."""
    from nbclient import NotebookClient
    rel = build.release(lab, dist)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(shutil.copy(rel.solution, folder))
        nb = nbformat.read(path, as_version=4)
        before = _load()
        start = time.perf_counter()
        NotebookClient(nb, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": folder}}).execute()
        return time.perf_counter() - start, f"{before}-{_load()}"


def grade_seconds(lab: int, dist: Path) -> tuple[float, float, float, str]:
    """(wall s, CPU s of the tests' process, score / possible) grading the solution."""
    rel = build.release(lab, dist)
    with tempfile.TemporaryDirectory() as folder:
        klass = Path(folder) / "class"
        klass.mkdir()
        shutil.copy(rel.solution, klass / "solution.ipynb")
        before = _load()
        unsafe = sandbox.why_unavailable() is not None
        result, = classrun.grade(lab, klass, out=Path(folder) / "out", workers=1,
                                 dist=dist, unsafe=unsafe)
        return (result.seconds, result.cpu, result.total / result.possible,
                f"{before}-{_load()}")


def table(rows: list[dict], run: bool) -> str:
    head = "| lab | lines written per task | total |"
    line = "|---|---|---:|"
    if run:
        head += (" solution run (s) | load | grading wall (s) | grading CPU (s) |"
                 " score | load |")
        line += "---:|---|---:|---:|---:|---|"
    out = [head, line]
    for r in rows:
        tasks = ", ".join(f"{t[5:]}: {n}" for t, n in r["lines"].items())
        cells = [str(r["lab"]), tasks, str(sum(r["lines"].values()))]
        if run:
            cells += [f"{r['run'][0]:.1f}", r["run"][1], f"{r['grade'][0]:.1f}",
                      f"{r['grade'][1]:.1f}", f"{r['grade'][2]:.0%}", r["grade"][3]]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(prog="labtimes",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--labs", nargs="*", type=int, default=sorted(build.LABS))
    parser.add_argument("--no-run", action="store_true",
                        help="count the solutions' lines only (seconds, no kernel)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--dist", type=Path, default=None,
                        help="releases already built (make labs: labs/dist)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        dist = args.dist or Path(folder) / "dist"
        if not args.no_run and args.dist is None:
            build.build(args.labs, dist)
        for lab in args.labs:
            row = {"lab": lab, "lines": solution_lines(lab)}
            if not args.no_run:
                row["run"] = run_seconds(lab, dist)
                row["grade"] = grade_seconds(lab, dist)
            rows.append(row)
            print(f"lab {lab}: {row}", flush=True)
    cpu = f"{os.cpu_count()} CPUs"
    text = ("# Lab costs, measured\n\nMade by `python -m tools.grading.labtimes` "
            f"on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu}. "
            "Load: the 1-minute load average before-after each measurement (a "
            "shared machine: times are upper bounds). Lines: code lines of the "
            "reference answers (blank and comment lines left out).\n\n"
            + table(rows, not args.no_run))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
