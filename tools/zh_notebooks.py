"""Chinese notebooks from the English ones and the gettext catalogs.

    python tools/zh_notebooks.py book [PAGE ...] [--out DIR] [--complete]
        render the book's chapters and pages into book/_build/notebooks_zh/
        (what `make lab LANG=zh` opens); PAGE: a name prefix such as 05
    python tools/zh_notebooks.py extract [LAB ...]
        write labs/locales/zh_CN/LC_MESSAGES/<lab>.po from the lab masters
        (after editing a master; translations of unchanged text are kept)

The code lives in tools/i18n/ (see its __init__). `make labs` writes each lab's
Chinese hand-out (labs/dist/<lab>/student/labN_zh.ipynb) with the same code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from i18n import book, labs  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="zh_notebooks.py",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("book", help="render the Chinese book for JupyterLab")
    b.add_argument("pages", nargs="*")
    b.add_argument("--out", type=Path, default=book.OUT)
    b.add_argument("--complete", action="store_true",
                   help="fail when a block has no reviewed translation")
    e = sub.add_parser("extract", help="lab masters -> labs/locales catalogs")
    e.add_argument("labs", nargs="*", type=int)
    args = parser.parse_args(argv)
    if args.cmd == "extract":
        return _extract(args.labs)
    reports = book.render_all(args.pages, args.out)
    for report in reports:
        print(report.summary())
    missing = sum(len(r.untranslated) for r in reports)
    print(f"{len(reports)} pages in {args.out}; {missing} blocks still in English")
    return 1 if args.complete and missing else 0


def _extract(numbers: list[int]) -> int:
    from grading.build import LABS, master

    for number in numbers or sorted(LABS):
        count = labs.extract(master(number), LABS[number])
        print(f"lab {number}: {count} entries in "
              f"{labs.catalog_path(LABS[number]).relative_to(labs.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
