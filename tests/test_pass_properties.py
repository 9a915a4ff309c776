"""Property-based tests: every pass, and the whole pipeline, on generated graphs.

Each generated graph (tests/graphgen.py) mixes constants, shared subexpressions, dead
branches, multi-consumer nodes, broadcasts, reductions, matmuls and random ops. For
each we check: the pass's result lints, computes the same outputs as the original on
the example inputs and on fresh random ones, and leaves the original's parameters,
buffers and graph untouched. Examples per run: 40 per pass x 6 + 60 pipeline + 20 idempotence = 320.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import graphopt
from graphopt.passes import PassResult, pipeline
from graphopt.verify import mismatch, random_like
from graphgen import fx_graphs, run_seeded, state_hash

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
    for name in graphopt.PIPELINE:
        assert not pipeline.PASSES[name](out).changed, name
