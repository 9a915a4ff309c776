"""The fixed policy's rules on small work (issue 21: never slower than eager by design).

Two fixed costs per call decide, from shapes alone, where fusing would lose:

- oneDNN's fused conv and linear kernels cost some 25 us a call before any
  arithmetic: a conv or linear pattern below `small_gemm_flops` runs its library
  ops unfused (eager conv2d, or MKL's GEMM, then the activation);
- a generated kernel's call costs more than one torch dispatch: a group of fewer
  than `short_group_ops` ops runs its eager ops below `short_group_numel` elements.

Each choice is a line of the stage's notes, and the interpreter counts what ran.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import graphopt
from graphopt import codegen
from graphopt.backend import onednn
from graphopt.passes import fuse_elementwise
from graphopt.passes.fused_modules import ConvReLU, LinearReLU
from graphopt.policy import DEFAULT, Policy


def _pattern(result, cls):
    return next(m for m in result.module.modules() if isinstance(m, cls))


def _backend_notes(result) -> list[str]:
    return [n for n in result.notes if "oneDNN's fixed cost" in n]


class LinearAct(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = nn.Linear(k, n)

    def forward(self, x):
        return torch.relu(self.fc(x))


class ConvAct(nn.Module):
    def __init__(self, c, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, groups=groups)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
@pytest.mark.parametrize("rows, small", [(4, True), (256, False)])
def test_a_small_linear_runs_unfused(rows, small):
    model, x = LinearAct(64, 64).eval(), torch.randn(rows, 64)
    res = graphopt.optimize(model, x, stats=False)
    module = _pattern(res, LinearReLU)
    flops = 2 * rows * 64 * 64 + rows * 64  # the product, then the ReLU
    assert (flops < DEFAULT.small_gemm_flops) == small
    assert (module.kernel != "onednn") == small
    assert len(_backend_notes(res)) == small, res.notes
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), model(x))
        assert graphopt.run(res.module, x).kernels == (2 if small else 1)


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
@pytest.mark.parametrize("side, small", [(16, True), (64, False)])
def test_a_small_conv_runs_eager_conv2d(side, small):
    model, x = ConvAct(8).eval(), torch.randn(1, 8, side, side)
    res = graphopt.optimize(model, x, stats=False)
    module = _pattern(res, ConvReLU)
    assert (module.kernel == "eager") == small
    assert len(_backend_notes(res)) == small, res.notes
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), model(x))
        ran = {n.name: n.kernels for n in graphopt.run(res.module, x).nodes}
    assert ran["fused_conv_relu_relu"] == (2 if small else 1), ran


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
def test_a_small_depthwise_conv_keeps_its_fused_kernel():
    """Depthwise: 9 multiply-adds per output element, so few FLOPs but a full-size
    output, the pass that fusion saves (MobileNetV3 ran slower with them unfused)."""
    model, x = ConvAct(16, groups=16).eval(), torch.randn(1, 16, 32, 32)
    res = graphopt.optimize(model, x, stats=False)
    flops = 2 * 16 * 9 * 32 * 32
    assert flops < DEFAULT.small_gemm_flops
    assert _pattern(res, ConvReLU).kernel == "onednn" and not _backend_notes(res)
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), model(x))
        ran = {n.name: n.kernels for n in graphopt.run(res.module, x).nodes}
    assert ran["fused_conv_relu_relu"] == 1, ran


class AddMul(nn.Module):
    def forward(self, a, b):
        return (a + b) * b


class AddMulReLU(nn.Module):
    def forward(self, a, b):
        return torch.relu((a + b) * b)


@pytest.mark.parametrize("model, numel, kernels", [
    (AddMul(), 1000, 2),               # two ops, small: its eager ops
    (AddMul(), 1 << 16, 1),            # two ops from short_group_numel: the kernel
    (AddMulReLU(), 16, 1),             # three ops: the kernel at any size
])
def test_a_short_group_runs_its_eager_ops_below_the_threshold(model, numel, kernels):
    a, b = torch.randn(numel), torch.randn(numel)
    res = codegen.lower(fuse_elementwise(graphopt.capture(model, a, b)).module)
    notes = [n for n in res.notes if "fixed cost per call" in n]
    assert len(notes) == (kernels > 1), res.notes
    with torch.no_grad():
        torch.testing.assert_close(res.module(a, b), model(a, b))
        assert graphopt.run(res.module, a, b).kernels == kernels


class Rotary(nn.Module):
    """Rotary embedding's combine: three ops reading four tensors."""

    def forward(self, q, cos, r, sin):
        return q * cos + r * sin


