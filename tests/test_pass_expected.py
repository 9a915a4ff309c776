"""Each pass on a graph built by hand, compared with the graph it should give.

In the style of TVM's pass tests: `before` is built node by node, the pass runs on
it, and the result is compared by structure (tests/graph_match.py: ops, edges,
sharing and constant values; never names) with an `expected` graph also built by
hand. Each pass also has a case it must leave exactly as it was. No test here needs
oneDNN, MKL or a compiler: passes rewrite graphs, backends come later.
"""

import pytest
import torch
from torch import fx, nn

from graph_match import assert_same_graph
from graphopt.backend import onednn
from graphopt.capture import annotate
from graphopt.passes import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    fold_conv_bn,
    fuse_elementwise,
    fuse_patterns,
)
from graphopt.passes.conv_bn_math import fold_conv_bn_weights

aten = torch.ops.aten
GEN = torch.Generator().manual_seed(0)
C = torch.randn(3, generator=GEN)
W = torch.randn(4, 3, 3, 3, generator=GEN)
B = torch.randn(4, generator=GEN)
GAMMA, BETA = torch.rand(4, generator=GEN) + 0.5, torch.randn(4, generator=GEN)
MEAN, VAR = torch.randn(4, generator=GEN), torch.rand(4, generator=GEN) + 0.5


def graph(build, example=None, **constants) -> fx.GraphModule:
    """A GraphModule whose graph `build(g, x)` writes; `constants` become buffers.

    With an `example` input, every node gets the shape and dtype capture records
    (passes that decide by shape, like fuse_elementwise, need them).
    """
    root = nn.Module()
    for name, value in constants.items():
        root.register_buffer(name, value)
    g = fx.Graph()
    build(g, g.placeholder("x"))
    gm = fx.GraphModule(root, g)
    return gm if example is None else annotate(gm, example)


def call(g, op, *args):
    return g.call_function(op, args)


def assert_unchanged(pass_, gm):
    result = pass_(gm)
    assert not result.changed, result.notes
    assert_same_graph(result.module, gm)


# --- fold_constants: a subgraph of constants becomes one constant -------------------

def test_fold_constants_evaluates_the_constant_subgraph():
    def before(g, x):
        c = g.get_attr("c")
        g.output(call(g, aten.add.Tensor, x, call(g, aten.mul.Tensor, c, 2.0)))

    def expected(g, x):
        g.output(call(g, aten.add.Tensor, x, g.get_attr("folded")))

    result = fold_constants(graph(before, c=C))
    assert_same_graph(result.module, graph(expected, folded=C * 2.0))


def test_fold_constants_leaves_random_ops_alone():
    def before(g, x):
        noise = call(g, aten.rand_like.default, g.get_attr("c"))
        g.output(call(g, aten.add.Tensor, x, noise))

    assert_unchanged(fold_constants, graph(before, c=C))


# --- eliminate_dead_code: what nothing reads goes ------------------------------------

def test_dead_code_goes_with_the_weights_only_it_read():
    def before(g, x):
        y = call(g, aten.relu.default, x)
        call(g, aten.mul.Tensor, y, g.get_attr("c"))  # dead, and so is c
        g.output(y)

    def expected(g, x):
        g.output(call(g, aten.relu.default, x))

    result = eliminate_dead_code(graph(before, c=C))
    assert_same_graph(result.module, graph(expected))
    assert not hasattr(result.module, "c")


def test_dead_code_keeps_in_place_writes():
    def before(g, x):
        call(g, aten.add_.Tensor, g.get_attr("c"), 1.0)  # no reader, but it writes c
        g.output(call(g, aten.relu.default, x))

    assert_unchanged(eliminate_dead_code, graph(before, c=C))


# --- eliminate_common_subexpressions: one node per distinct computation --------------

def test_cse_merges_equal_nodes_and_shares_the_result():
    def before(g, x):
        a, b = call(g, aten.relu.default, x), call(g, aten.relu.default, x)
        g.output(call(g, aten.add.Tensor, a, b))

    def expected(g, x):
        a = call(g, aten.relu.default, x)
        g.output(call(g, aten.add.Tensor, a, a))

    result = eliminate_common_subexpressions(graph(before))
    assert_same_graph(result.module, graph(expected))


