"""fuse_elementwise: groups, their graphs, legality (multi-consumer, cycles), counts."""

import operator

import pytest
import torch
from torch import fx, nn

import graphopt
from graph_match import assert_unchanged
from graphgen import state_hash
from graphopt import OpKind
from graphopt.codegen import GeneratedKernel, kernels_for, lower
from graphopt.passes import FusedElementwise, fuse_elementwise
from graphopt.passes.legality import creates_cycle
from graphopt.passes.result import topo_index
from graphopt.policy import Policy
from graphopt.verify import equivalent, random_like

aten = torch.ops.aten


# Kernel counts below are those of the generated kernels: "auto" pinned to them,
# transposed inputs included (the default policy's rules are tested in
# test_default_policy_keeps_broadcasts_in_the_kernel_not_transposed_views).
ALWAYS = Policy(strided_kernels=True, short_group_numel=0, operand_group_numel=0,
                scalar_math_numel=1 << 62)


def _lowered(gm, policy=ALWAYS):
    """fuse_elementwise, then the `lower` stage: every group one generated kernel."""
    return lower(fuse_elementwise(gm).module, policy=policy)


def _groups(gm):
    return {n.name: gm.get_submodule(n.target) for n in gm.graph.nodes
            if n.op == "call_module" and isinstance(gm.get_submodule(n.target),
                                                      FusedElementwise)}


class Chain(nn.Module):
    def forward(self, x, b):
        return torch.relu(x * 2.0 + b).sum()  # b broadcasts, 2.0 is a scalar


@pytest.mark.parametrize("level", ["aten", "module"])
def test_chain_with_scalar_and_broadcast_becomes_one_kernel(level):
    x = (torch.randn(4, 8), torch.randn(8))
    gm = graphopt.capture(Chain(), *x, level=level)
    res = fuse_elementwise(gm)
    (name, group), = _groups(res.module).items()
    assert name == "fused_relu" and group.ops == ["mul", "add", "relu"]
    assert [p.name for p in group.gm.graph.find_nodes(op="placeholder")] == ["x", "b"]
    assert type(group) is FusedElementwise  # the graph pass: run by reference
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)
    before, fused = graphopt.run(gm, *x), graphopt.run(res.module, *x)
    assert (len(before.nodes), before.kernels) == (4, 4)
    assert (len(fused.nodes), fused.kernels) == (2, 4)  # every member still counted
    low = lower(res.module, policy=ALWAYS)
    (name, kernel), = _groups(low.module).items()
    assert name == "fused_relu" and type(kernel) is GeneratedKernel
    assert kernel.ops == group.ops and low.rewritten == ["fused_relu"]
    assert equivalent(gm, low.module, random_like(x), raise_on_mismatch=True)
    after = graphopt.run(low.module, *x)
    assert (len(after.nodes), after.kernels) == (2, 2)  # one kernel; sum
    assert after.bytes_moved < before.bytes_moved


class TransposedChain(nn.Module):
    def forward(self, x, b):
        return torch.relu(x.t() * 2.0 + b).sum()  # x.t(): a run-time stride


def test_default_policy_keeps_broadcasts_in_the_kernel_not_transposed_views():
    """The fixed policy (issue #21): a broadcast bias keeps the generated kernel
    (its step along a row, 0 or 1, is written into the source, so the loop
    vectorises); an input read with a run-time stride (a transposed view) runs the
    group's eager ops, silently, and the pass's note says why. The choice reads
    shapes and strides only."""
    import warnings

    from graphopt.policy import DEFAULT
    x = (torch.randn(4, 8), torch.randn(8))
    res = _lowered(graphopt.capture(Chain(), *x), policy="fixed")
    (group,) = _groups(res.module).values()
    assert type(group) is GeneratedKernel and group.policy == DEFAULT
    assert any("policy fixed" in n and "transposed" in n for n in res.notes)
    assert not any("runs its eager ops" in n for n in res.notes)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error")  # no KernelFallbackWarning
        assert graphopt.run(res.module, *x).kernels == 2  # the group's kernel; sum
        assert kernels_for(group, x) == 1
        assert "graphopt_kernels" not in vars(group)  # no flag: the plan says
    torch.testing.assert_close(res.module(*x), Chain()(*x))

    xt = (torch.randn(8, 4), torch.randn(8))
    captured = graphopt.capture(TransposedChain(), *xt)
    assert not fuse_elementwise(captured).notes  # the graph pass decides no kernel
    res = _lowered(captured, policy="fixed")
    (group,) = _groups(res.module).values()
    assert any(n.startswith("lower: fused_relu runs its eager ops") and
               "transposed view" in n for n in res.notes), res.notes
    seen = []  # the group's own inputs (x.t(), b), as the interpreter passes them
    group.register_forward_pre_hook(lambda m, args: seen.append(args))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error")
        graphopt.run(res.module, *xt)
        assert kernels_for(group, seen[0]) is None  # eager ops: counted as such
    torch.testing.assert_close(res.module(*xt), TransposedChain()(*xt))


