"""fuse_qkv: linears reading one input become one wider linear, only where legal."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import graphopt
from graph_match import assert_unchanged
from graphopt import models
from graphopt.optimizer import PIPELINE, optimize
from graphopt.passes.fuse_qkv import fuse_qkv
from graphopt.verify import equivalent, random_like


def _linears(gm):
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in (torch.ops.aten.linear.default,
                                                    F.linear):
            out.append(n)
        elif n.op == "call_module" and isinstance(gm.get_submodule(n.target),
                                                  nn.Linear):
            out.append(n)
    return out


class Projections(nn.Module):
    """q, k, v = three linears of one x, then a use that reads all three."""

    def __init__(self, widths=(16, 16, 16), bias=True, d=12, heads=2):
        super().__init__()
        self.heads = heads
        self.proj = nn.ModuleList(nn.Linear(d, w, bias=bias) for w in widths)

    def forward(self, x):
        q, k, v = (p(x) for p in self.proj)
        b, s, _ = x.shape
        q = q.view(b, s, self.heads, -1).transpose(1, 2)  # as HF's attention does
        return torch.relu(q).sum() + (k * 2).sum(-1).mean() + v.abs()


def _x(seed=0, shape=(2, 5, 12)):
    torch.manual_seed(seed)
    return (torch.randn(*shape),)


def _check(gm, res, x):
    for args in (x, random_like(x), random_like(x, seed=3)):
        assert equivalent(gm, res.module, args, raise_on_mismatch=True)


@pytest.mark.parametrize("level", ["aten", "module"])
def test_three_projections_become_one_linear(level):
    model = Projections().eval()
    x = _x()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gm = graphopt.capture(model, *x, level=level)
    res = fuse_qkv(gm)
    (wide,) = _linears(res.module)
    assert graphopt.shape(wide)[-1] == 48
    assert len(_linears(gm)) == 3  # the caller's graph is untouched
    _check(gm, res, x)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert res.notes and "48 outputs" in res.notes[0]


def test_unequal_widths_and_no_bias():
    model = Projections(widths=(16, 8, 4), bias=False).eval()
    x = _x()
    gm = graphopt.capture(model, *x, level="aten")
    res = fuse_qkv(gm)
    (wide,) = _linears(res.module)
    assert graphopt.shape(wide)[-1] == 28
    _check(gm, res, x)


def test_separate_weights_are_dropped_from_the_copy():
    model = Projections().eval()
    x = _x()
    res = fuse_qkv(graphopt.capture(model, *x, level="aten"))
    names = {n for n, _ in res.module.named_buffers()} | \
        {n for n, _ in res.module.named_parameters()}
    assert not any(n.startswith("proj") for n in names), names


class MixedBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 4), nn.Linear(6, 4)
        self.c = nn.Linear(6, 4, bias=False)

    def forward(self, x):
        return self.a(x) * self.b(x) + self.c(x)


def test_only_compatible_linears_merge():
    x = (torch.randn(3, 6),)
    gm = graphopt.capture(MixedBias().eval(), *x, level="aten")
    res = fuse_qkv(gm)
    assert sorted(graphopt.shape(n)[-1] for n in _linears(res.module)) == [4, 8]
    _check(gm, res, x)


class Flattens(Projections):
    def forward(self, x):
        q, k = self.proj[0](x), self.proj[1](x)
        return q.view(x.shape[0], -1) + k.reshape(x.shape[0], -1)


class WritesOutput(Projections):
    def forward(self, x):
        q, k = self.proj[0](x), self.proj[1](x)
        q.add_(1.0)
        return q + k


class TwoInputs(Projections):
    def forward(self, x):
        return self.proj[0](x) + self.proj[1](x * 2)


@pytest.mark.parametrize("case", ["training", "flattening_view", "in_place_output",
                                  "different_inputs"])
def test_must_not_fuse(case):
    x = _x()
    if case == "training":
        model, level = Projections().train(), "aten"
    elif case == "flattening_view":
        model, level = Flattens().eval(), "aten"
    elif case == "in_place_output":
        model, level = WritesOutput().eval(), "module"
    else:
        model, level = TwoInputs().eval(), "aten"
    gm = graphopt.capture(model, *x, level=level)
    res = assert_unchanged(fuse_qkv, gm)
    assert len(_linears(res.module)) == len(_linears(gm)) >= 2
    if case != "different_inputs":
        assert any("kept" in note for note in res.notes), res.notes


def test_in_the_pipeline_three_kernels_become_one():
    model = Projections().eval()
    x = _x()
    without = [p for p in PIPELINE if p != "fuse_qkv"]
    steps = list(without)
    steps.insert(steps.index("fuse_patterns"), fuse_qkv)
    plain = optimize(model, *x, passes=without, stats=False).module
    fused = optimize(model, *x, passes=steps, check=True)
    kinds = [type(fused.module.get_submodule(n.target)).__name__
             for n in fused.module.graph.nodes if n.op == "call_module"]
    base = [type(plain.get_submodule(n.target)).__name__
            for n in plain.graph.nodes if n.op == "call_module"]
    assert kinds.count("PackedLinear") == 1 and base.count("PackedLinear") == 3
    for seed in range(3):  # repeated calls on fresh inputs
        args = random_like(x, seed=seed)
        with torch.no_grad():
            torch.testing.assert_close(fused(*args), model(*args))


def test_hf_bert_projections_are_fused():
    model, inputs = models.example("bert", seq_len=16)
    gm = graphopt.capture(model, *inputs, level="aten")
    res = fuse_qkv(gm)
    assert len(res.notes) == 4 and all("768 outputs" in n for n in res.notes)
    assert len(_linears(res.module)) == len(_linears(gm)) - 8
    assert equivalent(gm, res.module, inputs, raise_on_mismatch=True)


@settings(max_examples=12, deadline=None)
@given(widths=st.lists(st.integers(1, 9), min_size=2, max_size=4),
       bias=st.booleans(), lead=st.lists(st.integers(1, 4), min_size=0, max_size=2),
       seed=st.integers(0, 100))
def test_property_any_group_stays_equivalent(widths, bias, lead, seed):
    torch.manual_seed(seed)
    layers = nn.ModuleList(nn.Linear(5, w, bias=bias) for w in widths).eval()

    class Many(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, x):
            return [torch.tanh(m(x)) * (i + 1) for i, m in enumerate(self.layers)]

    x = (torch.randn(*lead, 5),)
    gm = graphopt.capture(Many().eval(), *x, level="aten")
    res = fuse_qkv(gm)
    assert len(_linears(res.module)) == 1
    _check(gm, res, x)
