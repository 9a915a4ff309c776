"""fold_constants: before/expected graphs, must-not-change cases, const_fold reference."""

import pytest
import torch
from torch import fx, nn

import graphopt
from graph_match import assert_unchanged
from graphgen import state_hash
from graphopt import models
from graphopt.passes import fold_constants
from graphopt.verify import equivalent, random_like

aten = torch.ops.aten


def _calls(gm):
    return [n.name for n in gm.graph.nodes if n.op.startswith("call")]


def _ops(gm):
    return [graphopt.ops.op_name(n) for n in gm.graph.nodes if n.op.startswith("call")]


def test_seed_example_folds_a_times_b():
    model, x = models.example("tensor_constants")
    gm = graphopt.capture(model, *x)
    before = state_hash(gm)
    res = fold_constants(gm)
    # expected: add(_folded_mul, x); the mul and the buffers a, b it read are gone
    assert _calls(res.module) == ["_guards_fn", "add"]
    assert res.added == ["_folded_mul"] and res.rewritten == ["add"]
    assert set(res.removed) == {"mul", "a", "b"}
    assert float(res.module._folded_mul) == pytest.approx(3.14 * 2.0)
    assert not hasattr(res.module, "a")
    assert equivalent(gm, res.module, random_like(x))
    assert state_hash(gm) == before and _calls(gm) == ["_guards_fn", "mul", "add"]
    assert graphopt.shape(res.module.graph.find_nodes(op="get_attr")[0]) == ()


class MaskAndTable(nn.Module):
    """A causal mask built from ones/triu and a positional table scaled by a buffer."""

    def __init__(self, t=8, d=16):
        super().__init__()
        self.t = t
        self.register_buffer("table", torch.randn(t, d))
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x):
        mask = torch.triu(torch.ones(self.t, self.t), diagonal=1).bool()
        scores = (x @ x.transpose(-1, -2)).masked_fill(mask, float("-inf"))
        return scores.softmax(-1) @ (x + self.table * self.scale)


def test_mask_and_positional_table_are_folded():
    model, x = MaskAndTable().eval(), torch.randn(2, 8, 16)
    gm = graphopt.capture(model, x)
    res = fold_constants(gm)
    ops = [graphopt.ops.op_name(n) for n in res.module.graph.nodes if n.op.startswith("call")]
    assert not {"ones", "triu", "mul"} & set(ops), ops
    assert "_folded_mul" in res.added  # table * scale
    assert {"ones", "triu", "table", "scale"} <= set(res.removed)
    assert equivalent(gm, res.module, random_like((x,)), raise_on_mismatch=True)


def test_symbolic_trace_already_folds_what_it_can_compute():
    # fx's tracer runs code that touches no input eagerly: the mask and the table
    # arrive as ready-made tensor constants, and the pass finds nothing left to do.
    gm = graphopt.capture(MaskAndTable().eval(), torch.randn(2, 8, 16), level="module")
    assert_unchanged(fold_constants, gm)
    assert len(gm.graph.find_nodes(op="get_attr")) == 2


@pytest.mark.filterwarnings("ignore:Attempted to insert a get_attr")
def test_matches_torch_const_fold_reference():
    from torch.fx.experimental.const_fold import split_const_subgraphs

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))
            self.b = nn.Parameter(torch.randn(4))

        def forward(self, x):
            return (x @ (self.w * 2 + self.b).t()).relu() + self.b.sum()

    model, x = M().eval(), torch.randn(3, 4)
    ref = split_const_subgraphs(model)
    ref.run_folding()
    ours = fold_constants(graphopt.capture(model, x, level="module")).module
    assert _ops(ours) == ["matmul", "relu", "add"]
    # const_fold returns its folded tensors as one tuple and unpacks it with getitem
    assert [n for n in _ops(ref) if n != "getitem"] == _ops(ours)
    assert equivalent(ref, ours, (x,), raise_on_mismatch=True)


def test_large_creation_op_is_not_folded():
    class M(nn.Module):
        def forward(self, x):
            return x + torch.ones(64, 64)  # 16 KiB made from nothing: keep the fill

    x = torch.randn(64, 64)
    gm = graphopt.capture(M(), x)
    assert_unchanged(fold_constants, gm)


def test_expand_of_a_buffer_is_not_folded_but_small_creation_is():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.randn(64))

        def forward(self, x):
            return x + self.b.expand(64, 64) + torch.ones(4, 1).sum()

    x = torch.randn(64, 64)
    gm = graphopt.capture(M(), x)
    res = fold_constants(gm)
    names = [graphopt.ops.op_name(n) for n in res.module.graph.nodes]
    assert "expand" in names and "ones" not in names and "sum" not in names
    assert equivalent(gm, res.module, (x,))


def test_random_ops_are_never_folded():
    class M(nn.Module):
        def forward(self, x):
            return x + torch.rand(4) * 2

    gm = graphopt.capture(M(), torch.randn(4))
    assert_unchanged(fold_constants, gm)


def _graph_with_mutation():
    root = nn.Module()
    root.register_buffer("c", torch.ones(3))
    g = fx.Graph()
    x = g.placeholder("x")
    c = g.get_attr("c")
    bumped = g.call_function(aten.add_.Tensor, (c, 1.0))  # mutates the buffer
    g.output(g.call_function(aten.add.Tensor, (x, bumped)))
    return fx.GraphModule(root, g)


