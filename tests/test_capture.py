"""capture() at both levels, annotate(), and autograd_graph() (chapter 1)."""

import copy
import math

import pytest
import torch
from torch import nn
from torch.fx import GraphModule

import graphopt
from graphopt import models
from graphopt.capture import AutogradGraph, annotate, autograd_graph, capture
from graphopt.ops import op_name

LEVELS = ("aten", "module")


def _ops(gm):
    return [n for n in gm.graph.nodes
            if n.op not in ("placeholder", "get_attr", "output")
            and not str(n.target).startswith("_guards")]


def _itemsize(dt):
    return torch.empty((), dtype=dt).element_size()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", ["seed_conv_block", "mlp", "basic_block"])
def test_every_node_has_shape_dtype_and_bytes(name, level):
    model, inputs = models.example(name)
    gm = capture(model, *inputs, level=level)
    assert isinstance(gm, GraphModule)
    for n in gm.graph.nodes:
        if n.op == "call_module" and str(n.target).startswith("_guards"):
            continue  # export's shape guard returns nothing
        if n.op == "output":  # at aten level a tuple: its bytes are its members'
            assert graphopt.nbytes(n) == sum(map(graphopt.nbytes, n.all_input_nodes))
            continue
        s, dt = graphopt.shape(n), graphopt.dtype(n)
        assert s is not None and dt is not None, n.name
        assert graphopt.nbytes(n) == math.prod(s) * _itemsize(dt), n.name


@pytest.mark.parametrize("level", LEVELS)
def test_recorded_shapes_match_eager_values(level):
    model, (x,) = models.example("seed_conv_block")
    gm = capture(model, x, level=level)
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert [graphopt.shape(n) for n in ph] == [tuple(x.shape)]
    out = next(n for n in gm.graph.nodes if n.op == "output")
    (result,) = out.all_input_nodes
    assert graphopt.shape(result) == tuple(model(x).shape)
    assert graphopt.dtype(result) == torch.float32


def test_levels_name_the_ops_differently():
    model, (x,) = models.example("seed_conv_block")
    aten = [op_name(n) for n in _ops(capture(model, x, level="aten"))]
    module = [op_name(n) for n in _ops(capture(model, x, level="module"))]
    assert aten == ["conv2d", "relu", "batch_norm", "add"]
    assert module == ["Conv2d", "relu", "BatchNorm2d", "add"]


