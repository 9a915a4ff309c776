"""fuse_patterns: each table row, what it leaves alone, and its one kernel after the
backend stage.

The pass only rewrites the graph: a fused module runs its pattern's ops by reference
and the interpreter counts each of them. The backend stage (`bind_backend`, chapter
7) binds one library kernel to each module and prepacks its weight; the tests that
count one kernel, or read the kernel chosen, run that stage on the pass's output.
"""

import collections
import copy
import io
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import graphopt
from graph_match import assert_unchanged
from graphgen import state_hash
from graphopt import OpKind, models
from graphopt.analysis import total_flops
from graphopt.backend import bind_backend, onednn
from graphopt.backend.single_ops import SINGLE_OPS, PackedConv
from graphopt.passes import PATTERNS, fold_conv_bn, fuse_patterns, fused_modules
from graphopt.passes.matching import value
from graphopt.verify import equivalent, random_like

# the fused kernels on small shapes: the policy's small-work rules are off here
pytestmark = pytest.mark.usefixtures("small_work_fused")

needs_onednn = pytest.mark.skipif(not onednn.available(), reason="no oneDNN in torch")


def _fused(gm, packed=False):
    """Fused node -> module class; lone prepacked convs/linears only with `packed`."""
    names = {n.name: type(gm.get_submodule(n.target)).__name__
             for n in gm.graph.nodes if n.op == "call_module"
             and n.target.startswith("fused")}
    return {k: v for k, v in names.items() if packed or not v.startswith("Packed")}


def _fused_nodes(report):
    return [n for n in report.nodes if n.name.startswith("fused")]


def _only(gm, cls):
    """The one module of class `cls` in `gm`."""
    (module,) = [m for m in gm.modules() if isinstance(m, cls)]
    return module


def _bound(gm, res, x):
    """The backend stage on the pass's output: equivalent, the pass's module
    untouched (the stage returns its own copy)."""
    before = state_hash(res.module)
    out = bind_backend(res.module)
    assert out.module is not res.module and state_hash(res.module) == before
    _check(gm, out, x)
    return out


def _check(gm, res, x):
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)
    assert equivalent(gm, res.module, x, raise_on_mismatch=True)
    assert equivalent(gm, res.module, x, raise_on_mismatch=True)  # repeated calls


def _nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def test_table_has_one_named_row_per_pattern():
    assert [p.name for p in PATTERNS] == ["Conv+BN+ReLU", "Conv+ReLU", "Conv+Add+ReLU",
                                          "Conv+Add", "MatMul+Add+ReLU",
                                          "LayerNorm+Add", "Squeeze+Excite"]
    assert [p.name for p in SINGLE_OPS] == ["Conv", "Linear"]


@needs_onednn
@pytest.mark.parametrize("level", ["aten", "module"])
def test_conv_bn_relu_is_one_onednn_kernel(level):
    model, x = models.example("basic_block")
    gm = graphopt.capture(model, *x, level=level)
    before = state_hash(model), state_hash(gm)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["ConvReLU"]
    _check(gm, res, x)
    fused = next(m for m in res.module.modules() if isinstance(m, fused_modules.ConvReLU))
    # the pass only rewrote the graph: BN is in the weights, conv and ReLU still run
    assert fused.kernel == "reference" and fused.plan is None
    assert not fused.is_prepacked
    assert _fused_nodes(graphopt.run(res.module, *x))[0].kernels == 2
    bound = _bound(gm, res, x)
    fused = next(m for m in bound.module.modules()
                 if isinstance(m, fused_modules.ConvReLU))
    assert fused.kernel == "onednn" and fused.is_prepacked
    node = _fused_nodes(graphopt.run(bound.module, *x))[0]
    assert node.kernels == 1  # conv + bn + relu: 3 kernels became one
    assert (state_hash(model), state_hash(gm)) == before


