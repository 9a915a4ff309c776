"""optimize: named stages, stats, the caller's model untouched, debug mode, errors."""

import pytest
import torch
from torch.fx import GraphModule

import graphopt
from graphopt import errors, models
from graphopt.passes import PassResult, pipeline
from graphopt.verify import equivalent, random_like
from graphgen import state_hash

# The reference models that capture at aten level and run in milliseconds.
FAST_MODELS = ["linear_regression", "mlp", "basic_block", "small_resnet",
               "transformer_block", "seed_conv_block", "add_mul", "scalar_constants",
               "tensor_constants"]


def test_pipeline_names_are_the_pass_function_names():
    assert graphopt.PIPELINE == pipeline.PIPELINE
    for name in graphopt.PIPELINE:
        assert pipeline.PASSES[name].__name__ == name
        assert getattr(graphopt.passes, name) is pipeline.PASSES[name]


@pytest.mark.parametrize("name", FAST_MODELS)
def test_every_reference_model_optimises_equivalently(name):
    model, x = models.example(name)
    before = state_hash(model)
    res = graphopt.optimize(model, *x, check=True, stats=False)
    assert [s.name for s in res.stages] == ["captured", *graphopt.PIPELINE]
    assert equivalent(model, res.module, random_like(x), raise_on_mismatch=True)
    assert state_hash(model) == before
    first, last = (graphopt.run(s.module, *x) for s in (res.stages[0], res.stages[-1]))
    assert len(last.nodes) <= len(first.nodes) and last.kernels <= first.kernels
    assert last.bytes_moved <= first.bytes_moved


def test_small_resnet_counts():
    model, x = models.example("small_resnet")
    res = graphopt.optimize(model, *x)
    stats = {s.name: s.stats for s in res.stages}
    assert stats["captured"].nodes == 29 and stats["captured"].kernels == 28
    assert stats["fold_conv_bn"].nodes == 21  # eight BNs gone
    assert stats["fuse_patterns"].nodes == 11
    assert stats["fuse_elementwise"].kernels == 20
    assert isinstance(res.stages[3].result, PassResult)
    assert "fold_conv_bn" in res.table()


@pytest.mark.parametrize("level", ["aten", "module"])
def test_graph_module_input_is_not_modified(level):
    model, x = models.example("basic_block")
    gm = graphopt.capture(model, *x, level=level)
    code, state = gm.code, state_hash(gm)
    res = graphopt.optimize(gm, *x)
    assert res.stages[0].module is gm and gm.code == code and state_hash(gm) == state
    assert isinstance(res.module, GraphModule)
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)


def test_every_pass_alone_leaves_model_weights_untouched():
    for name in ("basic_block", "transformer_block", "tensor_constants"):
        model, x = models.example(name)
        before = state_hash(model)
        for level in ("aten", "module"):
            gm = graphopt.capture(model, *x, level=level)
            gm_state = state_hash(gm)
            for p in graphopt.PIPELINE:
                out = pipeline.PASSES[p](gm).module
                assert equivalent(gm, out, x, raise_on_mismatch=True), (name, level, p)
                assert state_hash(gm) == gm_state, (name, level, p)
        assert state_hash(model) == before


def test_unknown_pass_name_lists_the_valid_ones():
    model, x = models.example("mlp")
    with pytest.raises(errors.GraphoptError, match="fold_constants, .*fuse_elementwise"):
        graphopt.optimize(model, *x, passes=["fold_constantz"])
    with pytest.raises(ValueError):
        graphopt.optimize(model, *x, passes="nope")


def test_empty_and_custom_pass_lists():
    model, x = models.example("mlp")
    assert [s.name for s in graphopt.optimize(model, *x, passes=[]).stages] == ["captured"]

    def swap_relu_for_clamp(gm, inplace=False):
        """A reader's own pass: relu(x) -> clamp(x, min=0)."""
        gm = gm if inplace else pipeline.working_copy(gm, False)
        changed = []
        for n in gm.graph.nodes:
            if n.target is torch.ops.aten.relu.default:
                n.target, n.args = torch.ops.aten.clamp.default, (n.args[0], 0.0)
                changed.append(n.name)
        gm.recompile()
        return PassResult(gm, rewritten=changed)

    res = graphopt.optimize(model, *x, passes=["fold_constants", swap_relu_for_clamp],
                            check=True)
    assert [s.name for s in res.stages] == ["captured", "fold_constants",
                                            "swap_relu_for_clamp"]
    assert res.stages[-1].result.rewritten == ["relu", "relu_1"]


def test_check_mode_names_the_pass_that_broke_the_graph():
    def break_it(gm):
        for n in gm.graph.nodes:
            if n.target is torch.ops.aten.relu.default:
                n.target = torch.ops.aten.neg.default
        gm.recompile()
        return gm

    model, x = models.example("mlp")
    with pytest.raises(errors.NotEquivalentError, match="after pass 'break_it'"):
        graphopt.optimize(model, *x, passes=[break_it], check=True)


def test_shared_stages_mode_gives_the_same_module():
    model, x = models.example("small_resnet")
    full = graphopt.optimize(model, *x)
    fast = graphopt.optimize(model, *x, keep_stages=False, stats=False)
    assert [s.module is None for s in fast.stages] == [False] + [True] * 5 + [False]
    assert fast.module.code == full.module.code
    assert equivalent(full.module, fast.module, x)


def test_bad_model_gets_a_clear_error():
    with pytest.raises(errors.GraphoptError, match="nn.Module or a GraphModule"):
        graphopt.optimize(42, torch.randn(2))
