"""Each pass on a graph built by hand, compared with the graph it should give.

In the style of TVM's pass tests: `before` is built node by node, the pass runs on
it, and the result is compared by structure (tests/graph_match.py: ops, edges,
sharing, constant values with their dtype and layout, each module's settings;
never names) with an `expected` graph also built by hand. Each pass also has a case
it must leave exactly as it was, judged by the same comparison (graph before ==
graph after), not by the pass's own `changed` flag. Every row of the pattern table
and every attention variant has its expected graph. No test here needs
oneDNN, MKL or a compiler: passes rewrite graphs, backends come later (this file
imports nothing from `graphopt.backend`). `lower` is here too: it changes what a
fused node runs, not the graph's shape, and compiles nothing until a call.
"""

import subprocess
import sys

import torch
from torch import fx, nn
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from graph_match import assert_same_graph, assert_unchanged, same_graph
from graphopt.capture import annotate
from graphopt.codegen import GeneratedKernel, lower
from graphopt.passes import (
    convert_layout,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    fold_conv_bn,
    fuse_attention,
    fuse_elementwise,
    fuse_patterns,
    fuse_qkv,
)
from graphopt.passes.activations import ACTIVATIONS, RELU
from graphopt.passes.conv_bn_math import fold_conv_bn_weights
from graphopt.passes.convert_layout import ToLayout
from graphopt.passes.functionalize import functionalize
from graphopt.passes.fuse_elementwise import FusedElementwise
from graphopt.passes.fused_modules import (
    AddLayerNorm,
    ConvAddReLU,
    ConvReLU,
    LinearReLU,
    MatMulAddReLU,
)
from graphopt.policy import DEFAULT

aten = torch.ops.aten
GEN = torch.Generator().manual_seed(0)
C = torch.randn(3, generator=GEN)
W = torch.randn(4, 3, 3, 3, generator=GEN)
B = torch.randn(4, generator=GEN)
GAMMA, BETA = torch.rand(4, generator=GEN) + 0.5, torch.randn(4, generator=GEN)
MEAN, VAR = torch.randn(4, generator=GEN), torch.rand(4, generator=GEN) + 0.5


def graph(build, example=None, modules=None, **constants) -> fx.GraphModule:
    """A GraphModule whose graph `build(g, x)` writes; `constants` become buffers,
    `modules` (name -> nn.Module) submodules that `call_module` nodes may call.

    With an `example` input, every node gets the shape and dtype capture records
    (passes that decide by shape, like fuse_elementwise, need them).
    """
    root = nn.Module()
    for name, value in constants.items():
        root.register_buffer(name, value)
    for name, module in (modules or {}).items():
        root.add_module(name, module)
    g = fx.Graph()
    build(g, g.placeholder("x"))
    gm = fx.GraphModule(root, g)
    return gm if example is None else annotate(gm, example)


def call(g, op, *args):
    return g.call_function(op, args)


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


# --- lower: each fused group's node runs one generated kernel; the graph keeps its shape

def _group() -> FusedElementwise:
    """The chain above as the node module fuse_elementwise makes of it."""
    gm = graph(lambda g, x: g.output(_chain(g, x)))
    return FusedElementwise(gm.graph, ["mul", "add", "sigmoid", "sub"])


def test_lower_makes_each_fused_group_a_generated_kernel():
    def fused(g, x):
        g.output(g.call_module("group", (x,)))

    before = graph(fused, modules={"group": _group()})
    result = lower(before)
    expected = graph(fused, modules={"group": GeneratedKernel(_group(), DEFAULT)})
    assert_same_graph(result.module, expected)  # GeneratedKernel, the same chain
    assert type(before.group) is FusedElementwise  # the stage made its own copy
    assert result.module.group.ops == before.group.ops
    x = torch.randn(4, 8, generator=GEN)  # numba or its reference executor: one answer
    torch.testing.assert_close(result.module(x), before(x))


def test_lower_leaves_a_graph_without_fused_groups_alone():
    x = torch.randn(4, 8, generator=GEN)
    assert_unchanged(lower, graph(lambda g, x: g.output(_chain(g, x)), x))


# --- fuse_patterns: Conv+ReLU becomes one fused module, running its ops by reference --

def _conv_relu(g, x):
    y = call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b"))
    return call(g, aten.relu.default, y)


