"""eliminate_dead_code: dead chains go, impure nodes and used weights stay."""

import torch
from torch import fx, nn

import graphopt
from graph_match import assert_unchanged
from graphgen import state_hash
from graphopt import models
from graphopt.passes import eliminate_dead_code
from graphopt.verify import equivalent

aten = torch.ops.aten


def _gm(build, **buffers):
    root = nn.Module()
    for k, v in buffers.items():
        root.register_buffer(k, v)
    g = fx.Graph()
    build(g, g.placeholder("x"))
    return fx.GraphModule(root, g)


def _names(gm):
    return [n.name for n in gm.graph.nodes]


def test_dead_chain_is_removed_in_one_sweep():
    def build(g, x):
        y = g.call_function(aten.relu.default, (x,), name="y")
        d1 = g.call_function(aten.mul.Tensor, (y, 2.0), name="dead1")
        g.call_function(aten.add.Tensor, (d1, 1.0), name="dead2")
        g.output(y)

    gm = _gm(build)
    res = eliminate_dead_code(gm)
    assert res.removed == ["dead1", "dead2"]
    assert _names(res.module) == ["x", "y", "output"]  # expected graph
    assert _names(gm) == ["x", "y", "dead1", "dead2", "output"]  # caller's untouched
    assert equivalent(gm, res.module, (torch.randn(3),))


def test_random_and_mutating_nodes_are_never_removed():
    def build(g, x):
        g.call_function(aten.rand_like.default, (x,), name="noise")
        c = g.get_attr("c")
        g.call_function(aten.add_.Tensor, (c, 1.0), name="bump")
        g.output(x)

    assert_unchanged(eliminate_dead_code, _gm(build, c=torch.zeros(3)))


def test_exported_guard_and_placeholders_stay():
    model, x = models.example("add_mul")
    gm = graphopt.capture(model, *x)
    res = eliminate_dead_code(gm)
    assert "_guards_fn" in _names(res.module)
    assert [n.name for n in res.module.graph.find_nodes(op="placeholder")] == ["x", "y", "w"]


def test_unused_weights_are_deleted_but_used_ones_kept():
    model, x = models.example("basic_block")
    gm = graphopt.capture(model, *x)
    before = state_hash(gm)
    res = eliminate_dead_code(gm)
    # export keeps BN's num_batches_tracked as get_attr nodes nobody reads
    assert set(res.removed) == {"bn1_num_batches_tracked", "bn2_num_batches_tracked"}
    buffers = dict(res.module.named_buffers())
    assert "bn1.num_batches_tracked" not in buffers and "bn1.running_mean" in buffers
    assert state_hash(gm) == before
    assert equivalent(gm, res.module, x)


def test_module_level_graph_keeps_called_submodules():
    model, x = models.example("basic_block")
    gm = graphopt.capture(model, *x, level="module")
    res = assert_unchanged(eliminate_dead_code, gm)
    assert equivalent(gm, res.module, x)
