"""Tag each section's key figure for its slide, from the table below.

    python tools/site/slide_tags.py [--check] [--book book]

`make slides` (tools/site/slides.py) puts on a section's slide the output of the
section's code cell tagged `slides`, else its first drawing. The table `KEY_CELLS`
names, per chapter, the cells (by their nbformat `id`, which stays the same when a
chapter is edited or re-executed) whose figure is their section's key slide; this
script writes the tag into the chapters, so the choice lives in one committed place
and the decks keep it when the chapters are re-executed.

Idempotent: a listed cell gains the tag, a cell not listed loses it, and a chapter
is rewritten only when a tag changed (with nbformat, as nbconvert writes it).
`--check` changes nothing and exits 1 when a chapter's tags differ from the table.
An id the chapter does not have is an error that names it: choose another cell.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

TAG = "slides"
BOOK = Path(__file__).resolve().parents[2] / "book"
# chapter -> the code cells whose drawing or plot is their section's key slide, in
# the order of the sections (read from the chapters on 2026-12-06)
KEY_CELLS = {
    "01_graphs_and_operators": [
        "52069971",  # 1.1 SeedConvBlock, module level
        "f64a470d",  # 1.2 the autograd graph of the linear-regression loss
        "ad9db270",  # 1.3 the memory hierarchy: how hard each class is to fuse
        "ed584ecf",  # 1.6 BasicBlock's ops by parallel level
        "a613725c",  # 1.7 the chapter's concepts as a graph
    ],
    "02_static_and_dynamic": [
        "8daf8aa7",  # 2.1 AddMul's graph
        "e0d6464d",  # 2.2 torch.export's graph
        "988cd4c2",  # 2.3 export's cond: the branch as a subgraph
    ],
    "03_constant_folding": [
        "3a23c75d",  # 3.1 ScalarConstants, captured
        "92255254",  # 3.2 tensor constants stay in the graph
        "cf9ab5f4",  # 3.3 after fold_constants
    ],
    "04_operator_fusion": [
        "bcf7c547",  # 4.1 conv, BN, ReLU: three operators
        "22a58107",  # 4.3 Conv+BN+ReLU after fuse_patterns
        "4fe8ef9d",  # 4.4 an elementwise chain, fused
    ],
    "05_writing_a_pass": [
        "67d8fb3e",  # 5.1 Gate's graph
        "4b0e5e8c",  # 5.5 after dead-code elimination
        "aab55e06",  # 5.7 after common-subexpression elimination
        "04a2cf7b",  # 5.9 Gate after fuse_silu, DCE and CSE
    ],
    "06_fused_kernels": [
        "91aac145",  # 6.5 the roofline of this machine
    ],
    "07_real_models": [
        "b40ec6bd",  # 7.4 against inductor and ONNX Runtime
    ],
}


def retag(nb, ids: list[str], chapter: str) -> bool:
    """Set the tag on exactly the cells `ids` of `nb`; True when something changed."""
    have = {cell.get("id") for cell in nb.cells}
    missing = [i for i in ids if i not in have]
    if missing:
        raise SystemExit(f"slide_tags: {chapter} has no cell with id {missing}: "
                         "pick the section's key figure again in KEY_CELLS")
    changed = False
    for cell in nb.cells:
        tags = list(cell.metadata.get("tags", []))
        want = cell.get("id") in ids
        if want == (TAG in tags):
            continue
        tags = tags + [TAG] if want else [t for t in tags if t != TAG]
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        changed = True
    return changed


def apply(book: Path = BOOK, check: bool = False) -> list[str]:
    """Tag every chapter of `book` from `KEY_CELLS`; the chapters that changed (or,
    with `check`, would change)."""
    changed = []
    for chapter, ids in KEY_CELLS.items():
        path = book / f"{chapter}.ipynb"
        nb = nbformat.read(path, as_version=4)
        if retag(nb, ids, chapter):
            changed.append(chapter)
            if not check:
                nbformat.write(nb, path)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 when a chapter is not tagged")
    parser.add_argument("--book", type=Path, default=BOOK)
    args = parser.parse_args(argv)
    changed = apply(args.book, args.check)
    verb = "would retag" if args.check else "retagged"
    print(f"slide_tags: {verb} {len(changed)} chapter(s)"
          + (f": {', '.join(changed)}" if changed else ""))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
