"""convert_layout: regions of convolutions run channels-last, exactly (chapter 7).

Before/expected graphs by their conversions, the legality list checked op by op on
real tensors, counts of the copies the interpreter sees, the regions left alone and
their notes, and a hypothesis property over generated conv networks: the optimized
module gives eager's answer on fresh inputs, over repeated calls, and the caller's
model is untouched.
"""

from __future__ import annotations

import copy
import operator

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import graphopt
from graphopt.optimizer import optimize
from graphopt.passes.convert_layout import (
    MIN_CONVS,
    POOLS,
    UNTAGGED,
    ToLayout,
    convert_layout,
    find_regions,
    is_conv,
)

# the fused kernels on small shapes: the policy's small-work rules are off here
pytestmark = pytest.mark.usefixtures("small_work_fused")

aten = torch.ops.aten
_AT = graphopt.PIPELINE.index("convert_layout")
BEFORE = list(graphopt.PIPELINE[:_AT])  # the graph passes that run before this one
WITHOUT = [p for p in graphopt.PIPELINE if p != "convert_layout"]  # all but this one
assert graphopt.PIPELINE[_AT + 1:] == ("lower", "backend")  # what runs after it


def layouts(gm) -> list[str]:
    """The conversions in graph order: ["channels_last", "nchw", ...]."""
    mods = [gm.get_submodule(n.target) for n in gm.graph.nodes if n.op == "call_module"]
    return [m.layout for m in mods if isinstance(m, ToLayout)]


class Stack(nn.Module):
    """conv -> hardswish -> depthwise conv -> SE scale -> conv + residual -> head."""

    def __init__(self, c=8, convs=3):
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv2d(c if i else 3, c, 3, padding=1, groups=c if i == 1 else 1)
            for i in range(convs))
        self.fc1, self.fc2 = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)
        self.head = nn.Linear(c * 8 * 8, 5)

    def forward(self, x):
        y = F.hardswish(self.convs[0](x))
        for conv in self.convs[1:]:
            s = F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(y, 1)))))
            y = F.relu(conv(y * s) + y)
        return self.head(torch.flatten(y, 1))  # flatten needs NCHW order: an exit


def optimized(model, x, passes=None):
    return optimize(model.eval(), x, passes=passes, stats=False)


def test_one_conversion_in_and_one_out_around_the_whole_conv_region():
    model, x = Stack(), torch.randn(2, 3, 8, 8)
    gm = optimized(model, x).module
    assert layouts(gm) == ["channels_last", "nchw"]
    exit_ = next(n for n in gm.graph.nodes if n.op == "call_module"
                 and getattr(gm.get_submodule(n.target), "layout", "") == "nchw")
    assert [u.target for u in exit_.users] == [aten.flatten.using_ints]
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x))


