"""The per-category breakdown of chapter 7: categories, ORT profile parsing, sums.

Deterministic: categories of known nodes and op types, the parts of a call never
exceeding its whole; no timing is asserted (the times live in benchmarks/gap.py).
"""

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphopt
from graphopt.peers import breakdown as bd
from graphopt.peers import ort_profile


class Mixed(nn.Module):
    """One op of nearly every category: conv, pool, linear, norm, attention, ..."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.conv(x)), 2)       # conv, elementwise, pool
        t = y.flatten(2).transpose(1, 2)                    # data movement
        q = self.fc(t)                                      # linear/GEMM
        a = F.scaled_dot_product_attention(q, q, q)         # attention
        return torch.softmax(self.norm(a + t), dim=-1)      # norm/softmax


def _categories(gm):
    return {bd.op_name(n): c for n, (c, _) in bd.node_labels(gm).items()}


def test_aten_nodes_get_their_categories():
    gm = graphopt.capture(Mixed().eval(), torch.randn(1, 3, 8, 8))
    cats = _categories(gm)
    assert cats["conv2d"] == "conv"
    assert cats["relu"] == "elementwise"
    assert cats["max_pool2d"] == "pool/reduce"
    assert cats["linear"] == "linear/GEMM"
    assert cats["scaled_dot_product_attention"] == "attention"
    assert cats["layer_norm"] == "norm/softmax"
    assert cats["softmax"] == "norm/softmax"
    assert cats["transpose"] == "data movement"
    assert cats["add"] == "elementwise"


def test_fused_nodes_of_graphopt_get_their_categories():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 6 * 6, 4), nn.ReLU()).eval()
    gm = graphopt.optimize(model, torch.randn(1, 3, 8, 8), stats=False).module
    by_module = {type(gm.get_submodule(str(n.target))).__name__: c
                 for n, (c, _) in bd.node_labels(gm).items() if n.op == "call_module"}
    assert by_module["ConvReLU"] == "conv"
    assert by_module["LinearReLU"] == "linear/GEMM"
    assert by_module.get("ShapeGuard", "other") == "other"  # a check computes nothing


@pytest.mark.parametrize("op,category", [
    ("Conv", "conv"), ("FusedConv", "conv"), ("com.microsoft.nchwc.Conv", "conv"),
    ("Gemm", "linear/GEMM"), ("FusedMatMul", "linear/GEMM"), ("MatMul", "linear/GEMM"),
    ("Attention", "attention"), ("SkipLayerNormalization", "norm/softmax"),
    ("Softmax", "norm/softmax"), ("GlobalAveragePool", "pool/reduce"),
    ("HardSwish", "elementwise"), ("Gelu", "elementwise"),
    ("ReorderInput", "data movement"), ("Transpose", "data movement"),
    ("SomethingNew", "other")])
def test_ort_op_types_map_to_categories(op, category):
    assert ort_profile.ort_category(op) == category
    assert category in bd.CATEGORIES


def test_node_timer_parts_never_exceed_the_whole_call():
    model = Mixed().eval()
    x = torch.randn(1, 3, 8, 8)
    gm = graphopt.optimize(model, x, stats=False).module
    labels = bd.node_labels(gm)
    run = bd.time_nodes(gm, x, labels=labels)
    assert set(run.categories) == {c for c, _ in labels.values()}
    assert set(run.ops) == {o for _, o in labels.values()}
    assert all(s >= 0 for s in run.categories.values())
    assert 0 < run.parts_s <= run.total_s
    assert sum(run.ops.values()) == pytest.approx(run.parts_s)
    table = bd.with_overhead(run)
    assert set(table) == set(bd.CATEGORIES) | {bd.OVERHEAD}
    assert sum(table.values()) == pytest.approx(run.total_s)


def test_ort_profile_of_a_tiny_model_parses_into_runs(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from graphopt import peers
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 6 * 6, 4)).eval()
    x = torch.randn(1, 3, 8, 8)
    path = peers.export_onnx(model, (x,), str(tmp_path / "tiny.onnx"))
    for level in ("all", "disable_all"):
        session = ort_profile.profiled_session(path, 1, level, str(tmp_path / level))
        feed = {session.get_inputs()[0].name: x.numpy()}
        for _ in range(3):
            session.run(None, feed)
        trace = session.end_profiling()
        assert os.path.exists(trace)
        runs = ort_profile.ort_runs(trace)
        assert len(runs) == 3
        for run in runs:
            assert "conv" in run.categories and "linear/GEMM" in run.categories
            assert "Gemm" in run.ops and "Conv [kxk]" in run.ops  # 3x3 weight
            assert 0 < run.parts_s <= run.total_s
        if level == "disable_all":  # no fusion: the ReLU runs as its own kernel
            assert "Relu" in runs[0].ops


def test_ort_runs_skips_fences_and_kernels_outside_a_run():
    def kernel(ts, dur, op):
        return {"cat": "Node", "name": f"n{ts}_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": op}}
    events = [
        {"cat": "Session", "name": "model_run", "ts": 100, "dur": 50},
        kernel(10, 5, "Conv"),                       # before any run: ignored
        kernel(110, 20, "Conv"),
        {"cat": "Node", "name": "n110_fence_before", "ts": 109, "dur": 1,
         "args": {"op_name": "Conv"}},               # a fence is not a kernel
        kernel(135, 10, "Add"),
        {"cat": "Session", "name": "model_run", "ts": 200, "dur": 30},
        kernel(205, 12, "MatMul"),
    ]
    first, second = ort_profile.ort_runs(events)
    assert first.categories == pytest.approx({"conv": 20e-6, "elementwise": 10e-6})
    assert first.total_s == pytest.approx(50e-6)
    assert second.ops == pytest.approx({"MatMul": 12e-6})


def test_shares_of_the_gap_sum_to_one_and_name_the_top_category():
    ours = bd.Run(10.0, {"conv": 6.0, "elementwise": 3.0})
    peer = bd.Run(5.0, {"conv": 3.0, "elementwise": 3.5})
    shares = bd.gap_shares(ours, peer)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["conv"] == pytest.approx(0.6)
    assert shares["elementwise"] == pytest.approx(-0.1)  # graphopt faster there
    assert shares[bd.OVERHEAD] == pytest.approx((1.0 - -1.5) / 5)  # 10-9 vs 5-6.5
    assert bd.top_share(shares) == ("conv", pytest.approx(0.6))


def test_mean_run_aggregates_per_category():
    runs = [bd.Run(1.0, {"conv": 0.5}, {"Conv": 0.5}),
            bd.Run(3.0, {"conv": 1.5, "other": 1.0}, {"Conv": 1.5, "X": 1.0}),
            bd.Run(2.0, {"conv": 1.0}, {"Conv": 1.0})]
    mean = bd.mean_run(runs)
    assert mean.total_s == pytest.approx(2.0)
    assert mean.categories == pytest.approx({"conv": 1.0, "other": 1 / 3})


def test_central_run_drops_the_outer_quarters_and_its_parts_add_up():
    runs = [bd.Run(t, {"conv": t * 0.6, "elementwise": t * 0.3}) for t in
            (1.0, 1.1, 1.2, 1.3, 9.0, 0.1, 1.15, 1.25)]
    mid = bd.central_run(runs)
    kept = sorted(runs, key=lambda r: r.parts_s)[2:6]  # the slow 9.0 and fast 0.1 go
    assert mid.total_s == pytest.approx(sum(r.total_s for r in kept) / 4)
    assert mid.parts_s == pytest.approx(sum(r.parts_s for r in kept) / 4)
    assert mid.parts_s <= mid.total_s
    assert bd.central_run(runs, total_s=5.0).total_s == 5.0
    assert bd.central([3.0, 1.0, 100.0, 2.0]) == pytest.approx(2.5)


def test_torch_profiler_view_sees_the_library_calls():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    x = torch.randn(8, 16)
    run = bd.aten_self_times(model, x, calls=2)
    assert any("linear" in op or "addmm" in op for op in run.ops)
    assert 0 < run.parts_s
    assert set(run.categories) == {"torch op"}


def test_convs_are_named_by_kind_on_both_sides():
    assert bd.conv_kind((96, 1, 5, 5)) == "depthwise"
    assert bd.conv_kind((576, 96, 1, 1)) == "1x1"
    assert bd.conv_kind((16, 3, 3, 3)) == "kxk"
    model = nn.Sequential(nn.Conv2d(8, 8, 3, groups=8), nn.Conv2d(8, 16, 1),
                          nn.Conv2d(16, 4, 3)).eval()
    gm = graphopt.capture(model, torch.randn(1, 8, 9, 9))
    names = sorted(o for c, o in bd.node_labels(gm).values() if c == "conv")
    assert names == ["conv2d [1x1]", "conv2d [depthwise]", "conv2d [kxk]"]
    event = {"cat": "Node", "name": "c_kernel_time", "ts": 1, "dur": 4,
             "args": {"op_name": "Conv", "input_type_shape": [
                 {"float": [1, 8, 9, 9]}, {"float": [8, 1, 3, 3]}]}}
    run, = ort_profile.ort_runs([{"name": "model_run", "ts": 0, "dur": 10}, event])
    assert run.ops == pytest.approx({"Conv [depthwise]": 4e-6})
    assert bd.by_conv_kind(run) == pytest.approx({"depthwise": 4e-6})
