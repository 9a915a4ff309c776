"""Shared fixtures: deterministic seeds and the reference models."""

import os

import pytest
import torch

os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