def test_every_value_inside_the_region_is_channels_last_and_the_output_is_not():
    model, x = Stack(), torch.randn(2, 3, 8, 8)
    gm = optimized(model, x).module
    seen = {}

    class Spy(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            seen[n.name] = out
            return out

    with torch.no_grad():
        out = Spy(gm).run(x)
    region = [n for n in gm.graph.nodes if is_conv(gm, n)
              or n.op == "call_module" and "squeeze_excite" in n.name]
    assert len(region) == 5 and all(  # 3 convs, 2 squeeze-excite gates (fc1, fc2)
        seen[n.name].is_contiguous(memory_format=torch.channels_last) for n in region)
    assert all(n.meta["val"].is_contiguous(memory_format=torch.channels_last)
               for n in region)  # and recorded so: a plan's guard sees it at bind
    assert out.is_contiguous()


def test_the_interpreter_counts_each_conversion_as_a_real_copy():
    # the whole pipeline with and without the pass: the backend's kernels decide
    # which layout each conv hands over
    model, x = Stack(), torch.randn(2, 3, 8, 8)
    res = optimized(model, x)
    assert [s.name for s in res.stages][-3:] == ["convert_layout", "lower", "backend"]
    before = graphopt.run(optimized(model, x, passes=WITHOUT).module, x)
    after = graphopt.run(res.module, x)
    copies = [n for n in after.nodes if n.name.startswith("to_")]
    assert len(copies) == 2 and all(n.kernels == 1 for n in copies)
    entry = 2 * 3 * 8 * 8 * 4  # the input, read and written once
    exit_ = 2 * 8 * 8 * 8 * 4
    assert sum(n.bytes_read + n.bytes_written for n in copies) == 2 * (entry + exit_)
    # oneDNN already hands a prepacked conv's output over channels-last, so before
    # the pass `flatten` had to copy it back (a hidden layout op); now the exit does
    hidden = next(n.kernels for n in before.nodes if n.op == "flatten")
    assert next(n.kernels for n in after.nodes if n.op == "flatten") == 0
    assert after.kernels == before.kernels + 2 - hidden


class Scaled(nn.Module):
    """Three convs, a fused elementwise chain (full size) between the first two."""

    def __init__(self, c=8):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
        self.c = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.c(self.b(self.a(x) * 1.5 + 0.5))


def test_a_fused_group_inside_a_region_reads_it_through_free_permutes():
    model, x = Scaled(), torch.randn(2, 3, 8, 8)
    res = optimized(model, x)  # the group lowered to its kernel after the pass
    after = graphopt.run(res.module, x)
    assert any(n.name.startswith("fused_") and "add" in n.name for n in after.nodes)
    assert any(type(m).__name__ == "GeneratedKernel" for m in res.module.modules())
    permutes = [n for n in after.nodes if n.op == "permute"]
    assert permutes and all(n.kernels == 0 and n.bytes_read == 0 for n in permutes)
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), model(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("convs", [1, 2])
def test_a_region_of_fewer_than_min_convs_stays_nchw_with_a_note(convs):
    """One conv, or ResNet's BasicBlock shape (two): the conversions would cost
    what the region saves (measured in MIN_CONVS's comment)."""
    assert convs < MIN_CONVS
    layers = [nn.Conv2d(3, 4, 3)] + [nn.Conv2d(4, 4, 3, padding=1)] * (convs - 1)
    model, x = nn.Sequential(*layers, nn.ReLU()), torch.randn(1, 3, 8, 8)
    res = optimized(model, x)
    assert layouts(res.module) == ["nchw"]  # no entry: only what is returned
    assert any("convert_layout: kept" in n and f"of {convs} conv" in n
               for n in res.notes), res.notes
    with torch.no_grad():
        out = res.module(x)
    torch.testing.assert_close(out, model(x))
    assert out.is_contiguous()


def test_training_mode_is_left_alone_with_a_note():
    model, x = Stack().train(), torch.randn(2, 3, 8, 8)
    res = optimize(model, x, stats=False)
    assert layouts(res.module) == []
    assert any("training mode" in n for n in res.notes if "convert_layout" in n)


def test_the_callers_graph_is_not_changed():
    model, x = Stack(), torch.randn(2, 3, 8, 8)
    gm = optimized(model, x, passes=BEFORE).module
    code = gm.code
    res = convert_layout(gm)
    assert gm.code == code and layouts(gm) == [] and layouts(res.module)


@pytest.mark.parametrize("op,args", [
    (aten.add.Tensor, ("y", "y")), (aten.mul.Tensor, ("y", "s")),
    (aten.hardswish.default, ("y",)), (aten.hardsigmoid.default, ("y",)),
    (aten.relu.default, ("y",)), (aten.hardtanh.default, ("y", 0.0, 6.0)),
    (aten.max_pool2d.default, ("y", [3, 3], [2, 2], [1, 1])),
    (aten.avg_pool2d.default, ("y", [2, 2])),
    (aten.adaptive_avg_pool2d.default, ("y", [2, 2])),
])
def test_each_op_the_region_keeps_gives_channels_last_for_channels_last(op, args):
    y = torch.randn(2, 6, 9, 9).contiguous(memory_format=torch.channels_last)
    s = torch.randn(2, 6, 1, 1)
    out = op(*[{"y": y, "s": s}.get(a, a) if isinstance(a, str) else a for a in args])
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert op_is_allowed(op)


def op_is_allowed(op) -> bool:
    name = op._schema.name.split("::")[-1]
    return name in POOLS | UNTAGGED or torch.Tag.pointwise in op.tags


def test_oneDNN_conv_modules_keep_channels_last_on_prepacked_weights():
    model, x = Stack(), torch.randn(2, 3, 8, 8)
    gm = optimized(model, x, passes=WITHOUT).module  # prepacked by the backend
    conv = next(n for n in gm.graph.nodes if is_conv(gm, n))
    m = gm.get_submodule(conv.target)
    assert m.is_prepacked
    xc = x.contiguous(memory_format=torch.channels_last)
    w, b = (operator.attrgetter(a.target)(gm) for a in conv.args[1:3])
    with torch.no_grad():
        out = m(xc, w, b)
        torch.testing.assert_close(out, m(x, w, b))
    assert out.is_contiguous(memory_format=torch.channels_last)


def test_in_place_ops_and_views_stay_outside():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 4, 3, padding=1)
            self.b = nn.Conv2d(4, 4, 3, padding=1)
            self.c = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            y = self.c(self.b(self.a(x)))
            return y.view(1, -1), y.relu_()

    model, x = M(), torch.randn(1, 3, 6, 6)
    res = optimized(model, x)
    with torch.no_grad():
        want, got = model(x), res.module(x)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w)
        assert g.is_contiguous()


