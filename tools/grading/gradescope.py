"""Gradescope's run_autograder: the same runner and checks, results.json out.

    python -m grading.gradescope LAB /autograder

Gradescope unpacks the zip into /autograder/source, the hand-in into
/autograder/submission, and shows /autograder/results/results.json to the student.
Its container runs this as root. Where it allows bubblewrap, each hand-in is jailed
as on your machine; where it does not (no user or mount namespaces in the
container), the runner still runs in its own process as an unprivileged user, under
the same rlimits, with the autograder's folders closed to that user. Each test
shows what it checks and, when it failed, why (feedback.py); a hidden test never
shows its code.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from . import answers, feedback, grade, sandbox
from .build import FORBIDDEN, FORBIDDEN_IN


def main(lab: int, root: Path) -> dict:
    source, results = root / "source", root / "results"
    results.mkdir(parents=True, exist_ok=True)
    unsafe = sandbox.why_unavailable() is not None
    if os.geteuid() == 0:
        if unsafe:  # only the grader may read tests and results
            for folder in (source, results, root / "submission"):
                os.chmod(folder, 0o700)
        grade.RUNNER, grade.STUDENT, *wire = _readable_scripts()
        grade.WIRE = tuple(wire)
    secret = source / "secret"
    ctx = grade.Context(
        lab, answers.read_cases(source), answers.provided(source / "release.ipynb"),
        answers.answer_names(source / "release.ipynb"), FORBIDDEN.get(lab, ()),
        results / "logs", _seed(secret, lab), unsafe=unsafe,
        forbidden_in=FORBIDDEN_IN.get(lab, {}))
    notebooks = sorted((root / "submission").rglob("*.ipynb"))
    path = notebooks[0] if len(notebooks) == 1 else root / "submission"
    r = grade.grade_one(path.name, path, ctx, sandbox.UID_BASE)
    note = "graded without a sandbox on this platform" if unsafe else ""
    data = feedback.results_json(ctx.cases, r, note)
    (results / "results.json").write_text(json.dumps(data, indent=1))
    return data


def _readable_scripts() -> tuple[Path, ...]:
    """Copies of runner.py, student.py and the wire's files the sandboxes'
    unprivileged users can read.

    The zip stores them as 0644, but an unpacker that ignores modes or a strict umask
    would leave them 0600 (root's): every case would then die before the first cell.
    """
    jail = Path("/tmp/graphopt-runner")
    jail.mkdir(mode=0o755, exist_ok=True)
    os.chmod(jail, 0o755)
    copies = []
    for path in (grade.RUNNER, grade.STUDENT, *grade.WIRE):
        copy = Path(shutil.copy(path, jail))
        os.chmod(copy, 0o644)
        copies.append(copy)
    return tuple(copies)


def _seed(secret: Path, lab: int) -> str:
    import hmac
    if not secret.exists():
        return "public"
    return hmac.new(secret.read_bytes().strip(), f"lab{lab}".encode(),
                    "sha256").hexdigest()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main(int(sys.argv[1]), Path(sys.argv[2]))