@needs_onednn
@pytest.mark.parametrize("level", ["aten", "module"])
def test_conv_relu_and_conv_add_relu_count_one_launch_and_their_bytes(level):
    model, x = models.example("basic_block")
    gm = fold_conv_bn(graphopt.capture(model, *x, level=level)).module
    res = fuse_patterns(gm)
    assert sorted(_fused(res.module).values()) == ["ConvAddReLU", "ConvReLU"]
    _check(gm, res, x)
    report = graphopt.run(res.module, *x)  # by reference: conv, relu; conv, add, relu
    assert [n.kernels for n in report.nodes] == [2, 3] and report.kernels == 5
    res = _bound(gm, res, x)
    report = graphopt.run(res.module, *x)
    assert [n.kind for n in report.nodes] == [OpKind.COMPUTE] * 2  # guards are not ops
    assert [n.kernels for n in report.nodes] == [1, 1] and report.kernels == 2
    # one launch: x, W, b (and the residual) read once, the output written once
    (inp,), out = x, res.module(*x)
    fused = [n for n in res.module.graph.nodes if n.name.startswith("fused")]
    (w1, b1), (w2, b2) = ([value(res.module, a) for a in n.args[1:3]] for n in fused)
    assert report.nodes[0].bytes_read == _nbytes(inp, w1, b1)
    assert report.nodes[1].bytes_read == _nbytes(out, w2, b2, inp)
    assert [n.bytes_written for n in report.nodes] == [_nbytes(out)] * 2


ACTS = {"relu": nn.ReLU(), "relu6": nn.ReLU6(), "hardtanh": nn.Hardtanh(-1.0, 2.0),
        "hardswish": nn.Hardswish(), "silu": nn.SiLU(), "gelu": nn.GELU(),
        "gelu_tanh": nn.GELU(approximate="tanh")}


@needs_onednn
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias,groups,stride,padding",
                         [(True, 1, 1, 1), (False, 1, 2, 0), (True, 8, 1, 1),
                          (False, 8, 2, 2), (True, 2, 1, (1, 0))])
def test_every_activation_and_conv_shape_is_one_kernel(act, bias, groups, stride, padding):
    torch.manual_seed(0)
    conv = nn.Conv2d(8, 8, 3, stride=stride, padding=padding, groups=groups, bias=bias)
    model = nn.Sequential(conv, nn.BatchNorm2d(8), ACTS[act]).eval()
    models.randomize_bn(model, 0)
    x = (torch.randn(2, 8, 9, 9),)
    gm = graphopt.capture(model, *x)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["ConvReLU"]
    _check(gm, res, x)
    fused = next(m for m in res.module.modules() if isinstance(m, fused_modules.ConvReLU))
    assert fused.act.name == ("hardtanh(-1, 2)" if act == "hardtanh" else act)
    assert [n.kernels for n in graphopt.run(res.module, *x).nodes] == [2]
    bound = _bound(gm, res, x)
    assert [n.kernels for n in graphopt.run(bound.module, *x).nodes] == [1]
    assert _only(bound.module, fused_modules.ConvReLU).kernel == "onednn"


@needs_onednn
@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.sampled_from([1, 2, 4]), st.integers(1, 2),
       st.integers(0, 2), st.integers(1, 3), st.booleans(), st.integers(5, 11))
def test_conv_act_matches_eager_property(batch, groups, stride, padding, k, bias, size):
    torch.manual_seed(batch * 7 + size)
    conv = nn.Conv2d(4, 8, k, stride=stride, padding=padding, groups=groups, bias=bias)
    model = nn.Sequential(conv, nn.Hardswish()).eval()
    x = (torch.randn(batch, 4, size, size),)
    gm = graphopt.capture(model, *x)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["ConvReLU"]
    _check(gm, res, x)
    bound = _bound(gm, res, x)  # oneDNN's conv with the post-op, on every shape
    assert _only(bound.module, fused_modules.ConvReLU).kernel == "onednn"


