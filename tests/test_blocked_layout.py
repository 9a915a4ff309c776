"""blocked_layout: convolution regions on oneDNN's blocked tensors (chapter 7).

Eager's answer on ResNet-18 and MobileNetV3-Small, the conversions at the regions'
edges (counted in the graph, by the interpreter, and drawn), an unsupported op
ending a region, regions too small to pay, training mode left alone, and the
legality guard's refusals checked on real mkldnn tensors.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphopt
from graphopt.backend import onednn
from graphopt.backend.blocked import (
    BlockedConv,
    ToBlocked,
    blocked_layout,
    count_blocked_conversions,
)
from graphopt.errors import UnsupportedOpError
from graphopt.models import example
from graphopt.optimizer import PIPELINE, optimize, with_layout
from graphopt.passes.blocked_regions import keeps_blocked
from graphopt.passes.fused_modules import SqueezeExcite

pytestmark = [pytest.mark.skipif(not onednn.available(), reason="needs oneDNN"),
              pytest.mark.usefixtures("small_work_fused")]
aten = torch.ops.aten
BEFORE = list(PIPELINE[:PIPELINE.index("convert_layout")])


def modules(gm, kind) -> list:
    gm = getattr(gm, "graph_module", gm)
    return [gm.get_submodule(n.target) for n in gm.graph.nodes
            if n.op == "call_module" and isinstance(gm.get_submodule(n.target), kind)]


def stage(result, name):
    return next(s for s in result.stages if s.name == name)


@pytest.fixture(scope="module")
def resnet18():
    """ResNet-18 on 32x32 and its blocked optimization, built once for the file."""
    model, x = example("resnet18", size=32)
    return model, x, optimize(model, *x, layout="blocked", stats=False)


def close(model, fast, inputs) -> None:
    with torch.no_grad():
        want, got = model(*inputs), fast(*inputs)
    assert got.layout is torch.strided and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_blocked_is_opt_in_and_checked():
    assert "blocked_layout" not in PIPELINE  # the default stays channels-last
    assert with_layout(PIPELINE, "blocked")[-4:] == (
        "blocked_layout", "convert_layout", "lower", "backend")
    assert with_layout(["fold_conv_bn", "backend"], "blocked") == (
        "fold_conv_bn", "blocked_layout", "backend")
    with pytest.raises(ValueError, match="channels_last"):
        with_layout(PIPELINE, "nChw16c")


@pytest.mark.parametrize("batch", [1, 2])
def test_resnet18_one_region_two_conversions(batch, resnet18):
    model, x, res = resnet18
    if batch != 1:
        model, x = example("resnet18", batch=batch, size=32)
        res = optimize(model, *x, layout="blocked", stats=False)
    close(model, res.module, x)
    # the whole trunk is one region: in at the stem, out after the global pool
    assert count_blocked_conversions(res.module) == {"blocked": 1, "dense": 1}
    assert len(modules(res.module, BlockedConv)) == 20  # every conv of ResNet-18
    assert sum(m.adds for m in modules(res.module, BlockedConv)) == 8  # residuals


def test_mobilenet_regions_end_at_the_gates():
    model, x = example("mobilenet_v3_small", size=32)
    res = optimize(model, *x, layout="blocked", stats=False)
    close(model, res.module, x)
    counts = count_blocked_conversions(res.module)
    gm = res.module.graph_module
    # each squeeze-excite gate (one SqueezeExcite node) reads dense values
    gates = [n for n in gm.graph.nodes if n.op == "call_module"
             and isinstance(gm.get_submodule(n.target), SqueezeExcite)]
    assert len(gates) == 9 and all(
        isinstance(gm.get_submodule(a.target), ToBlocked)
        for n in gates for a in n.all_input_nodes if a.op == "call_module"
        and isinstance(gm.get_submodule(a.target), (ToBlocked, BlockedConv)))
    # 9 regions, each entered once; 9 exits: each gate's input
    assert counts == {"blocked": 9, "dense": 9}


def test_interpreter_counts_each_conversion_and_the_drawing_shows_it(resnet18):
    _, x, res = resnet18
    report = graphopt.run(res.module, *x)
    convs = {n.name: n for n in report.nodes if n.name.startswith("to_")}
    assert sorted(convs) == ["to_blocked", "to_dense"]
    assert convs["to_blocked"].kernels == 1
    assert convs["to_blocked"].bytes_read == x[0].numel() * 4
    assert "to_blocked" in graphopt.draw(res.module.graph_module).source


class Chain(nn.Module):
    """Three convs, a sigmoid (no mkldnn kernel), three more convs."""

    def __init__(self, c=8):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else c, c, 3, padding=1)
                                   for i in range(6))

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = torch.relu(conv(x))
            if i == 2:
                x = torch.sigmoid(x)
        return x


def test_unsupported_op_ends_a_region():
    torch.manual_seed(0)
    model, x = Chain().eval(), (torch.randn(1, 3, 8, 8),)
    res = optimize(model, *x, layout="blocked", stats=False)
    close(model, res.module, x)
    assert count_blocked_conversions(res.module) == {"blocked": 2, "dense": 2}
    gm = res.module.graph_module
    sig = [n for n in gm.graph.nodes if "sigmoid" in n.name or (
        n.op == "call_module" and "fused" in str(n.target))]
    assert sig and not any(keeps_blocked(gm, n) for n in sig)


def test_small_region_stays_unblocked_with_a_note():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3)).eval()
    x = (torch.randn(1, 3, 8, 8),)
    res = optimize(model, *x, layout="blocked", stats=False)
    close(model, res.module, x)
    assert count_blocked_conversions(res.module) == {"blocked": 0, "dense": 0}
    assert any("fewer than 3" in s for s in stage(res, "blocked_layout").result.notes)
    # asked for regions of one conv, it blocks them
    gm = optimize(model, *x, passes=BEFORE, stats=False).module
    out = blocked_layout(gm, min_convs=1).module
    assert count_blocked_conversions(out) == {"blocked": 1, "dense": 1}
    close(model, out, x)


def test_a_gradient_through_a_region_is_refused_not_lost(resnet18):
    _, x, res = resnet18
    with pytest.raises(UnsupportedOpError, match="no_grad"):
        res.module(x[0].clone().requires_grad_())
    with torch.no_grad():  # inference on the same module still runs
        res.module(x[0].clone().requires_grad_())


def test_training_mode_is_left_alone():
    model, x = example("resnet18", batch=2, size=64)
    model.train()
    gm = optimize(model, *x, passes=BEFORE, stats=False).module
    res = blocked_layout(gm)
    assert count_blocked_conversions(res.module) == {"blocked": 0, "dense": 0}
    assert any("training mode" in s for s in res.notes)


def test_legality_refuses_what_mkldnn_cannot_run():
    xm = torch.randn(1, 4, 6, 6).to_mkldnn()
    with pytest.raises(RuntimeError):  # why a hardswish outside a conv ends a region
        F.hardsigmoid(xm)
    with pytest.raises(RuntimeError, match="broadcast"):  # why the SE gate does
        xm * torch.rand(1, 4, 1, 1).to_mkldnn()

    class Ops(nn.Module):
        def forward(self, x, y):
            return (x + y, x + y[:, :, :1, :1], F.adaptive_avg_pool2d(x, 4),
                    F.max_pool2d(x, 2), torch.sigmoid(x))

    gm = graphopt.capture(Ops(), torch.randn(1, 4, 6, 6), torch.randn(1, 4, 6, 6))
    verdict = [(n.target, keeps_blocked(gm, n)) for n in gm.graph.nodes
               if n.op == "call_function" and n.target is not aten.slice.Tensor]
    assert verdict == [(aten.add.Tensor, True),  # same shapes: oneDNN's sum
                       (aten.add.Tensor, False),  # broadcasting
                       (aten.adaptive_avg_pool2d.default, False),  # 6 % 4 != 0
                       (aten.max_pool2d.default, True),
                       (aten.sigmoid.default, False)]
