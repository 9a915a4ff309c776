"""functionalize and the aliasing rules behind legality.not_mutated (chapter 3)."""

import operator

import torch
from torch import fx, nn

import graphopt
from graphopt.aliasing import alias_root, written_by, written_values
from graphopt.passes.functionalize import functionalize
from graphopt.passes.legality import not_mutated
from graphopt.verify import equivalent, random_like

aten = torch.ops.aten


def _ops(gm):
    return [graphopt.ops.op_name(n) for n in gm.graph.nodes if n.op == "call_function"]


class ResidualInPlace(nn.Module):
    """torchvision's idioms: nn.ReLU(inplace=True) and `out += identity`."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.conv(x))
        out += x
        return self.relu(out)


def test_intermediate_in_place_ops_become_functional():
    model, x = ResidualInPlace().eval(), torch.randn(1, 4, 6, 6)
    gm = torch.export.export(model, (x,), strict=False).module()
    assert {"relu_", "add_"} <= set(_ops(gm))
    res = functionalize(gm)
    assert not {"relu_", "add_"} & set(_ops(res.module)) and res.notes == []
    assert equivalent(model, res.module, random_like((x,)))
    assert "relu_" in _ops(gm)  # the caller's graph is untouched


def test_the_core_rewrite_is_the_pass_on_the_graph_it_is_given():
    """`functionalization.functionalize_graph` (what capture applies) rewrites the
    graph in place; the pass is the same rewrite on a copy (issue #22's split)."""
    from graphopt.functionalization import functionalize_graph
    model, x = ResidualInPlace().eval(), torch.randn(1, 4, 6, 6)
    gm = torch.export.export(model, (x,), strict=False).module()
    by_pass = functionalize(gm)
    removed, added, notes = functionalize_graph(gm.graph)
    gm.recompile()
    assert [n.name for n in removed] == by_pass.removed and notes == by_pass.notes
    assert [n.name for n in added] == by_pass.added
    assert _ops(gm) == _ops(by_pass.module) and not {"relu_", "add_"} & set(_ops(gm))
    assert equivalent(model, gm, random_like((x,)))


def test_capture_gives_functional_graphs():
    gm = graphopt.capture(ResidualInPlace().eval(), torch.randn(1, 4, 6, 6))
    assert not any(o.endswith("_") and not o.startswith("_") for o in _ops(gm))


def test_writes_to_inputs_and_buffers_stay_with_a_note():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x):
            self.count.add_(1)
            x.mul_(2)
            return x + self.count

    gm = torch.export.export(M(), (torch.ones(3),), strict=False).module()
    res = functionalize(gm)
    assert _ops(res.module).count("add_") == 1 and "mul_" in _ops(res.module)
    assert any("weight or buffer" in n for n in res.notes)
    assert any("an input" in n for n in res.notes)


def _view_graph():
    """y = x * 2; v = y.view(-1); y.relu_(); return v  (v must see the relu)."""
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(aten.mul.Tensor, (x, 2))
    v = g.call_function(aten.view.default, (y, [-1]))
    g.call_function(aten.relu_.default, (y,))
    g.output(v)
    gm = fx.GraphModule(nn.Module(), g)
    gm.graph.find_nodes(op="placeholder")[0].meta["val"] = torch.randn(2, 3)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.meta["val"] = torch.randn(2, 3)
    return gm


def test_a_write_seen_through_a_view_is_refused():
    gm = _view_graph()
    res = functionalize(gm)
    assert "relu_" in _ops(res.module)
    assert res.notes and "shares" in res.notes[0]
    x = torch.randn(2, 3)
    assert torch.equal(res.module(x.clone()), (x * 2).relu().view(-1))


def test_dtype_changing_write_is_refused():
    class M(nn.Module):
        def forward(self, x):
            acc = torch.zeros(3)
            acc += x  # float32 += float64 stays float32; add would give float64
            return acc

    x = torch.full((3,), 2.5, dtype=torch.float64)
    gm = torch.export.export(M(), (x,), strict=False).module()
    res = functionalize(gm)
    assert "add_" in _ops(res.module) and "dtype" in res.notes[0]


def test_aliasing_facts_come_from_the_schema():
    g = fx.Graph()
    x = g.placeholder("x")
    w = g.get_attr("w")
    t = g.call_function(aten.t.default, (w,))
    g.call_function(aten.add_.Tensor, (t, x))  # writes w through its transpose
    bn = g.call_function(aten.batch_norm.default,
                         (x, None, None, w, w, True, 0.1, 1e-5, False))
    split = g.call_function(aten.split.Tensor, (x, 1))
    part = g.call_function(operator.getitem, (split, 0))
    g.output(bn)
    assert alias_root(t) is w and alias_root(part) is x
    assert written_by(bn) == [w, w]  # training BN writes its running statistics
    written = written_values(g)
    assert not not_mutated(w, written) and not not_mutated(t, written)
    assert not_mutated(x, written)


def test_in_place_dropout_becomes_functional_and_draws_the_same_mask():
    model = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5, inplace=True)).train()
    x = torch.randn(4, 6)
    gm = graphopt.capture(model, x)
    assert "dropout_" not in _ops(gm) and "dropout" in _ops(gm)
    torch.manual_seed(0)
    want = model(x)
    torch.manual_seed(0)
    assert torch.equal(gm(x), want)
