"""Shared fixtures: deterministic seeds and the reference models."""

import os

import pytest
import torch
from hypothesis import settings

os.environ.setdefault("PYTHONHASHSEED", "0")

# CI (which sets CI=...) runs the same Hypothesis examples every time, so a red run can be
# reproduced from a clean clone; tests keep their own max_examples. Locally, examples vary.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
