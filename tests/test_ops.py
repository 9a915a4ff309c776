"""The op vocabulary: kind(), shape(), dtype(), nbytes(), flops() (chapter 1)."""

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

import graphopt
from graphopt import OpKind, models
from graphopt.ops import is_impure, is_random, op_name

E, R, L, C, O = (  # noqa: E741 (O is OpKind.OTHER, beside E, R, L, C)
    OpKind.ELEMENTWISE, OpKind.REDUCTION, OpKind.LAYOUT, OpKind.COMPUTE, OpKind.OTHER
)


class Zoo(nn.Module):
    """One of each op class the book names, traced at aten level."""

    def forward(self, x):
        a = x.relu()
        b = a.sum(dim=-1)
        c = x.softmax(-1)
        d = x.transpose(1, 2)
        e = x.reshape(6, 8)
        f = torch.cat([x, x], 0)
        g = x @ x.transpose(1, 2)
        h = F.layer_norm(x, (8,))
        i = x.mean(-1)
        j = torch.sigmoid(x) * 2
        k = x.permute(2, 0, 1).contiguous()
        m = F.gelu(x) - x.amax(-1, keepdim=True)
        return a, b, c, d, e, f, g, h, i, j, k, m


ZOO_KINDS = {
    "relu": E, "sum_1": R, "softmax": R, "transpose": L, "reshape": L, "cat": L,
    "transpose_1": L, "matmul": C, "layer_norm": R, "mean": R, "sigmoid": E, "mul": E,
    "permute": L, "contiguous": L, "gelu": E, "amax": R, "sub": E,
}


@pytest.fixture(scope="module")
def zoo():
    return graphopt.capture(Zoo(), torch.randn(2, 3, 8))


def _by_name(gm):
    return {n.name: n for n in gm.graph.nodes}


def test_kind_of_aten_ops(zoo):
    nodes = _by_name(zoo)
    assert {name: graphopt.kind(nodes[name]) for name in ZOO_KINDS} == ZOO_KINDS
    assert graphopt.kind(nodes["x"]) is O and graphopt.kind(nodes["output"]) is O
    assert graphopt.kind(nodes["_guards_fn"]) is O


def test_kind_comes_from_torch_tags_where_they_exist(zoo):
    # the tag, not our table, classifies relu/sum/transpose
    assert torch.Tag.pointwise in torch.ops.aten.relu.default.tags
    assert torch.Tag.reduction in torch.ops.aten.sum.dim_IntList.tags
    assert torch.ops.aten.transpose.int.is_view
    assert "relu" not in graphopt.ops._BY_NAME


@pytest.mark.parametrize("level", ["aten", "module"])
def test_kind_of_seed_block(level):
    model, (x,) = models.example("seed_conv_block")
    gm = graphopt.capture(model, x, level=level)
    kinds = [graphopt.kind(n) for n in gm.graph.nodes
             if n.op in ("call_function", "call_module") and n.name != "_guards_fn"]
    assert kinds == [C, E, E, E]  # conv, relu, BN (eval: per-channel affine), add


@pytest.mark.parametrize("level", ["aten", "module"])
def test_training_mode_batch_norm_is_a_reduction(level):
    model, (x,) = models.example("seed_conv_block")
    gm = graphopt.capture(model.train(), x, level=level)
    bn = [n for n in gm.graph.nodes if op_name(n) in ("batch_norm", "BatchNorm2d")]
    assert len(bn) == 1
    assert graphopt.kind(bn[0]) is R  # it computes the batch's mean and variance


def test_kind_of_modules():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.act = nn.ReLU()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flat = nn.Flatten()
            self.norm = nn.LayerNorm(4)
            self.fc = nn.Linear(4, 2)
            self.odd = nn.PixelShuffle(1)  # not in the table

        def forward(self, x):
            x = self.odd(self.pool(self.act(self.bn(self.conv(x)))))
            return self.fc(self.norm(self.flat(x)))

    gm = graphopt.capture(Net().eval(), torch.randn(2, 3, 8, 8), level="module")
    got = {n.name: graphopt.kind(n) for n in gm.graph.nodes if n.op == "call_module"}
    assert got == {"conv": C, "bn": E, "act": E, "pool": R, "odd": O, "flat": L,
                   "norm": R, "fc": C}


def test_fused_modules_declare_their_own_kind():
    class Fused(nn.Module):
        graphopt_kind = OpKind.ELEMENTWISE

        def forward(self, x):
            return x.relu() * 2

    g = fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_module("fused", (x,)))
    root = nn.Module()
    root.fused = Fused()
    gm = fx.GraphModule(root, g)
    node = next(n for n in gm.graph.nodes if n.op == "call_module")
    assert graphopt.kind(node) is E


