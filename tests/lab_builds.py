"""The labs built once per test run, shared by every test process (xdist workers).

`otter assign` and the graphopt wheel take seconds per build; test_labs,
test_grading_labs, test_grading_attacks, test_grading_language and test_i18n_labs
each built the labs they grade. `built(labs, dist)` builds every lab once into
.cache/labs/<key>/ behind a file lock and copies the labs asked for into `dist`, so
each test still owns (and may write into) its own dist. The key hashes everything a
build reads: the masters (labs/, or $GRAPHOPT_LAB_MASTERS), the grading and i18n
tools, the library and its packaging (the wheel), and the versions of the packages
the autograder's environment.yml pins; any change to them builds afresh.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from filelock import FileLock, Timeout

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))
from grading import build  # noqa: E402

CACHE = ROOT / ".cache" / "labs"
# Files and folders a build reads (relative to the repository), hashed into the key.
INPUTS = ("labs", "tools/grading", "tools/i18n", "src", "pyproject.toml", "README.md")
SKIP_DIRS = {"dist", "__pycache__", ".ipynb_checkpoints", "grades"}
PACKAGES = ("otter-grader", "torch", "nbformat", *build._PLATFORM_PACKAGES)


def _files(path: Path):
    if path.is_file():
        yield path
        return
    for sub, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not
                         d.endswith(".egg-info"))
        for name in sorted(names):
            if not name.endswith(".pyc"):
                yield Path(sub) / name


def key(roots: tuple[Path, ...] | None = None) -> str:
    """A hash of every input of `build.build`: file paths and bytes, versions."""
    h = hashlib.sha256()
    if roots is None:
        roots = tuple(ROOT / p for p in INPUTS)
        masters = os.environ.get("GRAPHOPT_LAB_MASTERS")
        if masters:
            roots += (Path(masters),)
    for root in roots:
        for path in _files(root):
            h.update(str(path.relative_to(root.parent)).encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    for name in PACKAGES:
        try:
            h.update(f"{name}=={version(name)}\0".encode())
        except PackageNotFoundError:
            h.update(f"{name} missing\0".encode())
    h.update(sys.version.encode())
    return h.hexdigest()[:20]


def cached_dist(cache: Path = CACHE, roots: tuple[Path, ...] | None = None) -> Path:
    """The folder holding every lab built from the current inputs (built if absent)."""
    folder = cache / key(roots)
    done = folder / "complete"
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            build.build(dist=folder / "dist")
            done.write_text("every lab of build.LABS\n")
            _prune(cache, keep=folder)
    return folder / "dist"


def _prune(cache: Path, keep: Path, age_s: float = 3600) -> None:
    """Remove builds of older inputs (an hour untouched, no process holding them)."""
    for old in cache.iterdir():
        if not old.is_dir() or old == keep:
            continue
        if time.time() - old.stat().st_mtime < age_s:
            continue
        try:
            with FileLock(str(old) + ".lock", timeout=0):
                shutil.rmtree(old, ignore_errors=True)
        except Timeout:
            continue


def built(labs=None, dist: Path | None = None) -> dict[int, build.Release]:
    """`build.build(labs, dist)`, from the shared cache: a copy of each lab's release."""
    labs = sorted(build.lab_number(lab) for lab in (labs or build.LABS))
    source = cached_dist()
    dist = Path(dist)
    dist.mkdir(parents=True, exist_ok=True)
    for lab in labs:
        out = dist / build.lab_name(lab)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(source / build.lab_name(lab), out)
    return {lab: build.release(lab, dist) for lab in labs}