def test_group_graph_holds_only_elementwise_ops_and_tensor_inputs():
    x = (torch.randn(4, 8), torch.randn(8))
    res = fuse_elementwise(graphopt.capture(Chain(), *x))
    group = next(iter(_groups(res.module).values()))
    for n in group.gm.graph.nodes:
        assert n.op in ("placeholder", "call_function", "output")
        if n.op == "call_function":
            assert isinstance(n.target, torch._ops.OpOverload)
            assert torch.Tag.pointwise in n.target.tags
            assert all(isinstance(a, (fx.Node, float, int)) for a in n.args)
    assert FusedElementwise.graphopt_kind is OpKind.ELEMENTWISE
    # by reference: no declared count, the interpreter counts every member's kernel
    assert not hasattr(group, "graphopt_kernels")
    assert "reference executor" in FusedElementwise.__doc__
    (kernel,) = _groups(lower(res.module, policy=ALWAYS).module).values()
    assert kernel.graphopt_kind is OpKind.ELEMENTWISE
    x = (torch.randn(4, 8), torch.randn(8))
    with torch.no_grad():  # before any call: the plan a call would make
        assert kernels_for(kernel, x) == 1


def _gm(build, n_inputs=1):
    g = fx.Graph()
    xs = [g.placeholder(f"x{i}") for i in range(n_inputs)]
    g.output(build(g, *xs))
    gm = fx.GraphModule(nn.Module(), g)
    return graphopt.annotate(gm, *[torch.randn(3, 4) for _ in xs])


def test_value_read_outside_the_group_ends_the_group():
    def build(g, x):
        y = g.call_function(aten.mul.Tensor, (x, 2.0), name="y")
        a = g.call_function(aten.relu.default, (y,), name="a")
        b = g.call_function(aten.neg.default, (a,), name="b")
        s = g.call_function(aten.sum.default, (y,), name="s")  # y's second reader
        return (b, s)

    res = fuse_elementwise(_gm(build))
    groups = _groups(res.module)
    assert [g.ops for g in groups.values()] == [["relu", "neg"]]
    assert "y" in [n.name for n in res.module.graph.nodes]  # stays its own node


def test_tree_and_diamond_in_one_group():
    def build(g, x):
        y = g.call_function(aten.mul.Tensor, (x, 2.0), name="y")
        a = g.call_function(aten.relu.default, (y,), name="a")
        b = g.call_function(aten.sigmoid.default, (y,), name="b")
        return g.call_function(aten.add.Tensor, (a, b), name="out")

    gm = _gm(build)
    res = fuse_elementwise(gm)
    assert [g.ops for g in _groups(res.module).values()] == \
        [["mul", "relu", "sigmoid", "add"]]
    assert equivalent(gm, res.module, (torch.randn(3, 4),))


@pytest.mark.parametrize("dim", [0, 1])
def test_cycle_check_on_a_candidate_group(dim):
    def build(g, x):
        a = g.call_function(aten.relu.default, (x,), name="a")
        m = g.call_function(aten.sum.dim_IntList, (a, [dim], True), name="m")
        c = g.call_function(aten.add.Tensor, (a, a), name="c")
        return g.call_function(aten.mul.Tensor, (c, m), name="d")

    gm = _gm(build)
    nodes = {n.name: n for n in gm.graph.nodes}
    index = topo_index(gm)
    # {a, d}: a -> sum -> d leaves the group and comes back
    assert creates_cycle({nodes["a"], nodes["d"]}, index)
    assert not creates_cycle({nodes["a"], nodes["c"]}, index)
    res = fuse_elementwise(gm)
    groups = [g.ops for g in _groups(res.module).values()]
    if dim == 0:  # not a row reduction: a has a reader outside (sum), stays alone
        assert groups == [["add", "mul"]]
    else:  # a sum over the last dim joins: the whole graph is one row kernel
        assert groups == [["relu", "sum", "add", "mul"]]
    assert equivalent(gm, res.module, (torch.randn(3, 4),))


