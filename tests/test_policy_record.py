"""The kernel policy as data: a value passed to the stages, a measured record made
before them, saved, reloaded and applied the same way every time (chapters 6, 7)."""

import json
import threading

import pytest
import torch
from torch import nn

import graphopt
from graphopt import policy, tuning
from graphopt.codegen import calibrate
from graphopt.policy import Policy, PolicyError


def _described(res):
    """Each call_module node's class, kernel and eager reason, and the counts."""
    gm = res.module
    rows = [(n.name, type(gm.get_submodule(n.target)).__name__,
             str(getattr(gm.get_submodule(n.target), "kernel", "")),
             str(getattr(gm.get_submodule(n.target), "eager_why", "")))
            for n in gm.graph.nodes if n.op == "call_module"]
    return rows, [s.stats.kernels for s in res.stages if s.stats]


class Gate(nn.Module):
    """A squeeze-and-excitation gate's 1x1 conv with a ReLU on a 1x1 map, a plain
    linear and a layer norm: each asks the policy a question a measurement answers."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 1)
        self.lin = nn.Linear(16, 64)
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        g = torch.relu(self.conv(x)).flatten(1)
        return self.norm(torch.softmax(self.lin(g), dim=-1) * 2.0 + 1.0)


@pytest.fixture
def quick_calibration(monkeypatch, tmp_path):
    """Calibrate on three sizes into a scratch file (seconds, not the full sweep)."""
    monkeypatch.setenv("GRAPHOPT_CALIBRATION", str(tmp_path / "cal.json"))
    monkeypatch.setattr(calibrate, "SIZES", (1, 64, 4096))
    monkeypatch.setattr(calibrate, "_MEMO", {})


def test_no_module_state_is_left():
    for name in ("_CURRENT", "using", "current"):
        assert not hasattr(policy, name), name
    assert not hasattr(graphopt.codegen, "AUTO_MIN_NUMEL")
    with pytest.raises(PolicyError, match="measuring first"):
        policy.resolve("measured")
    with pytest.raises(PolicyError, match="'fixed' or 'measured'"):
        policy.resolve("fast")
    assert policy.resolve(None) is policy.DEFAULT == Policy()


def test_the_record_is_made_first_then_applied_by_lookup(quick_calibration,
                                                          monkeypatch, tmp_path):
    x = torch.randn(1, 16, 1, 1)
    model = Gate().eval()
    tuned = tuning.tune(model, x)
    record = tuned.record
    assert tuned.is_measured and {"min_numel", "parallel_numel"} <= set(record)
    assert any(k.startswith("tiny_map_eager ConvReLU relu") for k in record), record
    assert all(isinstance(v, (bool, int)) for v in record.values())
    # applying the record times nothing: every timer refuses
    from graphopt.backend import onednn
    from graphopt.codegen import reduce_cpu

    def refuse(*a, **k):
        raise AssertionError("a recorded policy must not time anything")
    for mod, name in ((calibrate, "calibration"), (onednn, "eager_conv_faster"),
                      (onednn, "mkl_faster"), (reduce_cpu, "fastest")):
        monkeypatch.setattr(mod, name, refuse)
    first = graphopt.optimize(model, x, policy=tuned)
    saved = Policy.load(tuned.save(tmp_path / "policy.json"))
    assert saved == tuned and json.loads((tmp_path / "policy.json").read_text())
    again = graphopt.optimize(model, x, policy=saved)
    assert _described(first) == _described(again)
    assert "policy measured" in " ".join(first.notes)
    torch.testing.assert_close(again(x), model(x), rtol=1e-4, atol=1e-5)


def test_optimize_measured_tunes_before_its_stages(quick_calibration):
    model, x = Gate().eval(), (torch.randn(1, 16, 1, 1),)
    res = graphopt.optimize(model, *x, policy="measured", stats=False)
    (lowered,) = [s for s in res.stages if s.name == "lower"]
    assert any("policy measured: " in n and "timed on this machine before" in n
               for n in lowered.result.notes)
    kernels = [m for m in res.module.modules() if hasattr(m, "eager_why")]
    assert kernels and all(m.policy.is_measured and m.policy.recorder is None
                           for m in kernels)


def test_a_saved_policy_is_checked_when_read(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PolicyError, match="Policy.save"):
        Policy.load(bad)
    bad.write_text(json.dumps({"name": "fixed", "thresholds": 3}))
    with pytest.raises(PolicyError, match="fields"):
        Policy.load(bad)
    mine = Policy(min_numel=4096, short_group_numel=0)
    assert Policy.from_json(mine.to_json()) == mine


def test_two_policies_at_once_on_two_threads():
    """No policy is in force: two threads lowering under two policies each get
    their own (a module-level policy would leak from one thread into the other)."""
    x = torch.randn(8, 8)

    class Two(nn.Module):
        def forward(self, a):
            return (a + 1.0) * 2.0

    seen = {}
    gm = graphopt.capture(Two(), x)  # torch.export: once, on the main thread

    def run(name, pol):
        try:
            res = graphopt.optimize(gm, x, policy=pol, stats=False)
        except Exception as e:  # noqa: BLE001 - reported below, on the main thread
            seen[name] = e
            return
        seen[name] = {m.policy for m in res.module.modules() if hasattr(m, "eager_why")}
    pols = {"a": Policy(short_group_numel=0), "b": Policy(short_group_numel=1 << 20)}
    threads = [threading.Thread(target=run, args=kv) for kv in pols.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": {pols["a"]}, "b": {pols["b"]}}
