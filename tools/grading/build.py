"""`make labs`: otter assign every master notebook into labs/dist.

Per lab: labs/dist/<lab>/student/<labN>.ipynb (the hand-out) and <labN>_zh.ipynb (the
same hand-out in Chinese, tools/i18n/labs.py),
labs/dist/<lab>/autograder.zip (what a course platform such as Gradescope takes) and
labs/dist/<lab>/autograder/<labN>.ipynb (the solution notebook, outputs stripped).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

from . import handout

ROOT = Path(__file__).resolve().parents[2]
LABS_DIR = ROOT / "labs"
DIST = LABS_DIR / "dist"
LABS = {  # one lab per chapter, in the chapters' order
    1: "lab1_graphs_and_operators",
    2: "lab2_static_and_dynamic",
    3: "lab3_constant_folding",
    4: "lab4_operator_fusion",
    5: "lab5_write_a_pass",
    6: "lab6_fused_kernels",
    7: "lab7_real_models",
}
# Library code that solves a lab's tasks: using it in an answer costs the task's
# points (a call from a scratch cell outside the tests is only noted).
# `graphopt.optimize` is a name; its module, `graphopt.optimizer`, and the stage
# driver, `graphopt.stages`, run the pass table they imported (not the spied
# functions), so they are banned by their own names too.
OPTIMIZE = ("graphopt.optimize", "graphopt.optimizer", "graphopt.stages")
FORBIDDEN = {1: ("graphopt.kind", "graphopt.ops"),  # Task 1.2 rebuilds kind()
             2: ("graphopt.compare", "graphopt.compare_capture", "graphopt.passes",
                 *OPTIMIZE),
             3: ("graphopt.passes", *OPTIMIZE),
             4: ("graphopt.passes", *OPTIMIZE),
             5: ("graphopt.passes", *OPTIMIZE),
             6: ("graphopt.codegen", "graphopt.passes", *OPTIMIZE),
             7: ("graphopt.passes.legality", "graphopt.passes.fuse_elementwise",
                 "graphopt.dataflow", "graphopt.measure", "graphopt.peers")}
# Library code one task forbids and the rest of its lab uses: {lab: {task: names}}.
# Only the task's own answers may not use it (its functions, and whatever they call
# while its tests run); a scratch cell that checks an answer with it is fine.
FORBIDDEN_IN = {
    1: {"task_1_3": ("graphopt.run", "graphopt.interpret"),  # the formula, by hand
        "task_1_4": ("graphopt.levels", "graphopt.dataflow")},
    4: {"task_4_4": ("graphopt.run", "graphopt.interpret")},
}
# "Predict before you run" answers: graded only as literals the student wrote out
# (answers.pin_predictions); a computed one costs the checks that read it.
PREDICTIONS = {2: ("FLATTEN_COUNTS", "PREDICTED")}


def lab_number(lab: int | str) -> int:
    number = int(str(lab).removeprefix("lab"))
    if number not in LABS:
        raise SystemExit(f"unknown lab {lab}; choose one of {sorted(LABS)}")
    return number


def lab_name(lab: int | str) -> str:
    return LABS[lab_number(lab)]


def master(lab: int | str) -> Path:
    """The otter master notebook of a lab (solutions and hidden tests inside).

    $GRAPHOPT_LAB_MASTERS points at a private copy of labs/ (same layout): the
    masters in the public repository are readable by anyone who clones it.
    """
    name = lab_name(lab)
    base = Path(os.environ.get("GRAPHOPT_LAB_MASTERS") or LABS_DIR)
    return base / name / f"lab{name[3]}.ipynb"


@dataclass
class Release:
    """What `build` wrote for one lab."""

    student: Path
    autograder: Path
    solution: Path


def release(lab: int | str, dist: Path = DIST) -> Release:
    name = lab_name(lab)
    nb = f"lab{name[3]}.ipynb"
    out = Path(dist) / name
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

    labs = sorted(lab_number(lab) for lab in (labs or LABS))
    dist = Path(dist)
    dist.mkdir(parents=True, exist_ok=True)
    wheel = _graphopt_wheel(dist)
    releases = {}
    for lab in labs:
        out = dist / lab_name(lab)
        shutil.rmtree(out, ignore_errors=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            otter_assign(str(master(lab)), str(out), no_pdfs=True, no_run_tests=True)
        rel = release(lab, dist)
        stamped = sorted((out / "autograder").glob("*.zip"))  # the name holds the time
        if not stamped or not rel.student.exists():
            raise RuntimeError(f"otter assign wrote no release for lab {lab} in {out}")
        stamped[-1].replace(rel.autograder)
        for notebook in (rel.student, rel.solution):  # any file name works
            handout.rewrite_init(notebook, f"lab{lab}")
        _chinese_handout(rel.student, lab)
        _add_platform_files(rel.autograder, wheel, lab)
        releases[lab] = rel
    return releases


def _chinese_handout(student: Path, lab: int) -> None:
    """The Chinese hand-out beside the English one: its code cells, tests and otter
    metadata are the English file's, only the markdown is translated (from
    labs/locales), so the same autograder grades both."""
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    from i18n.labs import write_handout

    report = write_handout(student, lab_name(lab))
    if report.untranslated:
        print(f"lab {lab} (zh): {report.summary()}")


def _graphopt_wheel(dist: Path) -> Path:
    """A wheel of this checkout: a course platform's grader installs it from the zip."""
    out = dist / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True)
    return next(out.glob("graphopt-*.whl"))