@needs_onednn
@pytest.mark.parametrize("level", ["aten", "module"])
def test_linear_relu(level):
    model, x = models.example("mlp")
    gm = graphopt.capture(model, *x, level=level)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["LinearReLU", "LinearReLU"]
    assert list(_fused(res.module, packed=True).values()) == ["LinearReLU"] * 2
    _check(gm, res, x)
    report = graphopt.run(res.module, *x)  # by reference: linear, then relu
    assert [n.kernels for n in _fused_nodes(report)] == [2, 2]
    bound = _bound(gm, res, x)  # and the last linear, alone but prepacked
    assert list(_fused(bound.module, packed=True).values()) == \
        ["LinearReLU", "LinearReLU", "PackedLinear"]
    report = graphopt.run(bound.module, *x)
    assert [n.kernels for n in _fused_nodes(report)] == [1, 1, 1]


@needs_onednn
@pytest.mark.parametrize("act", ["gelu", "silu", "relu6"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_with_activation_on_3d_input(act, bias):
    model = nn.Sequential(nn.Linear(16, 32, bias=bias), ACTS[act]).eval()
    x = (torch.randn(2, 5, 16),)
    gm = graphopt.capture(model, *x)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["LinearReLU"]
    _check(gm, res, x)
    assert _only(res.module, fused_modules.LinearReLU).kernel == "reference"
    assert not res.notes  # the pass chose no kernel: the backend says which
    res = _bound(gm, res, x)
    (node,) = graphopt.run(res.module, *x).nodes
    # the rule (Policy.linear_kernel): one oneDNN kernel, the bias and activation as
    # post-ops (exact GELU included), and a note that says why; MKL's GEMM then
    # torch's GELU only under gemm_library="mkl" (tests/test_gemm_choice.py)
    (fused,) = [m for m in res.module.modules()
                if isinstance(m, fused_modules.LinearReLU)]
    mkl = False
    assert "post-op" in fused.why and any("runs oneDNN" in n for n in res.notes)
    assert fused.kernel == ("mkl" if mkl else "onednn")
    assert node.kernels == (2 if mkl else 1)
    assert not any("runs 2 kernels" in n for n in res.notes)
    # two kernels pass the product through memory: written once more, read back once
    out = _nbytes(res.module(*x))
    between = out if mkl else 0
    assert node.bytes_read == _nbytes(x[0], model[0].weight, model[0].bias) + between
    assert node.bytes_written == out + between


def test_matmul_add_relu_on_activations_is_two_kernels_and_says_why():
    class M(nn.Module):
        def forward(self, a, b, c):
            return torch.relu(a @ b + c)

    x = (torch.randn(4, 5), torch.randn(5, 3), torch.randn(4, 3))
    gm = graphopt.capture(M(), *x)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["MatMulAddReLU"]
    _check(gm, res, x)
    assert graphopt.run(res.module, *x).kernels == 2  # addmm, relu
    res = _bound(gm, res, x)  # no library fuses it: still two, and the stage says why
    assert graphopt.run(res.module, *x).kernels == 2
    assert _only(res.module, fused_modules.MatMulAddReLU).kernel == "eager"
    assert any(n.startswith("backend: ") and "(MatMulAddReLU)" in n
               and "2 kernels" in n for n in res.notes), res.notes


@needs_onednn
def test_matmul_with_constant_weight_becomes_a_linear():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 4))
            self.b = nn.Parameter(torch.randn(4))

        def forward(self, a):
            return torch.relu(a @ self.w + self.b)

    x = (torch.randn(3, 6),)
    gm = graphopt.capture(M().eval(), *x)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["LinearReLU"]
    _check(gm, res, x)
    assert graphopt.run(res.module, *x).kernels == 2  # by reference: linear, relu
    assert graphopt.run(_bound(gm, res, x).module, *x).kernels == 1
    # the folded w.T is a constant outside autograd: the module copies (later passes
    # deep-copy it), and the whole pipeline runs on it
    copy.deepcopy(res.module)
    out = graphopt.optimize(M().eval(), *x, stats=False).module
    assert list(_fused(out).values()) == ["LinearReLU"]
    # in training mode w is a weight the optimiser changes: the product stays, and
    # its gradient reaches w
    train = M()
    res = graphopt.optimize(train, *x, stats=False)
    assert list(_fused(res.module).values()) == ["MatMulAddReLU"]
    res.module(*x).sum().backward()
    assert res.module.w.grad is not None and train.w.grad is None  # nothing lost


