"""The fixed policy's scalar-maths rule (issue 21: never slower than eager by design).

numba computes tanh, log, sin and cos with a call to the C library's scalar function
per element, while torch's are vectorised: from `SCALAR_MATH_NUMEL` elements such a
CPU group runs its eager ops (and the `lower` stage says so in its notes), decided
from the shapes.
"""

from __future__ import annotations

import math

import pytest
import torch

import graphopt
from graphopt.codegen import GeneratedKernel, lower
from graphopt.passes import fuse_elementwise
from graphopt.policy import DEFAULT, SCALAR_MATH_NUMEL


class GeluTanh(torch.nn.Module):
    """GPT-2's GELU: nine elementwise ops around one tanh."""

    def forward(self, x):
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + torch.tanh(inner))


class SigmoidChain(torch.nn.Module):
    """sigmoid is written with the kernels' vectorisable EXP: the rule keeps out."""

    def forward(self, x):
        return torch.sigmoid(x * 2.0) * x + 1.0


def _fused(model, numel):
    """The model's one group, lowered: `lower`'s result (notes) and the input."""
    x = torch.randn(numel)
    grouped = fuse_elementwise(graphopt.capture(model, x))
    assert not grouped.notes  # the graph pass decides nothing about kernels
    res = lower(grouped.module)
    groups = [m for m in res.module.modules() if isinstance(m, GeneratedKernel)]
    assert len(groups) == 1
    return res, x


@pytest.mark.parametrize("numel, kernels", [(256, 1), (4 * SCALAR_MATH_NUMEL, 9)])
def test_a_tanh_group_runs_its_eager_ops_from_the_threshold(numel, kernels):
    res, x = _fused(GeluTanh(), numel)
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), GeluTanh()(x))
        assert graphopt.run(res.module, x).kernels == kernels
    notes = [n for n in res.notes
             if n.startswith("lower: fused_mul_5 runs its eager ops: tanh")]
    assert len(notes) == (kernels > 1), res.notes


def test_a_group_without_scalar_maths_keeps_its_kernel_at_any_size():
    res, x = _fused(SigmoidChain(), 4 * SCALAR_MATH_NUMEL)
    with torch.no_grad():
        assert graphopt.run(res.module, x).kernels == 1
    assert not [n for n in res.notes if "runs its eager ops" in n]


def test_the_rule_reads_ops_size_and_device_only():
    assert DEFAULT.scalar_math_eager(["mul", "tanh"], SCALAR_MATH_NUMEL, "cpu")
    assert not DEFAULT.scalar_math_eager(["mul", "tanh"], SCALAR_MATH_NUMEL - 1, "cpu")
    assert not DEFAULT.scalar_math_eager(["mul", "tanh"], 1 << 20, "cuda")
    assert not DEFAULT.scalar_math_eager(["mul", "exp", "sqrt"], 1 << 20, "cpu")


def test_an_explicit_numba_backend_still_runs_the_kernel():
    """Chapter 7's exercise times the kernel itself: backend="numba" is obeyed."""
    res, x = _fused(GeluTanh(), 4 * SCALAR_MATH_NUMEL)
    node = next(m for m in res.module.modules() if isinstance(m, GeneratedKernel))
    node.backend = "numba"
    with torch.no_grad():
        torch.testing.assert_close(node(x), GeluTanh()(x))
        assert graphopt.run(res.module, x).kernels == 1