def test_random_ops_singletons_and_non_elementwise_stop_fusion():
    def build(g, x):
        r = g.call_function(aten.rand_like.default, (x,))
        y = g.call_function(aten.mul.Tensor, (r, 2.0))
        s = g.call_function(aten.sum.dim_IntList, (y, [dim], True))
        return g.call_function(aten.relu.default, (s,))

    dim = 0  # a sum over a leading dim is no row reduction: nothing fuses
    assert_unchanged(fuse_elementwise, _gm(build))
    dim = 1  # over the last dim it is: mul, sum, relu fuse; rand_like never does
    res = fuse_elementwise(_gm(build))
    assert [g.ops for g in _groups(res.module).values()] == [["mul", "sum", "relu"]]


def test_caller_graph_and_weights_untouched_and_names_stable():
    x = (torch.randn(4, 8), torch.randn(8))
    gm = graphopt.capture(Chain(), *x)
    code, state = gm.code, state_hash(gm)
    first = fuse_elementwise(gm).module
    second = fuse_elementwise(gm).module
    assert gm.code == code and state_hash(gm) == state
    assert first.code == second.code


def test_group_ops_are_in_graph_order_and_readable():
    class M(nn.Module):
        def forward(self, x):
            return (x.abs() - 1).neg() * x

    x = torch.randn(5)
    res = fuse_elementwise(graphopt.capture(M(), x, level="module"))
    group = next(iter(_groups(res.module).values()))
    assert group.ops == ["abs", "sub", "neg", "mul"]
    assert "abs -> sub -> neg -> mul" in repr(group)
    assert any(n.target is operator.sub for n in group.gm.graph.nodes)


class GateScale(nn.Module):
    """A squeeze-and-excitation gate's tail: hardsigmoid on [1, C, 1, 1], then it
    scales the [1, C, H, W] map, then a residual-style add and relu at full size."""

    def forward(self, x, gate, y):
        return torch.relu(nn.functional.hardsigmoid(gate) * x + y)


def test_a_small_broadcast_producer_stays_out_of_the_group():
    """Profitability: fusing hardsigmoid(gate) would save C values and recompute it
    for every output element; it stays a node, its output an input of the group."""
    x = (torch.randn(1, 8, 5, 5), torch.randn(1, 8, 1, 1), torch.randn(1, 8, 5, 5))
    gm = graphopt.capture(GateScale(), *x)
    res = fuse_elementwise(gm)
    (group,) = _groups(res.module).values()
    assert group.ops == ["mul", "add", "relu"]
    assert "hardsigmoid" in [graphopt.ops.op_name(n) for n in res.module.graph.nodes]
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)
    alone = graphopt.capture(lambda g, t: nn.functional.hardsigmoid(g) * t, x[1], x[0])
    assert not _groups(fuse_elementwise(alone).module)  # mul alone: nothing to fuse


def test_per_row_values_stay_in_a_row_group():
    """In a row-reduction group the small per-row values (mean + eps, rsqrt) are what
    the kernel is for: RMSNorm is still one group."""
    class RMS(nn.Module):
        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    x = (torch.randn(4, 16),)
    res = fuse_elementwise(graphopt.capture(RMS(), *x))
    (group,) = _groups(res.module).values()
    assert {"rsqrt", "mean", "pow", "mul"} <= set(group.ops)


class ReadThenWritten(nn.Module):
    """sigmoid reads x; then x is written in place; then the sum reads sigmoid."""

    def forward(self, x, p):
        s = torch.sigmoid(x)
        x.zero_()
        return s + p


def test_a_member_is_not_moved_past_a_write_of_its_input():
    # found by test_pass_properties' generated models: sigmoid joined add's group,
    # and the group ran at add, after x.zero_() had written sigmoid's input
    x, p = torch.randn(4, 6), torch.randn(6)
    gm = graphopt.capture(ReadThenWritten(), x.clone(), p)
    res = fuse_elementwise(gm)
    want = ReadThenWritten()(x.clone(), p)
    torch.testing.assert_close(res.module(x.clone(), p), want)
    assert not res.added
    assert any("apart" in n and "zero_" in n for n in res.notes), res.notes