@pytest.mark.parametrize("level", ["aten", "module"])
def test_layer_norm_add_is_one_row_kernel(level):
    model, x = models.example("transformer_block")
    gm = graphopt.capture(model, *x, level=level)
    res = fuse_patterns(gm)
    kinds = sorted(_fused(res.module).values())
    assert kinds == ["AddLayerNorm", "AddLayerNorm", "LinearReLU"]
    _check(gm, res, x)
    norms = [n for n in res.module.graph.nodes if n.op == "call_module"
             and isinstance(res.module.get_submodule(n.target), fused_modules.AddLayerNorm)]
    assert all(graphopt.kind(n) is OpKind.REDUCTION for n in norms)
    report = graphopt.run(res.module, *x)  # by reference: add, then layer_norm
    rows = [r for r in report.nodes if r.name in {n.name for n in norms}]
    assert [r.kernels for r in rows] == [2, 2]
    res = _bound(gm, res, x)
    assert {m.kernel for m in res.module.modules()
            if isinstance(m, fused_modules.AddLayerNorm)} == {"numba"}
    report = graphopt.run(res.module, *x)
    rows = [r for r in report.nodes if r.name in {n.name for n in norms}]
    assert [r.kernels for r in rows] == [1, 1]
    # a and b read, weight and bias read, the normalised rows written: no a + b
    row = rows[0]
    assert row.bytes_written * 2 + 2 * 4 * row.shape[-1] == row.bytes_read


def test_add_layer_norm_kernel_matches_eager_on_hard_rows():
    from graphopt.backend import rowwise

    torch.manual_seed(0)
    a = torch.randn(7, 33) * 1e3 + 1e4  # a large mean: a sum-of-squares formula fails
    b = torch.randn(7, 33)
    w, bias = torch.randn(33), torch.randn(33)
    ref = F.layer_norm(a + b, (33,), w, bias, 1e-5)
    for welford in (False, True):
        got = rowwise.add_layer_norm(a, b, w, bias, 1e-5, welford=welford,
                                     parallel_numel=1 << 62)  # the serial loop
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    got = rowwise.add_layer_norm(a, b, None, None, 1e-5, parallel_numel=1 << 62)
    torch.testing.assert_close(got, F.layer_norm(a + b, (33,), eps=1e-5),
                               rtol=1e-4, atol=1e-4)
    big = torch.randn(1 << 10, 160)  # the parallel loop
    torch.testing.assert_close(rowwise.add_layer_norm(big, big, w[:1].expand(160)
                                                      .contiguous(), None, 1e-5,
                                                      parallel_numel=0),
                               F.layer_norm(2 * big, (160,), w[:1].expand(160), None,
                                            1e-5), rtol=1e-4, atol=1e-4)


def test_fusion_keeps_the_flops():
    model, x = models.example("basic_block")
    gm = fold_conv_bn(graphopt.capture(model, *x)).module
    res = fuse_patterns(gm)
    assert total_flops(res.module) == total_flops(gm) > 0
    model, x = models.example("transformer_block")
    gm = graphopt.capture(model, *x)
    assert total_flops(fuse_patterns(gm).module) == total_flops(gm) > 0


def test_float64_keeps_eager_ops_and_says_why():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval().double()
    x = (torch.randn(1, 3, 8, 8, dtype=torch.float64),)
    gm = graphopt.capture(model, *x)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["ConvReLU"]
    _check(gm, res, x)
    res = _bound(gm, res, x)  # the backend binds no float32 kernel, and says why
    (node,) = [n for n in res.module.graph.nodes if n.name.startswith("fused")]
    why = "dtype torch.float64, the onednn kernel takes float32" \
        if onednn.available() else "this torch build has no oneDNN"
    assert f"backend: {node.name} (ConvReLU) runs the eager ops: {why}" in res.notes
    assert _only(res.module, fused_modules.ConvReLU).kernel == "eager"
    assert graphopt.run(res.module, *x).kernels == 2  # conv, relu: honestly two