def test_fuse_patterns_makes_conv_relu_one_module():
    result = fuse_patterns(graph(lambda g, x: g.output(_conv_relu(g, x)), w=W, b=B))

    def expected(g, x):
        args = (x, g.get_attr("w"), g.get_attr("b"))
        g.output(g.call_module("fused", args))

    assert_same_graph(result.module,
                      graph(expected, modules={"fused": ConvReLU()}, w=W, b=B))
    (node,) = [n for n in result.module.graph.nodes if n.op == "call_module"]
    module = result.module.get_submodule(str(node.target))
    # no kernel chosen, nothing packed: that is the backend stage's (chapter 7)
    assert module.kernel == "reference" and module.plan is None
    assert not module.is_prepacked and not result.notes
    x = torch.randn(1, 3, 8, 8, generator=GEN)
    torch.testing.assert_close(result.module(x), torch.relu(
        torch.nn.functional.conv2d(x, W, B)))


def test_fuse_patterns_leaves_a_conv_whose_output_is_also_read_elsewhere():
    def before(g, x):
        y = call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b"))
        g.output((call(g, aten.relu.default, y), y))  # y is needed unrelu'd too

    assert_unchanged(fuse_patterns, graph(before, w=W, b=B))


def test_fuse_patterns_leaves_a_lone_conv_to_the_backend():
    def before(g, x):
        g.output(call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b")))

    assert_unchanged(fuse_patterns, graph(before, torch.randn(1, 3, 8, 8), w=W, b=B))


# --- every other row of the pattern table, each with its module's settings ----------

def _conv(g, x, stride=1, padding=0):
    return call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b"),
                [stride, stride], [padding, padding], [1, 1], 1)


def _fused(*args):
    """The expected graph's body: one call of the fused module on `args`."""
    def build(g, x):
        g.output(g.call_module("fused", tuple(
            x if a == "x" else g.get_attr(a) for a in args)))
    return build


def test_pattern_conv_bn_relu_folds_the_bn_into_one_strided_conv_relu():
    def before(g, x):
        y = _conv(g, x, stride=2, padding=1)
        stats = [g.get_attr(n) for n in ("gamma", "beta", "mean", "var")]
        y = call(g, aten.batch_norm.default, y, *stats, False, 0.1, 1e-5, False)
        g.output(call(g, aten.relu.default, y))

    x = torch.randn(1, 3, 8, 8, generator=GEN)
    result = fuse_patterns(graph(before, x, w=W, b=B, gamma=GAMMA, beta=BETA,
                                 mean=MEAN, var=VAR))
    w, b = fold_conv_bn_weights(W, B, MEAN, VAR, 1e-5, GAMMA, BETA)
    fused = ConvReLU(stride=2, padding=1)
    assert_same_graph(result.module, graph(_fused("x", "w", "b"),
                                           modules={"fused": fused}, w=w, b=b))
    # the settings are compared: the same graph with stride 1 is another graph
    assert not same_graph(result.module, graph(
        _fused("x", "w", "b"), modules={"fused": ConvReLU(padding=1)}, w=w, b=b))


def test_pattern_conv_add_relu_makes_the_residual_tail_one_module():
    def before(g, x):
        y = call(g, aten.add.Tensor, _conv(g, x, padding=1), g.get_attr("r"))
        g.output(call(g, aten.relu.default, y))

    x, r = torch.randn(1, 3, 8, 8, generator=GEN), torch.randn(1, 4, 8, 8, generator=GEN)
    result = fuse_patterns(graph(before, x, w=W, b=B, r=r))
    assert_same_graph(result.module, graph(
        _fused("x", "w", "b", "r"), modules={"fused": ConvAddReLU(padding=1)},
        w=W, b=B, r=r))


LW, LB = torch.randn(4, 8, generator=GEN), torch.randn(4, generator=GEN)


def test_pattern_linear_gelu_keeps_its_activation_kind():
    def before(g, x):
        y = call(g, aten.linear.default, x, g.get_attr("w"), g.get_attr("b"))
        g.output(call(g, aten.gelu.default, y))

    x = torch.randn(2, 8, generator=GEN)
    result = fuse_patterns(graph(before, x, w=LW, b=LB))
    gelu = LinearReLU(ACTIVATIONS["gelu"])
    assert_same_graph(result.module, graph(_fused("x", "w", "b"),
                                           modules={"fused": gelu}, w=LW, b=LB))
    # a ReLU where the model has a GELU is a different graph
    assert not same_graph(result.module, graph(
        _fused("x", "w", "b"), modules={"fused": LinearReLU(RELU)}, w=LW, b=LB))