def test_impure_ops_are_never_folded():
    gm = _graph_with_mutation()
    res = assert_unchanged(fold_constants, gm)
    assert "add_" in _ops(res.module)


def test_training_mode_batch_norm_is_not_folded():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)
            self.register_buffer("k", torch.randn(4, 3))

        def forward(self, x):
            return x + self.bn(self.k)

    gm = graphopt.capture(M().train(), torch.randn(4, 3), level="module")
    assert_unchanged(fold_constants, gm)


def test_inplace_rewrites_the_given_module_and_is_idempotent():
    model, x = models.example("tensor_constants")
    gm = graphopt.capture(model, *x)
    res = fold_constants(gm, inplace=True)
    assert res.module is gm and "mul" not in _calls(gm)
    assert_unchanged(fold_constants, gm)


# ------------------------------------------------ mutation and training mode (issue 11)

class Accumulate(nn.Module):
    """The issue's scenario: a constant zeros, written in place by `+=`."""

    def forward(self, x):
        acc = torch.zeros(4)
        acc += x
        return acc * 2


def test_a_constant_written_in_place_gives_the_eager_answer_every_call():
    model, x = Accumulate(), torch.ones(4)
    res = graphopt.optimize(model, x)  # its measuring runs are not calls
    outs = [res(x) for _ in range(3)]
    assert all(torch.equal(o, torch.full((4,), 2.0)) for o in outs)  # not 2, 4, 6


def test_not_mutated_refuses_a_written_constant_in_a_hand_built_graph():
    g = fx.Graph()
    x = g.placeholder("x")
    acc = g.call_function(aten.zeros.default, ([4],))
    view = g.call_function(aten.view.default, (acc, [2, 2]))
    g.call_function(aten.add_.Tensor, (view, 1.0))  # writes acc through its view
    g.output(g.call_function(aten.mul.Tensor, (acc, x)))
    gm = fx.GraphModule(nn.Module(), g)
    res = fold_constants(gm)
    assert "zeros" in _ops(res.module) and not res.added
    assert any("written in place" in n for n in res.notes)
    assert [torch.equal(res.module(torch.ones(4)), torch.ones(4)) for _ in range(2)] \
        == [True, True]


class Embeddings(nn.Module):
    """BERT's pattern: position embeddings that read only a parameter and a buffer."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(8, 4)
        self.register_buffer("ids", torch.arange(8))
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x + self.pos(self.ids) * self.scale + torch.ones(4).sum()


@pytest.mark.parametrize("level", ["aten", "module"])
def test_training_mode_keeps_every_parameter_and_says_why(level):
    model, x = Embeddings().train(), torch.randn(8, 4)
    gm = graphopt.capture(model, x, level=level)
    res = fold_constants(gm)
    names = dict(res.module.named_parameters())
    assert len(names) == 2 and {"scale"} <= set(names)
    assert res.notes and all("training mode" in n for n in res.notes)
    assert "sum" not in _ops(res.module)  # what reads no parameter still folds
    assert equivalent(model, res.module, (x,))


@pytest.mark.parametrize("level", ["aten", "module"])
def test_eval_mode_folds_the_same_model(level):
    model, x = Embeddings().eval(), torch.randn(8, 4)
    res = fold_constants(graphopt.capture(model, x, level=level))
    assert len(list(res.module.parameters())) == 0 and not res.notes
    assert equivalent(model, res.module, (x,))


def test_both_levels_refuse_a_training_module_alike():
    model, x = nn.Sequential(nn.BatchNorm1d(3)).train(), torch.randn(4, 3)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = model[0]
            self.register_buffer("k", torch.randn(4, 3))

        def forward(self, x):
            return x + self.bn(self.k)

    for level in ("aten", "module"):
        res = fold_constants(graphopt.capture(M().train(), x, level=level))
        assert not res.added, level
        assert res.notes and "training" in res.notes[0], level


def test_folded_constant_carries_val_and_tensor_meta():
    model, x = models.example("tensor_constants")
    res = fold_constants(graphopt.capture(model, *x))
    node = res.module.graph.find_nodes(op="get_attr")[0]
    assert {"val", "tensor_meta"} <= set(node.meta)
    assert node.meta["val"].shape == node.meta["tensor_meta"].shape == torch.Size([])


def test_hand_built_graph_is_training_only_when_an_op_says_so():
    from graphopt.passes.legality import is_training

    def graph(training):
        root = nn.Module()
        root.register_buffer("m", torch.zeros(3))
        g = fx.Graph()
        x, m = g.placeholder("x"), g.get_attr("m")
        g.output(g.call_function(aten.batch_norm.default,
                                 (x, None, None, m, m, training, 0.1, 1e-5, False)))
        return fx.GraphModule(root, g)

    assert is_training(graph(True)) and not is_training(graph(False))


def test_a_constant_output_is_not_a_shared_buffer():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.ones(3))

        def forward(self, x):
            return x + 1, self.w * 2

    gm = graphopt.capture(M().eval(), torch.zeros(3))
    res = fold_constants(gm)
    first = res.module(torch.zeros(3))[1]
    first += 100  # the caller writes the result it got
    assert torch.equal(res.module(torch.zeros(3))[1], torch.full((3,), 2.0))
    assert any("returned as an output" in n for n in res.notes)