@needs_onednn
def test_autograd_gets_eager_ops_and_right_gradients():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.SiLU()).eval()
    x = torch.randn(1, 3, 8, 8, requires_grad=True)
    res = fuse_patterns(graphopt.capture(model, x.detach()))
    grads = []
    for gm in (res.module, bind_backend(res.module).module):  # oneDNN: no backward
        gm(x).sum().backward()
        grads.append(x.grad.clone())
        x.grad = None
    model(x).sum().backward()
    for got in grads:
        torch.testing.assert_close(got, x.grad)


@needs_onednn
def test_prepacked_weight_survives_copies_and_never_goes_stale():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    fused = bind_backend(fuse_patterns(graphopt.capture(model, x)).module).module
    copied = copy.deepcopy(fused)
    mod = next(m for m in copied.modules() if isinstance(m, fused_modules.ConvReLU))
    assert mod.is_prepacked and mod.packed(mod._pack[0], tuple(x.shape)) is not None
    with torch.no_grad():
        torch.testing.assert_close(copied(x), fused(x))
        weight, bias = mod._pack[0], model[0].bias
        weight.mul_(-1.0)  # an in-place write: the packed copy must not be used
        torch.testing.assert_close(copied(x), F.relu(F.conv2d(x, weight, bias)))
        torch.testing.assert_close(fused(x), model(x))  # the original is untouched
    buf = io.BytesIO()
    torch.save(mod, buf)  # oneDNN's opaque tensor cannot be pickled: it is dropped
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert not loaded.is_prepacked
    with torch.no_grad():  # and the plain weight runs the same kernel
        torch.testing.assert_close(loaded(x, weight, bias), copied(x))


@needs_onednn
def test_other_batch_size_than_packed_for():
    model, x = models.example("basic_block")
    gm = fold_conv_bn(graphopt.capture(model, *x, level="module")).module
    res = bind_backend(fuse_patterns(gm).module)  # packed for batch 1; a module
    big = (torch.randn(3, *x[0].shape[1:]),)  # graph runs any batch
    assert all(m.is_prepacked for m in res.module.modules()
               if isinstance(m, fused_modules.ConvReLU))
    with torch.no_grad():
        torch.testing.assert_close(res.module(*big), gm(*big), rtol=1e-4, atol=1e-4)


class ConvTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return F.relu(y) + y  # the conv's output has two readers


class ConvBroadcastAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x, bias):
        return F.relu(self.conv(x) + bias)  # bias broadcasts: not the binary post-op


@pytest.mark.parametrize("level", ["aten", "module"])
def test_must_not_change(level):
    # no pattern fires: the pass leaves the graph as it was
    x = (torch.randn(1, 4, 6, 6),)
    gm = graphopt.capture(ConvTwice().eval(), *x, level=level)
    res = assert_unchanged(fuse_patterns, gm)
    assert _fused(res.module, packed=True) == {}
    # the conv alone still runs on its prepacked weight: the backend's single op
    packed = ["PackedConv"] if onednn.available() else []
    assert list(_fused(_bound(gm, res, x).module, packed=True).values()) == packed
    x = (torch.randn(1, 4, 1, 1), torch.randn(1, 4, 6, 6))
    gm = graphopt.capture(ConvBroadcastAdd().eval(), *x, level=level)
    res = assert_unchanged(fuse_patterns, gm)
    assert _fused(res.module, packed=True) == {}
    _check(gm, res, x)
    assert _fused(_bound(gm, res, x).module) == {}  # no Conv+Add+ReLU there either


def test_hand_built_in_place_relu_is_refused():
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    conv = g.call_function(torch.ops.aten.conv2d.default, (x, w))
    g.output(g.call_function(torch.ops.aten.relu_.default, (conv,)))
    gm = torch.fx.GraphModule(nn.Module(), g)
    assert_unchanged(fuse_patterns, gm)


