"""The shared lab build (tests/lab_builds.py): built once per set of inputs, built
again when any input changes, and each test gets its own copy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab_builds  # noqa: E402


@pytest.fixture
def fake_build(monkeypatch):
    """build.build replaced by one that records its calls (a real one takes seconds)."""
    calls = []

    def build(dist):
        calls.append(dist)
        (dist / "lab").mkdir(parents=True)
        (dist / "lab" / "release.txt").write_text(f"build {len(calls)}")

    monkeypatch.setattr(lab_builds.build, "build", build)
    return calls


def _inputs(tmp_path):
    labs, tools = tmp_path / "repo" / "labs", tmp_path / "repo" / "tools"
    (labs / "lab1").mkdir(parents=True)
    (labs / "lab1" / "lab1.ipynb").write_text("{}")
    tools.mkdir()
    (tools / "build.py").write_text("X = 1\n")
    return labs, tools


def test_a_second_process_reuses_the_build(tmp_path, fake_build):
    roots = _inputs(tmp_path)
    first = lab_builds.cached_dist(tmp_path / "cache", roots)
    again = lab_builds.cached_dist(tmp_path / "cache", roots)
    assert first == again and len(fake_build) == 1
    assert (first / "lab" / "release.txt").read_text() == "build 1"


@pytest.mark.parametrize("change", ["edit", "add", "rename", "version"])
def test_any_change_of_an_input_builds_again(tmp_path, fake_build, monkeypatch,
                                             change):
    labs, tools = roots = _inputs(tmp_path)
    before = lab_builds.cached_dist(tmp_path / "cache", roots)
    if change == "edit":
        (labs / "lab1" / "lab1.ipynb").write_text('{"cells": []}')
    elif change == "add":
        (tools / "secret.py").write_text("SEED = 2\n")
    elif change == "rename":
        (tools / "build.py").rename(tools / "assign.py")
    else:
        version = lab_builds.version
        monkeypatch.setattr(lab_builds, "version", lambda name: (
            "99.0" if name == "otter-grader" else version(name)))
    after = lab_builds.cached_dist(tmp_path / "cache", roots)
    assert after != before and len(fake_build) == 2
    assert (after / "lab" / "release.txt").read_text() == "build 2"


def test_compiled_files_and_built_releases_are_not_inputs(tmp_path, fake_build):
    labs, tools = roots = _inputs(tmp_path)
    before = lab_builds.key(roots)
    (tools / "__pycache__").mkdir()
    (tools / "__pycache__" / "build.cpython-312.pyc").write_bytes(b"\0")
    (labs / "dist").mkdir()
    (labs / "dist" / "lab1.ipynb").write_text("{}")
    assert lab_builds.key(roots) == before


def test_the_real_key_covers_the_masters_the_grader_and_the_library():
    assert {"labs", "tools/grading", "tools/i18n", "src",
            "pyproject.toml"} <= set(lab_builds.INPUTS)
    assert all((lab_builds.ROOT / p).exists() for p in lab_builds.INPUTS)
    assert lab_builds.key() == lab_builds.key()