def test_cse_never_merges_random_ops():
    def before(g, x):
        a, b = call(g, aten.rand_like.default, x), call(g, aten.rand_like.default, x)
        g.output(call(g, aten.add.Tensor, a, b))

    assert_unchanged(eliminate_common_subexpressions, graph(before))


# --- fold_conv_bn: the batch norm's scale and shift move into the conv ---------------

def _conv_bn(training: bool):
    def before(g, x):
        w, b = g.get_attr("w"), g.get_attr("b")
        y = call(g, aten.conv2d.default, x, w, b)
        stats = [g.get_attr(n) for n in ("gamma", "beta", "mean", "var")]
        bn = aten.batch_norm.default
        g.output(call(g, bn, y, *stats, training, 0.1, 1e-5, False))
    return graph(before, w=W, b=B, gamma=GAMMA, beta=BETA, mean=MEAN, var=VAR)


def test_fold_conv_bn_gives_a_conv_with_folded_weights():
    def expected(g, x):
        g.output(call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b")))

    w, b = fold_conv_bn_weights(W, B, MEAN, VAR, 1e-5, GAMMA, BETA)
    result = fold_conv_bn(_conv_bn(training=False))
    assert_same_graph(result.module, graph(expected, w=w, b=b))
    # and the weights are torch's own folding (torch.nn.utils.fusion)
    ref_w, ref_b = torch.nn.utils.fusion.fuse_conv_bn_weights(
        W, B, MEAN, VAR, 1e-5, GAMMA, BETA)
    torch.testing.assert_close(w, ref_w.detach())
    torch.testing.assert_close(b, ref_b.detach())


def test_fold_conv_bn_keeps_a_training_batch_norm():
    assert_unchanged(fold_conv_bn, _conv_bn(training=True))


# --- fuse_elementwise: a chain of elementwise ops becomes one node --------------------

def _chain(g, x):
    y = call(g, aten.mul.Tensor, x, 2.0)
    y = call(g, aten.sigmoid.default, call(g, aten.add.Tensor, y, 1.0))
    return call(g, aten.sub.Tensor, y, x)


def test_fuse_elementwise_puts_the_chain_in_one_node_holding_it():
    x = torch.randn(4, 8, generator=GEN)
    result = fuse_elementwise(graph(lambda g, x: g.output(_chain(g, x)), x))
    (node,) = [n for n in result.module.graph.nodes if n.op == "call_module"]
    assert node.args == (next(iter(result.module.graph.nodes)),)  # reads x once
    group = result.module.get_submodule(str(node.target))
    assert_same_graph(group.gm, graph(lambda g, x: g.output(_chain(g, x))))


def test_fuse_elementwise_stops_at_a_matmul():
    def before(g, x):
        y = call(g, aten.mm.default, call(g, aten.relu.default, x), g.get_attr("m"))
        g.output(call(g, aten.relu.default, y))

    # one op on each side of the matmul: nothing to fuse, nothing changes
    x = torch.randn(2, 3, generator=GEN)
    assert_unchanged(fuse_elementwise, graph(before, x, m=torch.randn(3, 3)))


# --- fuse_patterns: Conv+ReLU becomes one fused module, also without oneDNN -----------

@pytest.fixture
def no_onednn(monkeypatch):
    monkeypatch.setattr(onednn, "available", lambda: False)
    monkeypatch.setattr(onednn, "mkl_available", lambda: False)


def _conv_relu(g, x):
    y = call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b"))
    return call(g, aten.relu.default, y)


def test_fuse_patterns_makes_conv_relu_one_module(no_onednn):
    result = fuse_patterns(graph(lambda g, x: g.output(_conv_relu(g, x)), w=W, b=B))
    (node,) = [n for n in result.module.graph.nodes if n.op == "call_module"]
    assert type(result.module.get_submodule(str(node.target))).__name__ == "ConvReLU"
    assert [a.op for a in node.args] == ["placeholder", "get_attr", "get_attr"]
    x = torch.randn(1, 3, 8, 8, generator=GEN)
    torch.testing.assert_close(result.module(x), torch.relu(
        torch.nn.functional.conv2d(x, W, B)))


def test_fuse_patterns_leaves_a_conv_whose_output_is_also_read_elsewhere(no_onednn):
    def before(g, x):
        y = call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b"))
        g.output((call(g, aten.relu.default, y), y))  # y is needed unrelu'd too

    assert_unchanged(fuse_patterns, graph(before, w=W, b=B))