@pytest.mark.parametrize("level", ["aten", "module"])
def test_training_mode_bn_blocks_conv_bn_relu(level):
    model, x = models.example("seed_conv_block")  # conv -> relu -> bn: only Conv+ReLU
    gm = graphopt.capture(model, *x, level=level)
    assert list(_fused(fuse_patterns(gm).module).values()) == ["ConvReLU"]

    class ConvBNReLU(nn.Sequential):
        pass

    block = ConvBNReLU(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train()
    gm = graphopt.capture(block, torch.randn(2, 3, 8, 8), level=level)
    assert _fused(fuse_patterns(gm).module) == {}


@needs_onednn
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_real_cnns_every_conv_fused(name):
    model, x = models.example(name)
    x = tuple(torch.randn(1, 3, 64, 64) for _ in x)
    res = graphopt.optimize(model, *x,
                            passes=["fold_conv_bn", "fuse_patterns", "backend"],
                            stats=False)
    assert [s.name for s in res.stages] == ["captured", "fold_conv_bn",
                                            "fuse_patterns", "backend"]
    fused = res.stages[2].module  # the pass: patterns only, lone convs left alone
    lone = [n for n in fused.graph.nodes if graphopt.ops.op_name(n) == "conv2d"]
    patterns = collections.Counter(_fused(fused, packed=True).values())
    gm = res.module
    assert not [n for n in gm.graph.nodes if graphopt.ops.op_name(n) == "conv2d"]
    counts = collections.Counter(_fused(gm, packed=True).values())
    assert counts["PackedConv"] == len(lone)  # the backend prepacked each lone conv
    assert counts - collections.Counter(PackedConv=len(lone), PackedLinear=1) == \
        patterns
    if name == "resnet18":  # 1 + 8 Conv+ReLU, 8 Conv+Add+ReLU, 3 downsample convs
        assert patterns == {"ConvReLU": 9, "ConvAddReLU": 8} and len(lone) == 3
        assert counts == {"ConvReLU": 9, "ConvAddReLU": 8, "PackedConv": 3,
                          "PackedLinear": 1}
    else:  # each squeeze-excite gate's two convs in its SqueezeExcite, and the
        # six inverted residuals' projection conv and add in a Conv+Add
        assert counts["ConvReLU"] >= 20 and counts["PackedConv"] >= 4
        assert counts["SqueezeExcite"] == 9 and counts["ConvAddReLU"] == 6
    with torch.no_grad():
        torch.testing.assert_close(gm(*x), model(*x), rtol=1e-3, atol=1e-3)
    report = graphopt.run(gm, *x)
    # one kernel per fused pattern; the fixed policy runs every conv on a 1x1 map
    # (a gate) as eager conv2d, then its activation: two kernels, and it says so
    node = {n.name: n for n in gm.graph.nodes}
    for n in _fused_nodes(report):
        module = gm.get_submodule(node[n.name].target)
        tiny = isinstance(module, fused_modules.ConvReLU) and \
            math.prod(graphopt.shape(node[n.name].args[0])[2:]) == 1
        assert (module.kernel == "eager") == tiny, (n.name, module)
        two = tiny and module.act.attr != "none"
        assert n.kernels == (2 if two else 1), (n.name, module)
    assert not [m for m in gm.modules() if getattr(m, "why_eager", "")]


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
def test_a_gate_conv_on_a_1x1_map_says_it_runs_eager():
    """The backend says where prepacking kept eager conv2d (a squeeze-and-excitation
    gate: oneDNN's fixed cost per call is larger than the work), and stays
    equivalent."""
    gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 4, 1)).eval()
    x = (torch.randn(1, 16, 8, 8),)
    gm = graphopt.capture(gate, *x)
    res = assert_unchanged(fuse_patterns, gm)  # a lone conv is no pattern
    res = _bound(gm, res, x)
    conv = _only(res.module, PackedConv)
    assert conv.kernel == "eager" and conv.why_eager
    (node,) = [n for n in res.module.graph.nodes if n.name.startswith("fused")]
    note = f"backend: {node.name} (PackedConv) runs eager: {conv.why_eager}"
    assert note in res.notes and "1x1" in note, res.notes
