"""optimize: named stages, stats, the caller's model untouched, debug mode, errors."""

import pytest
import torch
from torch import nn
from torch.fx import GraphModule

import graphopt
from graphgen import Counter, state_hash
from graphopt import errors, models, optimizer, stages
from graphopt.passes import PassResult, pipeline
from graphopt.passes.result import working_copy
from graphopt.verify import equivalent, mismatch, random_like

# The reference models that capture at aten level and run in milliseconds.
FAST_MODELS = ["linear_regression", "mlp", "basic_block", "small_resnet",
               "transformer_block", "seed_conv_block", "add_mul", "scalar_constants",
               "tensor_constants"]


def test_pipeline_names_are_the_pass_function_names():
    assert graphopt.GRAPH_PASSES == pipeline.PIPELINE == tuple(pipeline.PASSES)
    assert graphopt.PIPELINE == (*pipeline.PIPELINE, "lower", "backend")
    for name in graphopt.GRAPH_PASSES:
        assert pipeline.PASSES[name].__name__ == name
        assert getattr(graphopt.passes, name) is pipeline.PASSES[name]
        assert optimizer.STAGES[name] is pipeline.PASSES[name]
    assert optimizer.STAGES["lower"] is graphopt.codegen.lower
    assert optimizer.STAGES["backend"] is graphopt.backend.bind_backend
    assert tuple(optimizer.STAGES) == graphopt.PIPELINE


def test_the_graph_pass_pipeline_knows_only_the_graph_passes():
    model, x = models.example("mlp")
    res = stages.run_stages(model, *x, stats=False)
    assert [s.name for s in res.stages] == ["captured", *graphopt.GRAPH_PASSES]
    for stage in ("lower", "backend"):
        with pytest.raises(pipeline.UnknownPassError, match="convert_layout"):
            stages.run_stages(model, *x, passes=[stage])


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
    # fusing only rewrites the graph: a fused pattern still runs its member ops
    assert stats["fuse_elementwise"].kernels == stats["fold_conv_bn"].kernels == 20
    # one conversion to channels-last; the pool reads channels-last in two kernels
    assert stats["convert_layout"].kernels == 22
    assert stats["lower"].kernels == 22  # no elementwise group left to lower
    # one oneDNN kernel per fused pattern and lone conv, MKL's GEMM for the linear
    assert stats["backend"].kernels == 12 and stats["backend"].nodes == 12
    assert isinstance(res.stages[3].result, PassResult)
    assert "fold_conv_bn" in res.table()


@pytest.mark.parametrize("level", ["aten", "module"])
def test_graph_module_input_is_not_modified(level):
    model, x = models.example("basic_block")
    gm = graphopt.capture(model, *x, level=level)
    code, state = gm.code, state_hash(gm)
    res = graphopt.optimize(gm, *x)
    assert res.stages[0].module is gm and gm.code == code and state_hash(gm) == state
    assert isinstance(res.module.graph_module, GraphModule)  # inside the Wrapper
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)


def test_every_pass_alone_leaves_model_weights_untouched():
    for name in ("basic_block", "transformer_block", "tensor_constants"):
        model, x = models.example(name)
        before = state_hash(model)
        for level in ("aten", "module"):
            gm = graphopt.capture(model, *x, level=level)
            gm_state = state_hash(gm)
            for p in graphopt.PIPELINE:  # the graph passes, lower and backend
                out = optimizer.STAGES[p](gm).module
                assert equivalent(gm, out, x, raise_on_mismatch=True), (name, level, p)
                assert state_hash(gm) == gm_state, (name, level, p)
        assert state_hash(model) == before


def test_unknown_pass_name_lists_the_valid_ones():
    model, x = models.example("mlp")
    valid = "fold_constants, .*fuse_elementwise.*, lower, backend"
    with pytest.raises(errors.GraphoptError, match=valid):
        graphopt.optimize(model, *x, passes=["fold_constantz"])
    with pytest.raises(ValueError):
        graphopt.optimize(model, *x, passes="nope")


def test_empty_and_custom_pass_lists():
    model, x = models.example("mlp")
    res = graphopt.optimize(model, *x, passes=[])
    assert [s.name for s in res.stages] == ["captured"]

    def swap_relu_for_clamp(gm, inplace=False):
        """A reader's own pass: relu(x) -> clamp(x, min=0)."""
        gm = gm if inplace else working_copy(gm, False)
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
    middle = [True] * (len(graphopt.PIPELINE) - 1)  # only the last stage keeps a module
    assert [s.module is None for s in fast.stages] == [False] + middle + [False]
    assert fast.module.code == full.module.code
    assert equivalent(full.module, fast.module, x)


def test_bad_model_gets_a_clear_error():
    with pytest.raises(errors.GraphoptError, match="nn.Module or a GraphModule"):
        graphopt.optimize(42, torch.randn(2))


# ------------------------------------------------ nothing lost, inputs as written (#11)

def test_a_buffer_updated_each_call_starts_where_eager_starts():
    model, x = Counter(), torch.ones(2)
    res = graphopt.optimize(model, x, check=True)  # every stage measured, checked
    assert model.count.item() == 0  # the caller's buffer: untouched
    assert [res(x)[0].item() for _ in range(3)] == [1.0, 2.0, 3.0]  # eager: 1, 2, 3
    assert model.count.item() == 0  # running the optimized module does not write it