def _add_platform_files(zip_path: Path, wheel: Path, lab: int) -> None:
    """Make the zip grade with this grader on a course platform, not with otter's.

    Replaces otter's environment.yml by the packages grading needs (Gradescope builds
    its image from it; CPU torch, the default index serves a CUDA build of several
    GB) and otter's setup.sh by one that installs only those (no Playwright, no
    Chromium, no LaTeX: grading draws nothing). Adds the graphopt wheel, this grading
    package, and a run_autograder that calls it. Every entry gets an explicit mode:
    `unzip` (what Gradescope runs) restores the modes stored in the zip, and a
    runner.py stored as 0600 cannot be read by the sandbox's unprivileged user.
    """
    import yaml

    with zipfile.ZipFile(zip_path) as z:
        entries = {info.filename: z.read(info) for info in z.infolist()}
    env = yaml.safe_load(entries["environment.yml"])
    env["dependencies"] = _environment(env["dependencies"], wheel)
    entries["environment.yml"] = yaml.safe_dump(env, sort_keys=False).encode()
    entries["setup.sh"] = _SETUP.encode()
    entries[wheel.name] = wheel.read_bytes()
    student = zip_path.parent / "student" / f"lab{lab}.ipynb"
    entries["release.ipynb"] = student.read_bytes()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        entries[f"grading/{path.name}"] = path.read_bytes()
    for name, path in _catalogs().items():  # a Chinese hand-in's feedback
        entries[name] = path.read_bytes()
    entries["run_autograder"] = _RUN_AUTOGRADER.format(lab=lab).encode()
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(zip_entry(name), data)


def _catalogs() -> dict[str, Path]:
    """{name in the zip: file} of the compiled catalogs feedback reads: the
    grader's and the lab tests' (lab_messages.py finds them under grading/locale
    where the repository's labs/locales is not)."""
    from . import lab_messages

    here = Path(__file__).parent
    found = {f"grading/{mo.relative_to(here)}": mo
             for mo in sorted(here.glob("locale/*/LC_MESSAGES/*.mo"))}
    for mo in sorted(lab_messages.LABS_LOCALE.glob(
            f"*/LC_MESSAGES/{lab_messages.DOMAIN}.mo")):
        found[f"grading/locale/{mo.relative_to(lab_messages.LABS_LOCALE)}"] = mo
    return found


def zip_entry(name: str) -> zipfile.ZipInfo:
    """A zip entry that `unzip` restores as 0644, or 0755 for the scripts it runs."""
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    mode = 0o755 if name in _SCRIPTS else 0o644
    info.external_attr = (0o100000 | mode) << 16  # S_IFREG: a regular file
    info.create_system = 3  # Unix: unzip reads the mode only from Unix entries
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _environment(dependencies: list, wheel: Path) -> list:
    """Python and pip pins for the grader image: what grading imports, nothing more.

    The grader needs IPython (it reads cells as Jupyter does) and nbformat; not
    otter-grader, whose grading extras pull in Playwright.
    """
    from importlib.metadata import version

    python = f"python={sys.version_info.major}.{sys.version_info.minor}"
    pip = ["--extra-index-url https://download.pytorch.org/whl/cpu",
           f"torch=={version('torch').split('+')[0]}",
           *(f"{name}=={version(name)}" for name in _PLATFORM_PACKAGES),
           f"/autograder/source/{wheel.name}"]
    return [python, "pip", {"pip": pip}]


# what grading and the labs import besides torch (graphopt's own dependencies)
_PLATFORM_PACKAGES = ("numpy", "numba", "graphviz", "matplotlib", "ipywidgets",
                      "ipython", "nbformat", "pyyaml")
_SCRIPTS = ("setup.sh", "run_autograder")

# Gradescope runs setup.sh once, as root, when it builds the grader image.
_SETUP = """#!/usr/bin/env bash
# Only what grading needs: bubblewrap (the sandbox), util-linux (setpriv, prlimit),
# Graphviz (graphopt.draw in a hand-in), and Python from environment.yml.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends wget ca-certificates bubblewrap \
    util-linux graphviz
arch=$(uname -m)
wget -nv "https://github.com/conda-forge/miniforge/releases/download/25.3.1-0/\
Miniforge3-Linux-${arch}.sh" -O /tmp/miniforge.sh
bash /tmp/miniforge.sh -b
export PATH=/root/miniforge3/bin:$PATH
mamba env create -f /autograder/source/environment.yml
"""

# Gradescope runs this as root in its container: the same runner, sandboxed when the
# container allows bubblewrap, else in a separate process as an unprivileged user.
# AUTOGRADER_ROOT lets a test run the unpacked zip where it is, with its own python.
_RUN_AUTOGRADER = """#!/bin/bash
set -e
ROOT=${{AUTOGRADER_ROOT:-/autograder}}
if [ -x /root/miniforge3/bin/mamba ]; then
    export PATH=/root/miniforge3/bin:$PATH
    eval "$(mamba shell hook --shell bash)"
    mamba activate otter-env
fi
cd "$ROOT/source"
exec python -m grading.gradescope {lab} "$ROOT"
"""