def _matmul_add_relu(g, x):
    y = call(g, aten.add.Tensor, call(g, aten.matmul.default, x, g.get_attr("m")),
             g.get_attr("c"))
    return call(g, aten.relu.default, y)


def test_pattern_matmul_add_relu_on_a_constant_becomes_a_linear():
    m = torch.randn(8, 4, generator=GEN)
    x = torch.randn(2, 8, generator=GEN)
    gm = graph(lambda g, x: g.output(_matmul_add_relu(g, x)), x, m=m, c=LB).eval()
    gm.meta["training"] = False
    result = fuse_patterns(gm)
    # the constant is transposed once, into a linear's (out, in) weight
    assert_same_graph(result.module, graph(
        _fused("x", "wt", "c"), modules={"fused": LinearReLU(RELU)},
        wt=m.t().contiguous(), c=LB))


def test_pattern_matmul_add_relu_in_training_keeps_the_product():
    m = torch.randn(8, 4, generator=GEN)
    x = torch.randn(2, 8, generator=GEN)
    gm = graph(lambda g, x: g.output(_matmul_add_relu(g, x)), x, m=m, c=LB)
    gm.meta["training"] = True  # m is a weight the optimiser changes: not folded
    result = fuse_patterns(gm)
    assert_same_graph(result.module, graph(
        _fused("x", "m", "c"), modules={"fused": MatMulAddReLU()}, m=m, c=LB))


def test_pattern_layer_norm_add_keeps_its_shape_and_eps():
    def before(g, x):
        s = call(g, aten.add.Tensor, x, g.get_attr("r"))
        g.output(call(g, aten.layer_norm.default, s, [8], g.get_attr("lw"),
                      g.get_attr("lb"), 1e-6))

    x, r = torch.randn(4, 8, generator=GEN), torch.randn(4, 8, generator=GEN)
    lw, lb = torch.rand(8, generator=GEN) + 0.5, torch.randn(8, generator=GEN)
    result = fuse_patterns(graph(before, x, r=r, lw=lw, lb=lb))
    assert_same_graph(result.module, graph(
        _fused("x", "r", "lw", "lb"), modules={"fused": AddLayerNorm((8,), 1e-6)},
        r=r, lw=lw, lb=lb))
    assert not same_graph(result.module, graph(
        _fused("x", "r", "lw", "lb"), modules={"fused": AddLayerNorm((8,), 1e-5)},
        r=r, lw=lw, lb=lb))


# --- functionalize: an in-place op on a private value becomes its functional twin ----

def _recorded(gm, x):
    """`gm` with each node's value recorded as capture records it (`meta["val"]`,
    a fake tensor): functionalize reads dtypes from there."""
    FakeTensorProp(gm).propagate(x)
    return gm


def test_functionalize_makes_relu_on_a_private_value_functional():
    def before(g, x):
        g.output(call(g, aten.relu_.default, call(g, aten.mul.Tensor, x, 2.0)))

    def expected(g, x):
        g.output(call(g, aten.relu.default, call(g, aten.mul.Tensor, x, 2.0)))

    x = torch.randn(3, generator=GEN)
    result = functionalize(_recorded(graph(before), x))
    assert_same_graph(result.module, graph(expected))


def test_functionalize_keeps_a_write_to_the_input():
    def before(g, x):
        g.output(call(g, aten.relu_.default, x))  # the caller sees x change

    x = torch.randn(3, generator=GEN)
    assert_unchanged(functionalize, _recorded(graph(before), x))


def test_functionalize_says_when_a_dtype_was_not_recorded():
    def before(g, x):
        g.output(call(g, aten.relu_.default, call(g, aten.mul.Tensor, x, 2.0)))

    gm = graph(before, torch.randn(3, generator=GEN))  # shapes only, no meta["val"]
    result = functionalize(gm)
    assert_same_graph(result.module, gm)
    assert result.notes == ["functionalize: kept relu__default (mul_tensor's dtype "
                            "was not recorded (capture records it))"]


# --- fuse_attention: matmul, scale, softmax, matmul become one SDPA call -------------

def _attention(g, x, dim=-1):
    kt = call(g, aten.transpose.int, x, -2, -1)
    scores = call(g, aten.mul.Tensor, call(g, aten.matmul.default, x, kt), 0.25)
    probs = call(g, aten._softmax.default, scores, dim, False)
    return call(g, aten.matmul.default, probs, x)