@pytest.mark.parametrize("rows, kernels", [(64, 3), (1024, 1)])
def test_a_group_reading_as_many_tensors_as_it_has_ops_runs_eager_when_small(rows,
                                                                             kernels):
    """a * b + c * d saves two dispatches but reads four tensors: below
    `operand_group_numel` (4 x 64 x 32 elements) its eager ops, from there (4 x 1024
    x 32) its kernel; relu(x * 2 + 1), three ops on one tensor, is a kernel at any
    size."""
    q, r = torch.randn(1, 4, rows, 32), torch.randn(1, 4, rows, 32)
    cos, sin = torch.randn(1, 1, rows, 32), torch.randn(1, 1, rows, 32)
    model, inputs = Rotary(), (q, cos, r, sin)
    res = codegen.lower(fuse_elementwise(graphopt.capture(model, *inputs)).module)
    notes = [n for n in res.notes if "reading 4 tensors" in n]
    assert len(notes) == (kernels > 1), res.notes
    with torch.no_grad():
        torch.testing.assert_close(res.module(*inputs), model(*inputs))
        assert graphopt.run(res.module, *inputs).kernels == kernels
    assert DEFAULT.short_group_eager(["mul", "add", "relu"], 64 * 32, operands=1) == ""


def test_the_measured_policy_leaves_short_groups_to_its_measurement():
    assert Policy.measured().short_group_eager(["add", "mul"], 16) == ""
    assert DEFAULT.short_group_eager(["add", "mul"], 16)
    assert DEFAULT.short_group_eager(["add", "mul", "relu"], 16) == ""


class TwoOutputs(nn.Module):
    def forward(self, a, b):
        s = a + b
        return s * 2.0, torch.relu(s) - b


@pytest.mark.parametrize("model", [AddMul(), AddMulReLU(), TwoOutputs()])
def test_eager_ops_run_the_group_as_its_graph_does(model):
    """The eager path of a group: the same values as the group's GraphModule, with
    every op called through its C++ entry (no fx forward in between)."""
    from graphopt.eager_ops import eager_ops

    a, b = torch.randn(8), torch.randn(8)
    grouped = fuse_elementwise(graphopt.capture(model, a, b)).module
    group = next(m for m in grouped.modules() if hasattr(m, "ops") and hasattr(m, "gm"))
    run = eager_ops(group.gm)
    assert run is not None  # plain aten ops: the direct path
    want, got = group.gm(a, b), run((a, b))
    assert type(got) is type(want)
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        assert torch.equal(w, g)


def test_eager_ops_keep_fx_for_anything_else():
    from graphopt.eager_ops import eager_ops

    gm = torch.fx.symbolic_trace(lambda x: x.sum(dim=[0]) + torch.cat([x, x]).mean())
    assert eager_ops(gm) is None  # a method call, a list of values: fx's forward


def test_lower_decides_on_the_recorded_sizes_and_a_reader_can_overrule_it():
    """Where the recorded sizes already decide (a short group on few elements), the
    node says why in `eager_why` and runs its ops with no per-call plan; a reader
    who sets `backend` gets what they ask for."""
    from graphopt.codegen.fused import _STATE

    a, b = torch.randn(1000), torch.randn(1000)
    lowered = codegen.lower(fuse_elementwise(graphopt.capture(AddMul(), a, b)).module)
    node = _pattern(lowered, codegen.GeneratedKernel)
    assert "2 ops on 1000 elements" in node.eager_why
    with torch.no_grad():
        torch.testing.assert_close(node(a, b), AddMul()(a, b))
        assert node not in _STATE  # no plan made: the ops ran
        assert codegen.plan_kind(node, (a, b)) == "reference"
        assert codegen.kernels_for(node, (a, b)) is None and node not in _STATE
        node.backend = "numba"
        torch.testing.assert_close(node(a, b), AddMul()(a, b))
        assert codegen.plan_kind(node, (a, b)) == "numba"
        assert codegen.kernels_for(node, (a, b)) == 1
        assert graphopt.run(lowered.module, a, b).kernels == 1


def test_a_group_run_by_reference_frees_each_value_after_its_last_use():
    """`eager_ops` writes the group as one function; like fx's code it drops each
    intermediate once read for the last time, so a long group on a large tensor
    holds two of them at a time, not all (the same peak memory as unfused)."""
    from graphopt.eager_ops import eager_ops

    class Chain(nn.Module):
        def forward(self, x, y):
            s = x + y
            return torch.relu(torch.sigmoid(s * 2.0) - 1.0) * s

    x, y = torch.randn(64), torch.randn(64)
    group = _pattern(fuse_elementwise(graphopt.capture(Chain(), x, y)),
                     graphopt.passes.FusedElementwise)
    run = eager_ops(group.gm)
    live, most = set(), 0  # intermediates alive after each line of the function
    for line in run.source.splitlines()[2:]:
        words = line.strip().replace(",", " ").split()
        if words[0] == "del":
            live -= set(words[1:])
        elif words[0] == "return":
            assert live == {words[1]}, run.source  # only the result is left
        else:
            live.add(words[0])
        most = max(most, len(live))
    assert most == 3, run.source  # s, then two of the chain's values at a time
    torch.testing.assert_close(run((x, y)), Chain()(x, y))
