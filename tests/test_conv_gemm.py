"""A 1x1 convolution is a GEMM: the backend's `conv_as_gemm` rule (chapter 7).

Opt-in (`Policy(pointwise_gemm=True)`): end to end it was not faster (within noise at
one thread, slower at two: benchmarks/results/policy.md). With it, a pointwise conv (1x1 kernel, stride 1, no padding, one group) below the policy's
`onednn_gemm_flops` runs MKL's packed GEMM over its channels-last pixels, then its
activation in place. Checked here: which nodes of MobileNetV3-Small take it at
batch 1 and 8 (by shape, nothing timed), the answers against eager on channels-last
and NCHW inputs and on an input of another batch (the general path), autograd, the
kernels the interpreter counts, and the node's note.
"""

import math

import pytest
import torch
from torch import nn

import graphopt
from graphopt import models
from graphopt.backend import conv_gemm, onednn
from graphopt.passes.fused_modules import ConvAddReLU, ConvReLU
from graphopt.policy import DEFAULT, Policy

GEMM = Policy(pointwise_gemm=True)

pytestmark = pytest.mark.skipif(
    not (onednn.available() and onednn.mkl_available()),
    reason="the rule needs MKL's packed GEMM (an x86 build of torch with MKL)")


def _convs(result):
    """(node, module) of every fused conv module the backend bound."""
    gm = result.module.graph_module
    return [(n, m) for n in gm.graph.nodes if n.op == "call_module"
            and isinstance(m := gm.get_submodule(n.target), ConvReLU)]


def _expected(node, module) -> str | None:
    """What the rule says for this conv, from its recorded shapes alone."""
    x, w = node.args[0].meta["val"], node.args[1].meta["val"]
    if isinstance(module, ConvAddReLU):
        return "onednn"  # the add is a post-op: oneDNN's fused conv, never the GEMM
    if not conv_gemm.is_pointwise(w.shape, module.stride, module.padding,
                                  module.dilation, module.groups):
        return None
    if math.prod(x.shape[2:]) == 1:
        return "eager"  # a 1x1 map: the squeeze-and-excitation gate's own rule
    flops = module.graphopt_flops(node)
    return "mkl" if flops < GEMM.onednn_gemm_flops else "onednn"


# at batch 1, 16: the six projection convs an inverted residual's add follows are
# Conv+Add nodes (the add a post-op of oneDNN's conv), no longer lone pointwise convs
@pytest.mark.parametrize("batch, on_gemm", [(1, 16), (8, 3)])
def test_mobilenet_pointwise_convs_run_as_gemm_by_shape(batch, on_gemm):
    model, x = models.example("mobilenet_v3_small", batch=batch)
    with torch.no_grad():
        res = graphopt.optimize(model, *x, policy=GEMM, keep_stages=False,
                                stats=False)
        torch.testing.assert_close(res(*x), model(*x), rtol=1e-4, atol=1e-4)
    convs = _convs(res)
    for node, module in convs:
        want = _expected(node, module)
        if want is not None:
            assert module.kernel == want, (node.name, module.kernel, want)
        if module.kernel == "mkl":
            assert module.plan.kernel == "mkl" and module.is_prepacked
            assert module.why.startswith("a 1x1 conv is a GEMM"), module.why
    assert sum(m.kernel == "mkl" for _, m in convs) == on_gemm
    gemm_notes = [n for n in res.notes if "a 1x1 conv is a GEMM" in n]
    assert len(gemm_notes) == on_gemm
    # with an activation: two kernels, said so; without: one
    assert any("runs 2 kernels" in n and "then hardswish in place" in n
               for n in gemm_notes)
    assert any("runs 1 kernel:" in n for n in gemm_notes)


def test_the_default_policy_keeps_onednn_for_pointwise_convs():
    model, x = models.example("mobilenet_v3_small", size=64)
    with torch.no_grad():
        res = graphopt.optimize(model, *x, keep_stages=False, stats=False)
    assert not any(m.kernel == "mkl" for _, m in _convs(res))
    assert not any("a 1x1 conv is a GEMM" in n for n in res.notes)


def test_a_larger_product_keeps_onednn():
    big = Policy(pointwise_gemm=True, onednn_gemm_flops=1)  # every conv is then "large"
    model, x = models.example("mobilenet_v3_small", size=64)
    with torch.no_grad():
        res = graphopt.optimize(model, *x, policy=big, keep_stages=False,
                                stats=False)
    assert not any(m.kernel == "mkl" for _, m in _convs(res))


class Pointwise(nn.Module):
    """3x3 conv, then two 1x1 convs (hardswish, none): a channels-last region."""

    def __init__(self, c=8, act=nn.Hardswish, bias=True):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.expand = nn.Conv2d(c, 4 * c, 1, bias=bias)
        self.act = act()
        self.project = nn.Conv2d(4 * c, c, 1, bias=bias)

    def forward(self, x):
        return self.project(self.act(self.expand(torch.relu(self.stem(x)))))


