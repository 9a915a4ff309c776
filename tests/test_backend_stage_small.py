"""The backend stage says when it has nothing to win against eager (chapter 7)."""

from __future__ import annotations

import pytest

import graphopt
from graphopt.backend.stage import SMALL_OPS, nothing_to_bind
from graphopt.backend.wrapper import wrapper_of
from graphopt.models import example

NOTE = "backend: nothing to bind"


def _backend(name):
    model, inputs = example(name)
    res = graphopt.optimize(model, *inputs, stats=False)
    return res, [str(n) for n in res.stages[-1].result.notes]


@pytest.mark.parametrize("name, ops", [("add_mul", 2), ("scalar_constants", 1)])
def test_a_toy_with_nothing_bound_gets_the_note_and_keeps_its_fast_path(name, ops):
    res, notes = _backend(name)
    (line,) = [n for n in notes if n.startswith(NOTE)]
    assert f"{ops} op(s) on at most 16 elements" in line
    assert wrapper_of(res.module) is not None  # the cheapest path there is, kept


@pytest.mark.parametrize("name", ["mlp", "cond_branch", "basic_block"])
def test_a_bound_kernel_or_an_op_eager_runs_otherwise_gets_no_note(name):
    # mlp and basic_block bind library kernels; torch.cond's eager dispatch is
    # what the fast path saves
    res, notes = _backend(name)
    assert not any(n.startswith(NOTE) for n in notes)


def test_the_rule_counts_the_ops_of_an_eager_group(monkeypatch):
    from graphopt.backend import stage
    res, _ = _backend("add_mul")
    gm = res.module.graph_module  # one fused group of two ops, run as eager ops
    assert "2 op(s)" in nothing_to_bind(gm) and SMALL_OPS >= 2
    monkeypatch.setattr(stage, "SMALL_OPS", 1)  # more ops than the rule allows
    assert nothing_to_bind(gm) is None
