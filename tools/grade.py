"""Build the lab releases and grade a class folder offline, each hand-in sandboxed.

    python tools/grade.py build [LAB ...]
    python tools/grade.py grade LAB SUBMISSIONS [--out DIR] [--workers N]
        [--timeout S] [--case-timeout S] [--cell-timeout S] [--secret FILE] [--unsafe]
        [--student ID] [--deadline TIME] [--late-penalty PERCENT_PER_DAY]

The code lives in tools/grading/ (see its __init__); the threat model and the
measured grading time are on the instructors' page, book/instructors.md.
This is instructor tooling, not library code: it needs otter-grader (a dev extra)
for `build` and bubblewrap for `grade`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grading.build import ROOT, build  # noqa: E402
from grading.classrun import grade  # noqa: E402
from grading.grade import Context  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="grade.py",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="otter assign every lab into labs/dist")
    b.add_argument("labs", nargs="*", type=int)
    g = sub.add_parser("grade", help="grade every submission in a folder")
    g.add_argument("lab")
    g.add_argument("submissions", type=Path)
    g.add_argument("--out", type=Path, help="runs go to OUT/<lab>/<time>/")
    g.add_argument("--workers", type=int, default=None, help="default: one per core")
    # the defaults are grading.grade.Context's, one place for each
    g.add_argument("--timeout", type=float, default=Context.timeout,
                   help="seconds per submission, restarts included "
                   "(default %(default)g)")
    g.add_argument("--case-timeout", type=float, default=Context.case_timeout,
                   help="seconds per test case (default %(default)g)")
    g.add_argument("--cell-timeout", type=float, default=Context.cell_timeout,
                   help="seconds per notebook cell (default %(default)g)")
    g.add_argument("--secret", type=Path, default=None,
                   help="file with the instructor's secret (or $GRADER_SECRET): "
                        "hidden inputs are drawn from it")
    g.add_argument("--unsafe", action="store_true",
                   help="grade without the bubblewrap sandbox (trusted code only)")
    g.add_argument("--student", default=None,
                   help="regrade only this student id into the latest gradebook.csv")
    g.add_argument("--deadline", default=None,
                   help="ISO time, e.g. 2026-12-01T23:59+01:00 (UTC without a zone)")
    g.add_argument("--late-penalty", type=float, default=0.0,
                   help="percent of the score lost per day started after the deadline")
    args = parser.parse_args(argv)
    if args.cmd == "build":
        for lab, rel in build(args.labs).items():
            print(f"lab {lab}: {rel.student.relative_to(ROOT)}  "
                  f"{rel.autograder.relative_to(ROOT)}")
    else:
        grade(args.lab, args.submissions, args.out, args.timeout, args.workers,
              unsafe=args.unsafe, secret=args.secret, case_timeout=args.case_timeout,
              cell_timeout=args.cell_timeout, student=args.student,
              deadline=args.deadline, late_penalty=args.late_penalty)


if __name__ == "__main__":
    main()
