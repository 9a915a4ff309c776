"""Stages share the weights no pass changed, and nothing is lost (issue #21).

`passes.result.working_copy` (chapters 3, 5) gives each pass a copy whose graph and
modules are its own but whose read-only weights are the ones it was given, so a
chain of stages stores the model's weights once. What must still hold: no pass and
no call of a later stage changes an earlier stage or the caller's model, weights a
graph writes (a counter buffer, running statistics) are never shared, and gradients
stay each stage's own.
"""

import pytest
import torch

import graphopt
from graphgen import Counter, state_hash
from graphopt.explorer.engine import Engine
from graphopt.models import example
from graphopt.optimizer import STAGES
from graphopt.passes.result import read_only_weights, working_copy


def _weights(gm):
    return [*gm.parameters(), *gm.buffers()]


def _storages(gm) -> dict[int, int]:
    """Storage address -> bytes, for every weight of `gm`."""
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for t in _weights(gm) if t.numel()}


def _stages(model, x, train: bool):
    """Each pass of the pipeline on the stage before it, each new stage called
    (training: forward and backward) before the next pass; after each, every earlier
    stage and the caller's model must be as they were."""
    model.train(train)
    before = state_hash(model)
    stages = [graphopt.capture(model, *x)]
    hashes = [state_hash(stages[0])]
    for p in graphopt.PIPELINE:  # the graph passes, lower and backend
        out = STAGES[p](stages[-1]).module
        assert [state_hash(s) for s in stages] == hashes, f"{p} wrote an earlier stage"
        with torch.set_grad_enabled(train):
            y = out(*x)
        if train:
            y.sum().backward()
        graphopt.run(out, *x)  # the interpreter's measuring run too
        assert [state_hash(s) for s in stages] == hashes, f"calling {p}'s stage"
        assert state_hash(model) == before, p
        stages.append(out)
        hashes.append(state_hash(out))  # a training call may write its own buffers
    return stages


@pytest.mark.parametrize("name", ["small_resnet", "transformer_block"])
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_no_later_pass_or_call_changes_an_earlier_stage_or_the_model(name, train):
    model, x = example(name)
    stages = _stages(model, x, train)
    if train:  # each stage's gradients are its own: none reached the caller's model
        assert all(p.grad is None for p in model.parameters())
        assert all(p.grad is None for p in stages[0].parameters())
        last = [p for p in stages[-1].parameters() if p.grad is not None]
        assert last and all(p.grad is not q.grad for p in last
                            for q in stages[-2].parameters())


def _frozen(gm):
    gm = working_copy(gm, inplace=False, share_weights=False)
    return gm.requires_grad_(False)


def test_a_copy_shares_frozen_read_only_weights_and_owns_the_rest():
    model, x = example("small_resnet")
    gm = graphopt.capture(model, *x)
    trainable = working_copy(gm, inplace=False)  # an optimizer writes these in place
    ptrs = {p.data_ptr() for p in gm.parameters()}
    assert not any(p.data_ptr() in ptrs for p in trainable.parameters())
    frozen = _frozen(gm)
    shared = working_copy(frozen, inplace=False)
    assert _storages(shared) == _storages(frozen)  # every weight stored once
    apart = working_copy(frozen, inplace=False, share_weights=False)
    assert not set(_storages(apart)) & set(_storages(frozen))
    counter = graphopt.capture(Counter(), torch.ones(2))  # writes its buffer
    assert read_only_weights(counter) == []
    copied = working_copy(counter, inplace=False)
    assert copied.count.data_ptr() != counter.count.data_ptr()


@pytest.mark.parametrize("name", ["mlp", "small_resnet"])
def test_an_optimizer_step_on_the_result_changes_no_stage_and_not_the_model(name):
    """Training the optimised module (an optimizer writes its weights in place)
    never reaches the caller's model or an earlier stage."""
    model, x = example(name)
    model.train()
    before = state_hash(model)
    res = graphopt.optimize(model, *x, stats=False)
    hashes = [state_hash(s.module) for s in res.stages[:-1]]
    opt = torch.optim.SGD(res.module.parameters(), lr=0.1)
    for _ in range(2):
        out = res.module(*x)
        (out[0] if isinstance(out, (tuple, list)) else out).sum().backward()
        opt.step()
    assert state_hash(model) == before
    assert [state_hash(s.module) for s in res.stages[:-1]] == hashes


def test_a_chain_of_frozen_stages_stores_each_weight_once():
    model, x = example("small_resnet")
    gm = _frozen(graphopt.capture(model, *x))
    res = graphopt.optimize(gm, *x, stats=False)
    captured = _storages(res.stages[0].module)
    every = {}
    for s in res.stages:
        every.update(_storages(s.module))
    # the captured weights once, plus what fold_conv_bn and the fusions made (folded
    # conv weights, a bias per conv); a deep copy per stage held 8 times as much
    assert sum(every.values()) < 2.5 * sum(captured.values())
    for a, b in zip(res.stages, res.stages[1:]):  # passes that make no weights
        if b.name in ("eliminate_dead_code", "eliminate_common_subexpressions",
                      "fuse_attention"):
            assert set(_storages(b.module)) <= set(_storages(a.module)), b.name


def test_the_explorer_keeps_its_own_frozen_weights():
    model, x = example("small_resnet")
    engine = Engine(model, x)
    assert not any(p.requires_grad for p in engine.captured.parameters())
    assert all(p.requires_grad for p in model.parameters())
    assert not set(_storages(engine.captured)) & set(_storages(model))