def test_fuse_attention_makes_the_chain_one_sdpa_call():
    def expected(g, x):
        g.output(g.call_function(aten.scaled_dot_product_attention.default, (x, x, x),
                                 {"attn_mask": None, "dropout_p": 0.0,
                                  "is_causal": False, "scale": 0.25}))

    x = torch.randn(1, 2, 4, 8, generator=GEN)
    result = fuse_attention(graph(lambda g, x: g.output(_attention(g, x)), x))
    assert_same_graph(result.module, graph(expected))
    torch.testing.assert_close(result.module(x), torch.softmax(
        x @ x.transpose(-2, -1) * 0.25, -1) @ x)


def test_fuse_attention_leaves_a_softmax_over_another_dimension():
    x = torch.randn(1, 2, 4, 4, generator=GEN)
    assert_unchanged(fuse_attention,
                     graph(lambda g, x: g.output(_attention(g, x, dim=-2)), x))


# every attention variant: an additive mask, a causal mask, a dropout that is off,
# a scale by division, a key that is not a transpose

def _sdpa(g, q, k, v, mask=None, causal=False, scale=0.25):
    return g.call_function(aten.scaled_dot_product_attention.default, (q, k, v),
                           {"attn_mask": mask, "dropout_p": 0.0,
                            "is_causal": causal, "scale": scale})


def _attention_variant(g, x, mask=None, dropout=False, divide=False, kt=None):
    kt = call(g, aten.transpose.int, x, -2, -1) if kt is None else kt
    scores = call(g, aten.matmul.default, x, kt)
    scores = call(g, aten.div.Tensor, scores, 4.0) if divide else \
        call(g, aten.mul.Tensor, scores, 0.25)
    if mask is not None:
        scores = call(g, aten.add.Tensor, scores, mask)
    probs = call(g, aten._softmax.default, scores, -1, False)
    if dropout:
        probs = call(g, aten.dropout.default, probs, 0.1, False)
    return call(g, aten.matmul.default, probs, x)


XA = torch.randn(1, 2, 4, 8, generator=GEN)


def test_fuse_attention_passes_an_additive_mask():
    mask = torch.randn(4, 4, generator=GEN)
    result = fuse_attention(graph(lambda g, x: g.output(
        _attention_variant(g, x, mask=g.get_attr("mask"))), XA, mask=mask))
    assert_same_graph(result.module, graph(lambda g, x: g.output(
        _sdpa(g, x, x, x, mask=g.get_attr("mask"))), mask=mask))


def test_fuse_attention_makes_a_causal_mask_is_causal():
    causal = torch.full((4, 4), float("-inf")).triu(1)
    result = fuse_attention(graph(lambda g, x: g.output(
        _attention_variant(g, x, mask=g.get_attr("mask"))), XA, mask=causal))
    assert_same_graph(result.module, graph(
        lambda g, x: g.output(_sdpa(g, x, x, x, causal=True))))


def test_fuse_attention_drops_a_dropout_that_is_off():
    result = fuse_attention(graph(lambda g, x: g.output(
        _attention_variant(g, x, dropout=True)), XA))
    assert_same_graph(result.module, graph(lambda g, x: g.output(_sdpa(g, x, x, x))))


def test_fuse_attention_takes_a_division_as_its_scale():
    result = fuse_attention(graph(lambda g, x: g.output(
        _attention_variant(g, x, divide=True)), XA))
    assert_same_graph(result.module, graph(lambda g, x: g.output(_sdpa(g, x, x, x))))


def test_fuse_attention_transposes_a_key_given_as_it_is_multiplied():
    kb = torch.randn(1, 2, 8, 4, generator=GEN)  # q @ kb: kb is kᵀ, no transpose node
    result = fuse_attention(graph(lambda g, x: g.output(
        _attention_variant(g, x, kt=g.get_attr("kb"))), XA, kb=kb))
    assert_same_graph(result.module, graph(lambda g, x: g.output(_sdpa(
        g, x, call(g, aten.transpose.int, g.get_attr("kb"), -2, -1), x)), kb=kb))
    torch.testing.assert_close(result.module(XA), torch.softmax(
        XA @ kb * 0.25, -1) @ XA)


# --- fuse_qkv: linears that read one input become one wider linear, then slices ------

QKV = {f"w{k}": torch.randn(4, 8, generator=GEN) for k in "qkv"} | {
    f"b{k}": torch.randn(4, generator=GEN) for k in "qkv"}


