"""Shared fixtures: deterministic seeds and the reference models."""

import os

import pytest
import torch
from hypothesis import settings

os.environ.setdefault("PYTHONHASHSEED", "0")
# Each xdist worker grades as sandbox uids of its own: a class run kills its uids'
# processes after each hand-in, which must never reach another worker's class run.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
os.environ.setdefault("GRAPHOPT_SANDBOX_UID_BASE", str(61000 + 100 * int(_WORKER or 0)))

# CI (which sets CI=...) runs the same Hypothesis examples every time, so a red run can be
# reproduced from a clean clone; tests keep their own max_examples. Locally, examples vary.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


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
