"""Shared fixtures: deterministic seeds and the reference models."""

import os
from collections import Counter

import pytest
import torch
from hypothesis import settings

os.environ.setdefault("PYTHONHASHSEED", "0")
# Each xdist worker grades as sandbox uids of its own: a class run kills its uids'
# processes after each hand-in, which must never reach another worker's class run.
# Set, not setdefault: the workers inherit the controller's environment, and the
# controller loads this file too (with setdefault every worker kept 61000).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")
if _WORKER.isdigit():
    os.environ["GRAPHOPT_SANDBOX_UID_BASE"] = str(61100 + 100 * int(_WORKER))

# CI (which sets CI=...) runs the same Hypothesis examples every time, so a red run can be
# reproduced from a clean clone; tests keep their own max_examples. Locally, examples vary.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# The files that take longest, longest first: the seconds are a file's entries among
# the 60 slowest of the CI run of 2026-12-07 (2-core build machine; its fixtures and
# tests together, a lower bound). `make test`'s two workers take whole files
# (--dist loadfile) in this order (--no-loadscope-reorder; xdist's own order, most
# tests first, started the accessibility audit 65th of 83 files and the bounds,
# browser and JupyterLab files, 1-4 tests each, last, where one worker could run them
# alone while the other had nothing left); the rest follow, most tests first, so the
# run ends on short files.
SLOWEST_FILES = (
    "test_grading_attacks.py",  # 305 s: lab 3's class of attacks, lab 4's
    "test_grading_labs.py",  # 219 s: labs 1, 2, 6, 7 graded with a secret
    "test_labs.py",  # 167 s: every lab's solution and gaming hand-ins
    "test_site.py",  # 122 s: pages in the browser (224 tests, most below 6 s)
    "test_accessibility.py",  # 189 s before each page served both modes
    "test_explorer_browser.py",  # 71 s
    "test_explorer_static_bounds.py",  # 46 s
    "test_entry_point_bounds.py",  # 36 s without ResNet-34's static explorer
    "test_policy_determinism.py",  # 32 s
    "test_jupyterlab.py",  # 23 s
    "test_i18n_labs.py",  # 23 s: the Chinese hand-ins graded
    "test_grading_language.py",  # 17 s
    "test_jupyterlab_zh.py",  # 15 s
)


def pytest_collection_modifyitems(items):
    """Files in SLOWEST_FILES' order, then the others by number of tests (each
    file's tests stay together and in their order)."""
    count = Counter(item.path.name for item in items)

    def rank(item):
        name = item.path.name
        first = SLOWEST_FILES.index(name) if name in SLOWEST_FILES else len(SLOWEST_FILES)
        return first, -count[name]

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def small_work_fused(monkeypatch):
    """The fixed policy without its rules on small work (a conv or linear below
    `small_gemm_flops` unfused, a linear below `onednn_gemm_flops` on MKL, a group
    of one or two ops, or reading as many tensors as it has ops, below
    `short_group_numel` as its eager ops): for tests of the fused kernels themselves
    on shapes small enough to run fast. The rules are tested in
    tests/test_policy_small_ops.py and tests/test_gemm_choice.py."""
    from graphopt.policy import Policy

    monkeypatch.setattr(Policy, "too_small_for_onednn", lambda self, flops, grouped=False: "")
    monkeypatch.setattr(Policy, "short_group_eager", lambda self, *args: "")
    monkeypatch.setattr(Policy, "mkl_call_shorter", lambda self, flops: False)