def test_aten_level_lifts_weights_as_get_attr():
    model, (x,) = models.example("seed_conv_block")
    gm = capture(model, x)
    attrs = {str(n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    assert {"conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
            "bn.running_var"} <= attrs
    assert "exported_program" in gm.meta


@pytest.mark.parametrize("level", LEVELS)
def test_captured_graph_computes_what_the_model_does(level):
    model, (x,) = models.example("basic_block")
    gm = capture(model, x, level=level)
    got = gm(x)
    got = got[0] if isinstance(got, (tuple, list)) else got
    torch.testing.assert_close(got, model(x))


@pytest.mark.parametrize("level", LEVELS)
def test_capture_leaves_the_callers_model_alone(level):
    model, (x,) = models.example("seed_conv_block")
    model.train()  # BN in training mode would update its running statistics
    before = copy.deepcopy(model.state_dict())
    capture(model, x, level=level)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert model.training


def test_capture_a_plain_function():
    x, y, w = (torch.randn(3, 3) for _ in range(3))
    gm = capture(lambda a, b, c: (a + b) * c, x, y, w)
    assert [op_name(n) for n in _ops(gm)] == ["add", "mul"]
    torch.testing.assert_close(gm(x, y, w), (x + y) * w)


def test_float64_model_records_float64():
    model = models.MLP((4, 3)).double()
    gm = capture(model, torch.randn(2, 4, dtype=torch.float64))
    assert all(graphopt.dtype(n) == torch.float64 for n in _ops(gm))
    assert all(graphopt.nbytes(n) == 2 * 3 * 8 for n in _ops(gm))


def test_unknown_level_is_a_value_error():
    with pytest.raises(ValueError, match="level"):
        capture(models.MLP(), torch.randn(2, 16), level="bytecode")


def test_annotate_rerecords_shapes_for_new_inputs():
    model = models.MLP((4, 3))
    gm = capture(model, torch.randn(2, 4), level="module")
    assert annotate(gm, torch.randn(7, 4)) is gm
    out = next(n for n in gm.graph.nodes if n.op == "output").all_input_nodes[0]
    assert graphopt.shape(out) == (7, 3)


# ---------------------------------------------------------------- autograd graphs

def _linear_regression_loss():
    x = torch.randn(10, 5)
    target = torch.randn(10, 1)
    w = torch.randn(5, 1, requires_grad=True)
    b = torch.randn(1, requires_grad=True)
    loss = ((x @ w + b) - target).pow(2).mean()
    return loss, w, b


def test_autograd_graph_of_linear_regression():
    loss, w, b = _linear_regression_loss()
    g = autograd_graph(loss, names={"w": w, "b": b})
    assert isinstance(g, AutogradGraph)
    labels = [n.label for n in g.nodes]
    assert labels == ["output", "MeanBackward0", "PowBackward0", "SubBackward0",
                      "AddBackward0", "MmBackward0", "b", "w"]
    roles = {n.label: n.role for n in g.nodes}
    assert roles["output"] == "root" and roles["w"] == roles["b"] == "leaf"
    assert {n.label: n.shape for n in g.nodes if n.role == "leaf"} == {"w": (5, 1),
                                                                     "b": (1,)}
    ids = {n.id: n.label for n in g.nodes}
    edges = {(ids[a], ids[b]) for a, b in g.edges}
    assert ("w", "MmBackward0") in edges and ("b", "AddBackward0") in edges
    assert ("MeanBackward0", "output") in edges
    assert repr(g) == "AutogradGraph(8 nodes, 7 edges)"


def test_autograd_graph_is_deterministic_and_unnamed_leaves_say_leaf():
    loss, w, b = _linear_regression_loss()
    g1, g2 = autograd_graph(loss), autograd_graph(loss)
    assert g1 == g2
    assert [n.label for n in g1.nodes if n.role == "leaf"] == ["leaf", "leaf"]


def test_autograd_graph_shared_input_is_one_node():
    a = torch.randn(3, requires_grad=True)
    y = a * a  # both operands are the same leaf
    g = autograd_graph(y, names={"a": a})
    assert [n.label for n in g.nodes] == ["output", "MulBackward0", "a"]
    assert len(g.edges) == 3  # mul -> out, a -> mul twice


# ------------------------------------------------ issue 11: inputs as written, own state

class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 3)

    def forward(self, input_ids, attention_mask=None, scale=1.0):
        out = self.emb(input_ids) * scale
        return out if attention_mask is None else out * attention_mask[..., None]


@pytest.mark.parametrize("level", ["aten", "module"])
def test_keyword_inputs_are_taken_as_the_model_takes_them(level):
    model = Masked().eval()
    ids, mask = torch.tensor([[1, 5, 0]]), torch.tensor([[1.0, 1.0, 0.0]])
    gm = capture(model, input_ids=ids, attention_mask=mask, scale=2.0, level=level)
    assert gm.meta["training"] is False
    if level == "aten":
        got = gm(input_ids=ids, attention_mask=mask, scale=2.0)
    else:
        got = gm(ids, attention_mask=mask)
    assert torch.equal(got, model(ids, attention_mask=mask, scale=2.0))


@pytest.mark.parametrize("level", ["aten", "module"])
def test_captured_graph_owns_its_buffers(level):
    model, x = nn.Sequential(nn.BatchNorm1d(3)).train(), torch.randn(4, 3)
    gm = capture(model, x, level=level)
    own = dict(gm.named_buffers())
    assert all(b is not model[0].running_mean for b in own.values())
    gm(x)
    assert model[0].num_batches_tracked.item() == 0
    assert torch.equal(model[0].running_mean, torch.zeros(3))
    assert model.training and model[0].training  # flags as the caller set them


def test_capture_does_not_touch_rng_or_inputs():
    class Writes(nn.Module):
        def forward(self, x):
            return x.add_(1) + torch.rand_like(x)

    x, rng = torch.zeros(3), torch.get_rng_state()
    capture(Writes(), x)
    assert torch.equal(x, torch.zeros(3)) and torch.equal(torch.get_rng_state(), rng)


def test_module_level_failure_on_shape_code_names_the_real_cause():
    class ShapeBranch(nn.Module):  # the way Hugging Face models read shapes
        def forward(self, x):
            if x.shape[0] > 1:  # a branch on a shape, not on data
                return x * 2
            return x

    with pytest.raises(graphopt.CaptureError) as info:
        capture(ShapeBranch(), torch.randn(2, 3), level="module")
    text = str(info.value)
    assert "level='aten'" in text and "branches on shapes" in text


def test_shape_guard_runs_exports_guards_only_for_other_inputs():
    # export's guards cost ~25 Python frames a call; on the examples' shapes they
    # are known to hold, so only other shapes run them (and get the ShapeError)
    from graphopt.capture import ShapeGuard
    from graphopt.errors import ShapeError

    x = torch.randn(2, 16)
    gm = capture(models.MLP(), x)
    guard = gm._guards_fn
    assert isinstance(guard, ShapeGuard)
    # the lambda, nn.Module's call (2), forward, the key and its comprehension (one
    # frame on Python 3.11): against export's guards' dozens
    assert _python_frames(lambda: guard(x)) <= 6 < 2 * 6 < _python_frames(
        lambda: guard.guards(x))
    ran = [0]
    guard.guards.register_forward_pre_hook(lambda *_: ran.__setitem__(0, ran[0] + 1))
    with torch.no_grad():
        gm(x), gm(torch.randn(2, 16))
        assert ran[0] == 0
        with pytest.raises(ShapeError, match="captured for inputs of shape"):
            gm(torch.randn(5, 16))
    assert ran[0] == 1


def test_shape_guard_compares_python_values_by_type_and_value():
    from graphopt.capture import ShapeGuard

    x = torch.randn(3)
    guard = ShapeGuard(lambda *a: None, (x,), {"flag": False})
    assert guard.types == (torch.Tensor, bool) and guard.key == [x.shape, False]
    ran = []
    guard.guards = lambda *a: ran.append(a)
    guard(torch.randn(3), False)
    assert ran == []
    for other in ((torch.randn(3), 0), (torch.randn(3), True), (torch.randn(4), False)):
        guard(*other)
    assert len(ran) == 3  # an int for a bool, another value, another shape


def _python_frames(fn) -> int:
    import sys

    count = [0]

    def profile(frame, event, arg):
        count[0] += event == "call"

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]