@pytest.mark.parametrize("act", [nn.Hardswish, nn.ReLU, nn.ReLU6, nn.SiLU, nn.GELU])
@pytest.mark.parametrize("shape, bias", [((1, 3, 12, 12), True), ((2, 3, 7, 5), True),
                                         ((1, 3, 6, 6), False)])
def test_answers_and_kernels_against_eager(shape, bias, act):
    torch.manual_seed(0)
    model, x = Pointwise(act=act, bias=bias).eval(), torch.randn(shape)
    with torch.no_grad():
        res = graphopt.optimize(model, x, policy=GEMM, keep_stages=False,
                                stats=False)
        torch.testing.assert_close(res(x), model(x), rtol=1e-5, atol=1e-5)
        report = graphopt.run(res.module.graph_module, x)
    gemm = {n.name: m for n, m in _convs(res) if m.kernel == "mkl"}
    assert len(gemm) == 2  # the expansion with its activation, the projection
    counted = {s.name: s.kernels for s in report.nodes if s.name in gemm}
    # the GEMM then the activation in place: 2 kernels; the projection: 1
    assert sorted(counted.values()) == [1, 2], counted


def _first_gemm_conv():
    """Pointwise's first conv the rule bound to MKL: (module, weight, bias)."""
    torch.manual_seed(0)
    model, x = Pointwise().eval(), torch.randn(1, 3, 12, 12)
    with torch.no_grad():
        res = graphopt.optimize(model, x, policy=GEMM, keep_stages=False,
                                stats=False)
    (node, module), *_ = [(n, m) for n, m in _convs(res) if m.kernel == "mkl"]
    return (module, *module_weights(res, node))


def test_general_path_for_other_layouts_and_batches():
    module, weight, bias = _first_gemm_conv()
    rows = module._pack[3]
    for inp in (torch.randn(1, 8, 12, 12),  # NCHW: the general path
                torch.randn(3, 8, 12, 12).to(memory_format=torch.channels_last),
                torch.randn(1, 8, 12, 12).to(memory_format=torch.channels_last)):
        before = inp.clone()
        with torch.no_grad():
            got = module(inp, weight, bias)
        torch.testing.assert_close(got, module.reference(inp, weight, bias),
                                   rtol=1e-5, atol=1e-5)
        assert torch.equal(inp, before)  # the activation ran on the product only
    assert module._pack[3] == rows  # packed once, for the recorded pixels


def test_autograd_takes_the_reference_ops():
    module, weight, bias = _first_gemm_conv()
    inp = torch.randn(1, 8, 12, 12).to(memory_format=torch.channels_last)
    inp.requires_grad_()
    out = module(inp, weight, bias)  # MKL's GEMM has no backward: the guard declines
    out.sum().backward()
    expected = torch.autograd.grad(module.reference(inp, weight, bias).sum(), inp)[0]
    torch.testing.assert_close(inp.grad, expected)


def module_weights(res, node):
    """The weight and bias a bound conv node reads (constants of the graph)."""
    gm = res.module.graph_module
    return tuple(gm.get_parameter(str(a.target)) if isinstance(a, torch.fx.Node)
                 else a for a in node.args[1:3])


def test_is_pointwise_is_the_shape_rule():
    assert conv_gemm.is_pointwise((8, 4, 1, 1), [1, 1], [0, 0], [1, 1], 1)
    assert not conv_gemm.is_pointwise((8, 4, 1, 1), [2, 2], [0, 0], [1, 1], 1)
    assert not conv_gemm.is_pointwise((8, 4, 3, 3), [1, 1], [1, 1], [1, 1], 1)
    assert not conv_gemm.is_pointwise((8, 1, 1, 1), [1, 1], [0, 0], [1, 1], 8)
    assert not conv_gemm.is_pointwise((8, 4, 1, 1), [1, 1], [1, 1], [1, 1], 1)
    assert DEFAULT.conv_as_gemm(1 << 20, "relu", mkl=True) == ""  # opt-in
    assert GEMM.conv_as_gemm(1 << 20, "relu", mkl=False) == ""
    assert GEMM.conv_as_gemm(1 << 24, "relu", mkl=True) == ""
    why = GEMM.conv_as_gemm(1 << 20, "relu", mkl=True)
    assert "then relu in place" in why and "policy fixed" in why


def test_models_stay_right_in_training_mode():
    torch.manual_seed(0)
    model, x = Pointwise().train(), torch.randn(2, 3, 12, 12, requires_grad=True)
    res = graphopt.optimize(model, x, policy=GEMM, keep_stages=False,
                                stats=False)
    out = res(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    (got,) = torch.autograd.grad(out.sum(), x)
    (want,) = torch.autograd.grad(model(x).sum(), x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