def test_shape_dtype_nbytes(zoo):
    nodes = _by_name(zoo)
    assert graphopt.shape(nodes["sum_1"]) == (2, 3)
    assert graphopt.shape(nodes["permute"]) == (8, 2, 3)
    assert graphopt.dtype(nodes["relu"]) == torch.float32
    assert graphopt.nbytes(nodes["cat"]) == 4 * 3 * 8 * 4
    assert graphopt.nbytes(nodes["amax"]) == 2 * 3 * 1 * 4
    assert graphopt.shape(nodes["output"]) is None  # a tuple of tensors
    assert graphopt.nbytes(nodes["output"]) == sum(
        graphopt.nbytes(n) for n in nodes["output"].all_input_nodes)


def test_shape_of_an_unannotated_node_is_none():
    gm = fx.symbolic_trace(lambda x: x + 1)
    add = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert graphopt.shape(add) is None and graphopt.dtype(add) is None
    assert graphopt.nbytes(add) == 0 and graphopt.flops(add) == 0


def test_flops_by_class(zoo):
    nodes = _by_name(zoo)
    assert graphopt.flops(nodes["relu"]) == 48            # one per output element
    assert graphopt.flops(nodes["sum_1"]) == 48           # one per input element
    assert graphopt.flops(nodes["matmul"]) == 2 * 2 * 3 * 3 * 8
    assert graphopt.flops(nodes["transpose"]) == 0       # layout computes nothing
    assert graphopt.flops(nodes["x"]) == 0


@pytest.mark.parametrize("level", ["aten", "module"])
def test_flops_of_conv_and_linear(level):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, groups=1), nn.Flatten(),
                          nn.Linear(8 * 5 * 5, 10))
    gm = graphopt.capture(model, torch.randn(2, 3, 5, 5), level=level)
    compute = [graphopt.flops(n) for n in gm.graph.nodes if graphopt.kind(n) is C]
    assert compute == [2 * (2 * 8 * 5 * 5) * (3 * 3 * 3), 2 * (2 * 10) * 200]


def test_flops_of_grouped_conv_module():
    model = nn.Sequential(nn.Conv2d(4, 8, 3, groups=2))
    gm = graphopt.capture(model, torch.randn(1, 4, 6, 6), level="module")
    conv = next(n for n in gm.graph.nodes if n.op == "call_module")
    assert graphopt.flops(conv) == 2 * (8 * 4 * 4) * (2 * 9)


def test_op_name():
    gm = fx.symbolic_trace(lambda x: (x + 1) * x @ x)
    names = [op_name(n) for n in gm.graph.nodes]
    assert names == ["placeholder", "add", "mul", "matmul", "output"]
    assert [n.target for n in gm.graph.nodes][2] is operator.mul


def test_random_and_impure_nodes():
    gm = graphopt.capture(lambda x: F.dropout(x, 0.5, True) + torch.rand_like(x),
                          torch.randn(3))
    got = {n.name: (is_random(n), is_impure(n)) for n in gm.graph.nodes}
    assert got["dropout"] == (True, True) and got["rand_like"] == (True, True)
    assert got["add"] == (False, False)
    assert got["_guards_fn"][1] and got["x" if "x" in got else "args_0"][1]


def test_dropout_module_is_random_only_in_training():
    model = nn.Sequential(nn.Dropout(0.5))
    for training in (True, False):
        gm = graphopt.capture(model.train(training), torch.randn(3), level="module")
        node = next(n for n in gm.graph.nodes if n.op == "call_module")
        assert is_random(node) is training


def test_flops_of_fused_pattern_modules_are_their_members():
    from graphopt.passes import fold_conv_bn, fuse_patterns

    block = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 5), nn.GELU()).eval()
    x = torch.randn(2, 3, 6, 6)
    gm = fold_conv_bn(graphopt.capture(block, x)).module
    fused = [n for n in fuse_patterns(gm).module.graph.nodes
             if n.op == "call_module" and n.target.startswith("fused")]
    conv_out, lin_out = 2 * 8 * 4 * 4, 2 * 5
    assert [graphopt.flops(n) for n in fused] == [
        2 * conv_out * (3 * 9) + conv_out,       # conv, then one op per element (ReLU)
        2 * lin_out * (8 * 4 * 4) + lin_out]     # linear, then GELU
