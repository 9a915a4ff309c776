"""Property-based tests: every pass, and the whole pipeline, on generated graphs.

Two generators (tests/graphgen.py):

- `fx_graphs`: aten-level fx graphs built directly, mixing constants, shared
  subexpressions, dead branches, multi-consumer nodes, broadcasts, reductions, matmuls
  and random ops. Each pass's result lints, computes the original's outputs on the
  example inputs and on fresh ones, and leaves the original's state and graph alone;
  so do the `lower` and `backend` stages, run after the passes that feed them.
- `programs`: nn.Modules whose forward does what users' code does (in-place ops,
  writes through aliasing views, constants written in place, a buffer updated each
  call, parameter-only subexpressions, dropout, integer ids), in train or eval mode,
  captured by `optimize` itself with a drawn subset of the stages. The optimized
  module answers as eager does on three calls and on fresh inputs (random ops under
  the same seed), mutates its inputs as eager does, the caller's model and inputs are
  untouched, and in training mode every parameter stays a parameter. It runs the
  wrapper's fast path exactly when the subset holds `backend` (#22).
"""

import copy

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import graphopt
from graph_match import assert_unchanged
from graphgen import fx_graphs, program_inputs, programs, run_seeded, state_hash
from graphopt.backend import wrapper
from graphopt.optimizer import STAGES
from graphopt.passes import PassResult, pipeline
from graphopt.verify import mismatch, random_like

SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _assert_same(original, optimised, inputs):
    for args in (inputs, random_like(inputs, seed=7)):
        problem = mismatch(run_seeded(original, args), run_seeded(optimised, args))
        assert problem is None, problem


@pytest.mark.parametrize("name", pipeline.PIPELINE)
@settings(max_examples=40, **SETTINGS)
@given(case=fx_graphs())
def test_each_pass_preserves_outputs(name, case):
    gm, inputs = case
    before_state, before_code = state_hash(gm), gm.code
    result = pipeline.PASSES[name](gm)
    assert isinstance(result, PassResult)
    result.module.graph.lint()
    _assert_same(gm, result.module, inputs)
    assert state_hash(gm) == before_state and gm.code == before_code


# what each of the last two stages is given: the groups and patterns it works on
FEEDS = {"lower": "fuse_elementwise", "backend": "fuse_patterns"}


@pytest.mark.parametrize("name", FEEDS)
@settings(max_examples=40, **SETTINGS)
@given(case=fx_graphs())
def test_lower_and_backend_preserve_outputs(name, case):
    gm, inputs = case
    fed = pipeline.PASSES[FEEDS[name]](gm).module
    before_state, before_code = state_hash(fed), fed.code
    result = STAGES[name](fed)
    assert isinstance(result, PassResult) and result.module is not fed
    result.module.graph.lint()
    _assert_same(gm, result.module, inputs)
    assert state_hash(fed) == before_state and fed.code == before_code
    assert wrapper.wrapper_of(fed) is None


@settings(max_examples=60, **SETTINGS)
@given(case=fx_graphs(max_ops=18))
def test_pipeline_preserves_outputs_and_never_grows(case):
    gm, inputs = case
    before_state = state_hash(gm)
    torch.manual_seed(1234)
    res = graphopt.optimize(gm, *inputs, check=False)
    _assert_same(gm, res.module, inputs)
    assert state_hash(gm) == before_state
    first, last = res.stages[0].stats, res.stages[-1].stats
    assert last.nodes <= first.nodes and last.kernels <= first.kernels
    assert [s.name for s in res.stages] == ["captured", *graphopt.PIPELINE]


@settings(max_examples=20, **SETTINGS)
@given(case=fx_graphs())
def test_passes_are_idempotent_after_the_pipeline(case):
    gm, inputs = case
    out = graphopt.optimize(gm, *inputs, stats=False).module
    # every stage but `backend`, which binds and prepacks each pattern again
    for name in graphopt.PIPELINE[:-1]:
        assert_unchanged(STAGES[name], out)


# --- generated models, captured by optimize, any subset of the passes ----------------

def _seeded_calls(module, inputs, seed):
    """Outputs and the inputs after the call (a model may write its inputs)."""
    args = tuple(x.clone() for x in inputs)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = module(*args)
    return out, args


def _flags(model):
    return {name: m.training for name, m in model.named_modules()}


# Each example exports a model (about a second): no shrinking, which took minutes; the
# failing example is still printed whole.
@settings(max_examples=30, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          **SETTINGS)
@given(case=programs(), subset=st.sets(st.sampled_from(graphopt.PIPELINE)),
       check=st.booleans())
def test_generated_models_survive_any_subset_of_passes(case, subset, check):
    model, inputs = case
    passes = [p for p in graphopt.PIPELINE if p in subset]
    reference = copy.deepcopy(model)
    state, flags, saved = state_hash(model), _flags(model), [x.clone() for x in inputs]
    res = graphopt.optimize(model, *inputs, passes=passes, check=check)
    # with `backend` the calls below run the wrapper's fast path, else fx's forward
    assert (wrapper.wrapper_of(res.module) is not None) == ("backend" in passes)
    assert state_hash(model) == state and _flags(model) == flags
    assert all(torch.equal(a, b) for a, b in zip(inputs, saved)), "inputs changed"
    fresh = program_inputs(model, seed=99)
    for seed, args in enumerate([inputs] * 3 + [fresh]):
        expected = _seeded_calls(reference, args, seed)
        problem = mismatch(expected, _seeded_calls(res.module, args, seed))
        assert problem is None, f"call {seed + 1} after {passes}: {problem}"
    assert state_hash(model) == state, "running the optimized module changed the model"
    if model.training:  # every parameter the forward reads stays a parameter
        assert _read_parameters(res.stages[0].module) <= {
            n for n, _ in res.module.named_parameters()}


def _read_parameters(gm) -> set[str]:
    """Parameters that the graph's outputs or side effects really depend on."""
    params = {n for n, _ in gm.named_parameters()}
    live, todo = set(), [n for n in gm.graph.nodes if n.op == "output" or n.is_impure()]
    while todo:
        n = todo.pop()
        if n not in live:
            live.add(n)
            todo.extend(n.all_input_nodes)
    return {str(n.target) for n in live if n.op == "get_attr" and str(n.target) in params}