def _linears(g, inputs):
    return tuple(call(g, aten.linear.default, x, g.get_attr(f"w{k}"), g.get_attr(f"b{k}"))
                 for k, x in zip("qkv", inputs))


def test_fuse_qkv_makes_three_linears_one_and_slices_it():
    def expected(g, x):
        wide = call(g, aten.linear.default, x, g.get_attr("w"), g.get_attr("b"))
        g.output(tuple(call(g, aten.slice.Tensor, wide, -1, 4 * i, 4 * i + 4)
                       for i in range(3)))

    x = torch.randn(2, 8, generator=GEN)
    result = fuse_qkv(graph(lambda g, x: g.output(_linears(g, [x] * 3)), x, **QKV))
    w = torch.cat([QKV["wq"], QKV["wk"], QKV["wv"]])
    b = torch.cat([QKV["bq"], QKV["bk"], QKV["bv"]])
    assert_same_graph(result.module, graph(expected, w=w, b=b))


def test_fuse_qkv_leaves_linears_that_read_different_inputs():
    def before(g, x):
        g.output(_linears(g, [x, call(g, aten.relu.default, x), x]))

    # q and v read x, k reads relu(x): q and v merge, k stays; with only one
    # linear per input nothing changes
    def lone(g, x):
        g.output(_linears(g, [x, call(g, aten.relu.default, x)])[:2])

    x = torch.randn(2, 8, generator=GEN)
    assert_unchanged(fuse_qkv, graph(lone, x, **QKV))
    gm = graph(before, x, **QKV)
    assert not same_graph(fuse_qkv(gm).module, gm)


# --- convert_layout: a region of three convolutions runs channels-last -------------

W2 = torch.randn(4, 4, 3, 3, generator=GEN)


def _three_convs(g, x):  # MIN_CONVS: fewer stay NCHW
    y = call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b"))
    for _ in range(2):
        y = call(g, aten.relu.default, y)
        y = call(g, aten.conv2d.default, y, g.get_attr("w2"), g.get_attr("b"))
    return y


def test_convert_layout_converts_a_region_once_in_and_once_out():
    def expected(g, x):
        y = _three_convs(g, g.call_module("to_channels_last", (x,)))
        g.output(g.call_module("to_nchw", (y,)))

    layouts = {"to_channels_last": ToLayout("channels_last"),
               "to_nchw": ToLayout("nchw")}
    x = torch.randn(1, 3, 8, 8, generator=GEN)
    result = convert_layout(graph(lambda g, x: g.output(_three_convs(g, x)), x,
                                  w=W, b=B, w2=W2))
    assert_same_graph(result.module, graph(expected, modules=layouts, w=W, b=B, w2=W2))
    copies = [result.module.get_submodule(str(n.target)).layout
              for n in result.module.graph.nodes if n.op == "call_module"]
    assert copies == ["channels_last", "nchw"]


def test_convert_layout_keeps_a_lone_convolution_in_nchw():
    def before(g, x):
        g.output(call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b")))

    def expected(g, x):
        y = call(g, aten.conv2d.default, x, g.get_attr("w"), g.get_attr("b"))
        g.output(g.call_module("to_nchw", (y,)))

    # no conversion in: only what the graph returns is made NCHW, as eager's is
    # (oneDNN may pick channels-last for a prepacked conv's output; a no-op if not)
    x = torch.randn(1, 3, 8, 8, generator=GEN)
    result = convert_layout(graph(before, x, w=W, b=B))
    assert_same_graph(result.module, graph(expected, modules={
        "to_nchw": ToLayout("nchw")}, w=W, b=B))
    assert result.module.to_nchw.layout == "nchw"
    assert result.notes == ["convert_layout: kept conv2d_default in NCHW (a region "
                            "of 1 conv; two conversions cost what it saves)"]


def test_the_graph_passes_load_no_backend():
    """Running every graph pass imports neither the backend nor a kernel library
    binding: the passes rewrite graphs (import-linter checks the imports; this
    checks what really loads)."""
    code = (
        "import sys, torch\n"
        "import graphopt\n"
        "from graphopt.stages import run_stages\n"
        "m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()\n"
        "run_stages(m, torch.randn(1, 3, 8, 8))\n"
        "print(sorted(n for n in sys.modules if n.startswith('graphopt.backend')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-2] == "[]", out.stdout