def test_resnet18_and_mobilenet_get_one_region_each():
    # MobileNetV3's 52 convs: 34, and 9 squeeze-excite gates of two convs each
    for name, want in (("resnet18", 20), ("mobilenet_v3_small", 34)):
        model, (x,) = graphopt.models.example(name, batch=1, size=64)
        gm = optimized(model, x, passes=BEFORE).module
        regions = find_regions(gm)
        convs = [sum(is_conv(gm, n) for n in r) for r in regions]
        assert max(convs) == want, name
        out = convert_layout(gm).module
        assert layouts(out)[0] == "channels_last"
        with torch.no_grad():
            for seed in (1, 2, 3):
                xi = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
                torch.testing.assert_close(out(xi), model(xi), rtol=1e-4, atol=1e-5)


# --- property: generated conv networks ---------------------------------------------

STEPS = ["conv", "dw", "act", "se", "residual", "pool", "mul_const"]


class Generated(nn.Module):
    """A random stack of the ops real CNNs use, with an NCHW-only head."""

    def __init__(self, steps, c=4, head="flatten"):
        super().__init__()
        self.steps, self.head_kind = list(steps), head
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.convs = nn.ModuleList(
            nn.Conv2d(c, c, 3, padding=1, groups=c if s == "dw" else 1)
            for s in self.steps)
        self.register_buffer("k", torch.randn(1, c, 1, 8))

    def forward(self, x):
        y = self.stem(x)
        for s, conv in zip(self.steps, self.convs):
            if s in ("conv", "dw"):
                y = conv(y)
            elif s == "act":
                y = F.hardswish(y)
            elif s == "se":
                y = y * torch.sigmoid(F.adaptive_avg_pool2d(y, 1))
            elif s == "residual":
                y = F.relu(conv(y) + y)
            elif s == "pool":
                y = F.max_pool2d(y, 3, 1, 1)
            else:
                y = y * self.k  # a broadcast constant over W: permuted alike
        if self.head_kind == "flatten":
            return torch.flatten(y, 1).sum(1)
        return y  # the graph's output: returned NCHW


@settings(max_examples=12, deadline=None)
@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=6),
       head=st.sampled_from(["flatten", "map"]), seed=st.integers(0, 2**16))
def test_generated_conv_networks_give_the_eager_answer(steps, head, seed):
    torch.manual_seed(seed)
    model = Generated(steps, head=head).eval()
    x = torch.randn(2, 3, 8, 8)
    state = copy.deepcopy(model.state_dict())
    opt = optimize(model, x, stats=False)
    with torch.no_grad():
        for s in range(3):
            xi = torch.randn(x.shape, generator=torch.Generator().manual_seed(s))
            got, want = opt(xi), model(xi)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            assert got.is_contiguous()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
