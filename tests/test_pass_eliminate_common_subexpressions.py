"""eliminate_common_subexpressions: merge equal computations, and only those."""

import torch
from torch import fx, nn

import graphopt
from graph_match import assert_unchanged
from graphgen import run_seeded
from graphopt.passes import eliminate_common_subexpressions as cse
from graphopt.verify import equivalent

aten = torch.ops.aten


def _gm(build):
    g = fx.Graph()
    xs = [g.placeholder("x"), g.placeholder("y")]
    g.output(build(g, *xs))
    return fx.GraphModule(nn.Module(), g)


def _calls(gm):
    return [n.name for n in gm.graph.nodes if n.op.startswith("call")]


def test_repeated_add_is_computed_once():
    def build(g, x, y):
        a = g.call_function(aten.add.Tensor, (x, y), name="a")
        b = g.call_function(aten.add.Tensor, (x, y), name="b")
        return g.call_function(aten.mul.Tensor, (a, b), name="c")

    gm = _gm(build)
    res = cse(gm)
    assert res.removed == ["b"] and res.rewritten == ["c"]
    assert _calls(res.module) == ["a", "c"]  # expected: c = a * a
    c = res.module.graph.find_nodes(op="call_function", target=aten.mul.Tensor)[0]
    assert [a.name for a in c.args] == ["a", "a"]
    assert equivalent(gm, res.module, (torch.randn(3), torch.randn(3)))


def test_different_inputs_or_arguments_are_not_merged():
    def build(g, x, y):
        outs = [g.call_function(aten.add.Tensor, (x, y)),
                g.call_function(aten.add.Tensor, (y, x)),        # operand order differs
                g.call_function(aten.add.Tensor, (x, 1)),
                g.call_function(aten.add.Tensor, (x, 1.0)),      # int vs float literal
                g.call_function(aten.add.Tensor, (x, True)),
                g.call_function(aten.mul.Tensor, (x, 0.0)),
                g.call_function(aten.mul.Tensor, (x, -0.0)),     # -0.0 is not 0.0
                g.call_function(aten.sum.dim_IntList, (x, [0])),
                g.call_function(aten.sum.dim_IntList, (x, [1])),
                g.call_function(aten.add.Tensor, (x, y), {"alpha": 2})]
        return tuple(outs)

    gm = _gm(build)
    assert_unchanged(cse, gm)


def test_random_ops_are_never_merged():
    def build(g, x, y):
        r1 = g.call_function(aten.rand_like.default, (x,))
        r2 = g.call_function(aten.rand_like.default, (x,))
        return g.call_function(aten.sub.Tensor, (r1, r2))

    gm = _gm(build)
    res = assert_unchanged(cse, gm)
    out = run_seeded(res.module, (torch.zeros(100), torch.zeros(1)))
    assert out.abs().sum() > 0  # two independent draws


def test_a_mutation_separates_equal_reads():
    def build(g, x, y):
        s1 = g.call_function(aten.sum.default, (x,))
        g.call_function(aten.add_.Tensor, (x, 1.0))  # x changes here
        s2 = g.call_function(aten.sum.default, (x,))
        return (s1, s2)

    gm = _gm(build)
    assert_unchanged(cse, gm)
    x = torch.zeros(4)
    s1, s2 = gm(x, x)
    assert float(s2) == float(s1) + 4


def test_module_level_duplicates_are_merged():
    class M(nn.Module):
        def forward(self, x):
            return torch.sigmoid(x) * torch.sigmoid(x) + x.relu() + x.relu()

    x = torch.randn(4)
    gm = graphopt.capture(M(), x, level="module")
    res = cse(gm)
    assert len(res.removed) == 2
    assert equivalent(gm, res.module, (x,))


def test_aten_capture_of_a_shared_subexpression():
    class M(nn.Module):
        def forward(self, x, y):
            return (x + y).relu() * (x + y).sigmoid()

    x, y = torch.randn(4), torch.randn(4)
    gm = graphopt.capture(M(), x, y)
    res = cse(gm)
    assert res.removed == ["add_1"]
    assert graphopt.run(res.module, x, y).kernels == graphopt.run(gm, x, y).kernels - 1