class WritesItsInput(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


def test_the_callers_example_input_is_not_written():
    x = torch.ones(3)
    res = graphopt.optimize(WritesItsInput(), x, check=True)
    assert torch.equal(x, torch.ones(3))
    y = torch.ones(3)
    assert torch.equal(res(y), torch.full((3,), 3.0))
    assert torch.equal(y, torch.full((3,), 2.0))


def _bn_model():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                         nn.Dropout(0.5), nn.Flatten(), nn.Linear(36, 2))


def test_training_model_keeps_state_flags_parameters_and_rng():
    model, x = _bn_model().train(), torch.randn(2, 3, 5, 5)
    model[3].eval()  # a mixed model: every flag must come back as it was
    flags = [m.training for m in model.modules()]
    before, rng = state_hash(model), torch.get_rng_state()
    res = graphopt.optimize(model, x, check=True)
    assert state_hash(model) == before and torch.equal(torch.get_rng_state(), rng)
    assert [m.training for m in model.modules()] == flags
    assert model[1].num_batches_tracked.item() == 0
    names = [n for n, _ in model.named_parameters()]
    assert len(list(res.module.parameters())) == len(names)
    assert any("fold_conv_bn" in n and "training" in n for n in res.notes)
    res(x)  # a training step's forward: the optimized module's own statistics move
    assert model[1].num_batches_tracked.item() == 0 and state_hash(model) == before


def test_check_mode_compares_dropout_seeded():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.ReLU()).train()
    res = graphopt.optimize(model, torch.randn(4, 8), check=True)  # no false alarm
    torch.manual_seed(3)
    a = model(torch.ones(4, 8))
    torch.manual_seed(3)
    assert torch.equal(res(torch.ones(4, 8)), a)


class TokenModel(nn.Module):
    """Token ids and an attention mask, as Hugging Face models take them."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, input_ids, attention_mask=None):
        return self.emb(input_ids) * attention_mask[..., None]


def test_keyword_inputs_and_check_mode_on_token_ids():
    model = TokenModel().eval()
    ids, mask = torch.tensor([[1, 9, 3, 0]]), torch.tensor([[1, 1, 1, 0]])
    res = graphopt.optimize(model, input_ids=ids, attention_mask=mask, check=True)
    assert torch.equal(res(input_ids=ids, attention_mask=mask),
                       model(input_ids=ids, attention_mask=mask))
    assert equivalent(model, res.module, random_like({"input_ids": ids,
                                                      "attention_mask": mask}))


def test_another_batch_size_gets_a_graphopt_error_saying_what_to_do():
    model, x = models.example("mlp")
    res = graphopt.optimize(model, *x, stats=False)
    wrong = torch.randn(x[0].shape[0] + 3, *x[0].shape[1:])
    with pytest.raises(errors.ShapeError) as info:
        res(wrong)
    text = str(info.value)
    assert "captured for inputs of shape" in text and "optimize the model again" in text
    assert info.value.__cause__ is None


# ------------------------------------------------ check=True judged by float64 (#21)

def _far_bn():
    """A Conv+BN whose conv output sits 3000 standard deviations out, BN undoing it:
    eager float32 rounds at the scale of 3000, the folded conv never does."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).eval()
    with torch.no_grad():
        model[0].bias.fill_(3000.0)
        model[1].running_mean.fill_(3000.0)  # running_var 1: 3000 std out
    return model, (torch.randn(2, 3, 8, 8),)


def _nudge(amount):
    """A wrong pass: adds `amount` to the graph's first output."""
    def nudge_output(gm):
        out = next(n for n in gm.graph.nodes if n.op == "output")
        first = out.args[0][0] if isinstance(out.args[0], (tuple, list)) \
            else out.args[0]
        with gm.graph.inserting_before(out):
            bumped = gm.graph.call_function(torch.ops.aten.add.Tensor, (first, amount))
        out.replace_input_with(first, bumped)
        gm.recompile()
        return PassResult(gm, rewritten=[bumped.name])
    return nudge_output


def test_check_mode_trusts_a_fold_that_is_closer_to_float64_than_eager():
    model, (x,) = _far_bn()
    with torch.no_grad():
        exact = model.double()(x.double())
        model.float()
        eager = model(x)
        folded = graphopt.optimize(model, x, stats=False).module(x)
    eager_off = float((eager.double() - exact).abs().max())
    folded_off = float((folded.double() - exact).abs().max())
    assert folded_off < 1e-6 < 1e-4 < eager_off  # the fold is the better float32 run
    assert mismatch(eager, folded) is not None  # so comparing the two cries wolf
    res = graphopt.optimize(model, x, check=True, stats=False)  # no false alarm
    assert [s.name for s in res.stages] == ["captured", *graphopt.PIPELINE]


@pytest.mark.parametrize("case, amount", [("mlp", 1e-3), ("far_bn", 1e-2)])
def test_check_mode_still_catches_a_wrong_pass_and_says_how_far(case, amount):
    model, x = models.example(case) if case == "mlp" else _far_bn()
    with pytest.raises(errors.NotEquivalentError) as info:
        graphopt.optimize(model, *x, passes=[_nudge(amount)], check=True,
                          stats=False)
    text = str(info.value)
    assert "after pass 'nudge_output'" in text
    assert "from float64" in text and "eager float32 is at most" in text


def test_check_mode_without_a_float64_twin_compares_as_before():
    # dropout draws other numbers in float64: the previous stage is the reference
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train()
    with pytest.raises(errors.NotEquivalentError) as info:
        graphopt.optimize(model, torch.randn(4, 8), passes=[_nudge(1e-3)],
                          check=True, stats=False)
    assert "max abs difference" in str(info.value)
    assert "float64" not in str(info.value)
