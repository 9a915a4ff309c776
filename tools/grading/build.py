"""`make labs`: otter assign every master notebook into labs/dist.

Per lab: labs/dist/<lab>/student/<labN>.ipynb (the hand-out),
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
LABS = {
    1: "lab1_graphs_and_operators",
    2: "lab2_constant_folding",
    3: "lab3_operator_fusion",
    4: "lab4_write_a_pass",
    5: "lab5_static_and_dynamic",  # chapter 2; numbered 5 so labs 1-4 keep their names
}
# Library code that solves a lab's tasks: using it costs the task's points.
FORBIDDEN = {2: ("graphopt.passes", "graphopt.optimize"),
             3: ("graphopt.passes", "graphopt.optimize"),
             4: ("graphopt.passes", "graphopt.optimize"),
             5: ("graphopt.compare", "graphopt.compare_capture", "graphopt.passes",
                 "graphopt.optimize")}


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
        _add_platform_files(rel.autograder, wheel, lab)
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


def _add_platform_files(zip_path: Path, wheel: Path, lab: int) -> None:
    """Make the zip grade with this grader on a course platform, not with otter's.

    Adds the packages the labs import to environment.yml (Gradescope builds its image
    from it; CPU torch, the default index serves a CUDA build of several GB), the
    graphopt wheel, this grading package, and a run_autograder that calls it.
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
    student = zip_path.parent / "student" / f"lab{lab}.ipynb"
    entries["release.ipynb"] = (zipfile.ZipInfo("release.ipynb"), student.read_bytes())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        name = f"grading/{path.name}"
        entries[name] = (zipfile.ZipInfo(name), path.read_bytes())
    run = entries["run_autograder"][0]
    entries["run_autograder"] = (run, _RUN_AUTOGRADER.format(lab=lab).encode())
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in entries.values():
            z.writestr(info, data)


# what the labs import besides torch (graphopt's own dependencies)
_PLATFORM_PACKAGES = ("numpy", "numba", "graphviz", "matplotlib", "ipywidgets")

# Gradescope runs this as root in its container: the same runner, sandboxed when the
# container allows bubblewrap, else in a separate process as an unprivileged user.
_RUN_AUTOGRADER = """#!/bin/bash
export PATH=/root/miniforge3/bin:$PATH
eval "$(mamba shell hook --shell bash)"
mamba activate otter-env
cd /autograder/source
python -m grading.gradescope {lab} /autograder
"""
