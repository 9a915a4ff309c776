"""The measured policy on real models: ResNet-18 and the BERT encoder (chapters 6, 7).

`optimize(model, *x, policy="measured")` times its kernel choices first, then
applies them. On each real model: the answer is eager's, the record it timed
(`result.policy`) saves and reloads to an equal `Policy`, and optimising again
under the reloaded policy, with every timer refusing to run, gives the same graph
(each node, its module's kernel and why) and the same kernel count. A policy with
every timed answer flipped gives another graph: the comparison sees the choices.
Small inputs (a 32x32 image, 8 tokens) keep each model to a few seconds; at 32x32
ResNet-18's last stage runs on a 1x1 map, where the policy asks a question.
"""

import pytest
import torch

import graphopt
from graphopt import models
from graphopt.backend import onednn
from graphopt.codegen import calibrate, reduce_cpu
from graphopt.policy import Policy

CASES = (("resnet18", {"size": 32}, "tiny_map_eager "), ("bert", {"seq_len": 8},
                                                          "mkl_faster "))
TIMERS = ((calibrate, "calibration"), (onednn, "eager_conv_faster"),
          (onednn, "mkl_faster"), (reduce_cpu, "fastest"))


def describe(module) -> list:
    """Each node's op, target and arguments; a module's class, kernel and reasons."""
    gm = getattr(module, "graph_module", module)  # a Wrapper holds its graph module
    rows = []
    for n in gm.graph.nodes:
        row = [n.op, str(n.target), str(n.args)]
        if n.op == "call_module":
            m = gm.get_submodule(n.target)
            row += [type(m).__name__] + [str(getattr(m, a, "")) for a in (
                "kernel", "backend", "why", "why_eager", "eager_why")]
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def quick_calibration(tmp_path_factory):
    """Calibrate on three sizes into a scratch file (seconds, not the full sweep)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHOPT_CALIBRATION",
                  str(tmp_path_factory.mktemp("cal") / "cal.json"))
        mp.setattr(calibrate, "SIZES", (1, 64, 4096))
        mp.setattr(calibrate, "_MEMO", {})
        yield


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def tuned(request, quick_calibration):
    """(model, inputs, the result of optimize(policy="measured"), question prefix)."""
    name, sizes, question = request.param
    try:
        model, x = models.example(name, **sizes)
    except models.MissingPackageError as e:
        pytest.skip(str(e))
    if not onednn.available():
        pytest.skip("no oneDNN: the backend asks the policy nothing")
    with torch.no_grad():
        res = graphopt.optimize(model, *x, policy="measured", keep_stages=False,
                                stats=False)
    return model, x, res, question


def test_measured_gives_the_eager_answer(tuned):
    model, x, res, _ = tuned
    with torch.no_grad():
        torch.testing.assert_close(res(*x), model(*x), rtol=1e-4, atol=1e-4)


def test_the_record_holds_this_models_questions(tuned):
    *_, res, question = tuned
    record = res.policy.record
    assert res.policy.is_measured and {"min_numel", "parallel_numel"} <= set(record)
    assert any(k.startswith(question) for k in record), record
    assert all(isinstance(v, (bool, int)) for v in record.values())
    assert "policy measured" in " ".join(res.notes)


def test_the_saved_record_replays_the_same_graph(tuned, tmp_path, monkeypatch):
    model, x, res, _ = tuned
    saved = Policy.load(res.policy.save(tmp_path / "policy.json"))
    assert saved == res.policy and saved.to_json() == res.policy.to_json()

    def refuse(*a, **k):
        raise AssertionError("a recorded policy must not time anything")
    for mod, name in TIMERS:
        monkeypatch.setattr(mod, name, refuse)
    with torch.no_grad():
        again = graphopt.optimize(model, *x, policy=saved, keep_stages=False,
                                  stats=False)
        assert describe(again.module) == describe(res.module)
        assert graphopt.run(again.module, *x).kernels == \
            graphopt.run(res.module, *x).kernels
        torch.testing.assert_close(again(*x), res(*x), rtol=0, atol=0)


def test_a_flipped_record_gives_another_graph(tuned):
    """The replay check above could fail: other answers, another graph."""
    model, x, res, _ = tuned
    flipped = Policy.measured({k: (not v) if isinstance(v, bool) else v
                               for k, v in res.policy.record.items()})
    with torch.no_grad():
        other = graphopt.optimize(model, *x, policy=flipped, keep_stages=False,
                                  stats=False)
    assert describe(other.module) != describe(res.module)
