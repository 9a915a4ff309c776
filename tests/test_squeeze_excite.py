"""The squeeze-excite gate: the pattern, what it leaves alone, its one numba kernel.

`match_squeeze_excite` (passes/patterns.py) turns mean -> conv -> act -> conv ->
gate -> mul(x) into one `SqueezeExcite` module, at aten level (what
`graphopt.optimize` captures) and at module level (nn.AdaptiveAvgPool2d, nn.Conv2d,
nn.Hardsigmoid); the backend binds `backend.squeeze_excite`'s kernel, which the
interpreter counts as one.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphopt
from graphopt.backend import squeeze_excite
from graphopt.models import example
from graphopt.models.mobilenet import SqueezeExcitation
from graphopt.passes import fuse_patterns
from graphopt.passes.fused_modules import SqueezeExcite

GRAPH_PASSES = ["eliminate_dead_code", "fold_constants",
                "eliminate_common_subexpressions", "fold_conv_bn", "fuse_patterns"]


class Block(nn.Module):
    """A conv, then torchvision's squeeze-excite (ReLU and hardsigmoid, as in
    MobileNetV3, or SiLU and sigmoid, as in EfficientNet)."""

    def __init__(self, c=24, squeeze=8, act=nn.ReLU, gate=nn.Hardsigmoid):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.se = SqueezeExcitation(c, squeeze, act, gate)

    def forward(self, x):
        return self.se(self.conv(x))


class Functional(nn.Module):
    """The gate written with torch functions and a mean; `other` multiplies a tensor
    that is NOT the pooled one (no squeeze-excite), `wide` gives the first conv a
    3x3 kernel (not a product on one pixel)."""

    def __init__(self, other=False, wide=False):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(6, 16, 3 if wide else 1, 3 if wide else 1))
        self.w2 = nn.Parameter(torch.randn(16, 6, 1, 1))
        self.other, self.wide = other, wide

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        z = F.relu(F.conv2d(s, self.w1, padding=1 if self.wide else 0))
        g = torch.sigmoid(F.conv2d(z, self.w2))
        return g * (x + 1 if self.other else x)


def _gates(gm):
    return [m for m in gm.modules() if isinstance(m, SqueezeExcite)]


def _image(c=24, n=2, size=9):
    return torch.randn(n, c, size, size)


@pytest.mark.parametrize("act, gate, names", [
    (nn.ReLU, nn.Hardsigmoid, ("relu", "hardsigmoid")),
    (nn.SiLU, nn.Sigmoid, ("silu", "sigmoid"))])
def test_a_squeeze_excite_block_becomes_one_module_and_one_kernel(act, gate, names):
    torch.manual_seed(0)
    model, x = Block(act=act, gate=gate).eval(), _image()
    fused = graphopt.optimize(model, x, passes=GRAPH_PASSES).module
    (module,) = _gates(fused)
    assert (module.act.name, module.gate) == names
    res = graphopt.optimize(model, x)
    (bound,) = _gates(res.module)
    assert bound.kernel == "numba" and bound.plan.kernels == 1
    xs = x.to(memory_format=torch.channels_last)
    report = graphopt.run(res.module, xs)
    (node,) = [n for n in report.nodes if "squeeze_excite" in n.name]
    assert node.kernels == 1
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), model(x), atol=1e-5, rtol=1e-5)


def test_mobilenet_v3_small_has_nine_gates_and_the_same_answer():
    model, (x,) = example("mobilenet_v3_small", size=64)
    res = graphopt.optimize(model, x)
    assert len(_gates(res.module)) == 9
    assert {m.kernel for m in _gates(res.module)} == {"numba"}
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), model(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kwargs", [{}, {"other": True}, {"wide": True}])
def test_the_functional_form_matches_and_near_misses_do_not(kwargs):
    torch.manual_seed(0)
    model, x = Functional(**kwargs), _image(c=16)
    gm = graphopt.capture(model, x)
    res = fuse_patterns(gm)
    assert len(_gates(res.module)) == (0 if kwargs else 1)
    torch.testing.assert_close(res.module(x), model(x), atol=1e-5, rtol=1e-5)


def test_a_pool_read_twice_is_left_alone():
    class Twice(Functional):
        def forward(self, x):
            s = x.mean((2, 3), keepdim=True)
            g = torch.sigmoid(F.conv2d(F.relu(F.conv2d(s, self.w1)), self.w2))
            return g * x + s

    torch.manual_seed(0)
    model, x = Twice(), _image(c=16)
    assert not _gates(fuse_patterns(graphopt.capture(model, x)).module)


# (2, 24, 8, 4): rows of two pixels (48 floats); (1, 8, 4, 3): nine pixels, which
# rows of eight do not divide, one pixel a row
@pytest.mark.parametrize("batch, c, squeeze, size", [(1, 16, 8, 56), (3, 72, 24, 5),
                                                     (2, 576, 144, 7), (1, 5, 3, 1),
                                                     (2, 24, 8, 4), (1, 8, 4, 3)])
@pytest.mark.parametrize("act, gate", [("relu", "hardsigmoid"), ("swish", "sigmoid")])
@pytest.mark.parametrize("layout", [torch.channels_last, torch.contiguous_format])
def test_the_kernel_matches_the_reference(batch, c, squeeze, size, act, gate, layout):
    torch.manual_seed(0)
    x = torch.randn(batch, c, size, size).to(memory_format=layout)
    w1, b1 = torch.randn(squeeze, c, 1, 1) * 0.1, torch.randn(squeeze)
    w2, b2 = torch.randn(c, squeeze, 1, 1) * 0.1, torch.randn(c)
    act_ = {"relu": graphopt.passes.activations.RELU,
            "swish": graphopt.passes.activations.ACTIVATIONS["silu"]}[act]
    reference = SqueezeExcite(act_, gate).reference(x, w1, b1, w2, b2)
    assert squeeze_excite.usable(x, w1, b1, w2, b2)
    weights = squeeze_excite.Weights()
    out = squeeze_excite.gate(x, weights(w1, b1, w2, b2), act, gate)
    assert out.is_contiguous(memory_format=layout)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    no_bias = squeeze_excite.gate(x, weights(w1, None, w2, None), act, gate)
    torch.testing.assert_close(
        no_bias, SqueezeExcite(act_, gate).reference(x, w1, None, w2, None),
        atol=1e-5, rtol=1e-5)


def test_channels_last_rows_hold_64_floats_where_the_pixels_divide():
    from graphopt.backend import squeeze_excite_numba as k

    assert k.pixels_per_row(56 * 56, 16) == 4  # MobileNetV3's first gate
    assert k.pixels_per_row(16, 24) == 2
    assert k.pixels_per_row(9, 8) == 1  # eight do not divide nine
    assert k.pixels_per_row(49, 576) == 1


def test_inputs_outside_the_kernels_domain_run_the_reference():
    x = torch.randn(1, 8, 4, 4)
    w1, b1, w2, b2 = (torch.randn(2, 8, 1, 1), torch.randn(2),
                      torch.randn(8, 2, 1, 1), torch.randn(8))
    assert squeeze_excite.usable(x, w1, b1, w2, b2)  # NCHW: its planes' loops
    assert not squeeze_excite.usable(x[:, :, ::2], w1, b1, w2, b2)  # strided
    assert not squeeze_excite.usable(x.to("meta"), w1, b1, w2, b2)  # not on the CPU
    assert not squeeze_excite.usable(x, w1, b1, w2.to("meta"), b2)
    xs = x.to(memory_format=torch.channels_last)
    assert not squeeze_excite.usable(xs.double(), w1.double(), b1.double(),
                                     w2.double(), b2.double())
    w1.requires_grad_()
    assert not squeeze_excite.usable(xs, w1, b1, w2, b2)  # autograd records
    with torch.no_grad():
        assert squeeze_excite.usable(xs, w1, b1, w2, b2)


def test_a_weight_changed_in_place_or_replaced_is_read_anew(monkeypatch):
    torch.manual_seed(0)
    model, x = Block().eval(), _image()
    calls = []
    kernel = squeeze_excite.gate
    monkeypatch.setattr(squeeze_excite, "gate",
                        lambda *a: calls.append(1) or kernel(*a))
    opt = graphopt.optimize(model, x).module  # planned with the counting kernel
    calls.clear()  # the stage's own check ran it once
    with torch.no_grad():
        opt(x)
        for p in opt.parameters():
            p.mul_(0.5)  # in place: the numpy views see it
        ref = copy.deepcopy(opt.graph_module)
        for m in _gates(ref):
            m.plan = None  # the reference ops
        torch.testing.assert_close(opt(x), ref(x), atol=1e-5, rtol=1e-5)
        for p in opt.parameters():
            p.data = p.data * 2  # another tensor at another address
        for p, q in zip(ref.parameters(), opt.parameters()):
            p.data = q.data
        torch.testing.assert_close(opt(x), ref(x), atol=1e-5, rtol=1e-5)
    assert len(calls) == 3  # the kernel ran each time


def test_training_gives_eager_gradients():
    torch.manual_seed(0)
    model, x = Block().train(), _image()
    opt = graphopt.optimize(copy.deepcopy(model), x).module
    assert len(_gates(opt)) == 1  # fused in training too: its reference ops run
    out, ref = opt(x), model(x)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    out.square().sum().backward()
    ref.square().sum().backward()
    grads = dict(opt.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name.replace(".", "_")].grad
                                   if name.replace(".", "_") in grads
                                   else grads[name].grad, p.grad,
                                   atol=1e-4, rtol=1e-4)


def test_a_copy_that_shares_the_plan_reads_its_own_weights():
    torch.manual_seed(0)
    model, x = Block().eval(), _image()
    opt = graphopt.optimize(model, x).module
    twin = copy.deepcopy(opt)  # its SqueezeExcite shares the plan and its Weights
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(-1.0)
        want = (opt(x), twin(x))
        for _ in range(2):  # alternate: each call swaps the kept views
            torch.testing.assert_close(opt(x), want[0])
            torch.testing.assert_close(twin(x), want[1])
        assert not torch.allclose(want[0], want[1])
        ref = copy.deepcopy(twin.graph_module)
        for m in _gates(ref):
            m.plan = None
        torch.testing.assert_close(want[1], ref(x), atol=1e-5, rtol=1e-5)


def test_a_table_without_the_row_leaves_the_gates_to_the_other_rows():
    from graphopt.passes import PATTERNS

    model, (x,) = example("mobilenet_v3_small", size=32)
    gm = graphopt.optimize(model, x, passes=["fold_conv_bn"]).module
    rows = [p for p in PATTERNS if p.name != "Squeeze+Excite"]
    without = fuse_patterns(gm, table=rows).module
    assert not _gates(without) and len(_gates(fuse_patterns(gm).module)) == 9
    convs = [m for m in without.modules() if type(m).__name__ == "ConvReLU"]
    assert len(convs) > 20  # the gates' first convs are Conv+ReLU again
    with torch.no_grad():
        torch.testing.assert_close(without(x), model(x), atol=1e-5, rtol=1e-4)
