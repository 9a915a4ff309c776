"""The explorer's GPU numbers: a predicted GPU time everywhere, measured ones on a GPU.

Without a GPU each stage shows the CPU's measured time, the interpreter's exact peak
and the time the book's performance model predicts for an H100 from the stage's own
counts, labelled "a model, not a measurement"; toggling a pass moves it. With a GPU (the last test,
skipped here) the stage's time comes from the GPU and its memory from the CUDA
caching allocator.
"""

import pytest
import torch
from torch import nn

import graphopt
from graphopt.explorer import Engine, plots
from graphopt.explorer.engine import PREDICTED_GPU
from graphopt.explorer.static import StaticExplorer
from graphopt.measure.perf_model import GPUS, predict_run


class Chain(nn.Module):
    def forward(self, x):
        return torch.relu(x * 1.5 + 0.5).abs() * 0.75 - 0.1


@pytest.fixture(scope="module")
def engine():
    return Engine(Chain(), (torch.randn(64, 256),), ["fuse_elementwise", "lower"])


def test_each_stage_carries_the_models_prediction(engine):
    for combo in ((), ("fuse_elementwise",), ("fuse_elementwise", "lower")):
        r = engine.result(combo)
        report = graphopt.run(r.module, *engine.inputs)
        want = predict_run(GPUS[PREDICTED_GPU], r.module, report).seconds
        assert r.predicted == pytest.approx(want, rel=1e-9)


def test_toggling_a_pass_moves_the_prediction(engine):
    base, fused = engine.result(()), engine.result(["fuse_elementwise", "lower"])
    # five launches become one: on a GPU the fixed costs dominate this small chain
    assert fused.kernels < base.kernels
    assert fused.predicted < base.predicted
    nums = plots.numbers(engine, ["fuse_elementwise", "lower"])
    assert nums["predicted"] == (base.predicted, fused.predicted)
    assert nums["cuda_peak"] == (None, None)  # no GPU measured: no allocator numbers


def test_the_table_labels_the_prediction_and_shows_no_allocator_row(engine):
    nums = plots.numbers(engine, ["fuse_elementwise", "lower"])
    table = plots.numbers_html(nums)
    assert (f"time predicted for an {PREDICTED_GPU} (a model, not a measurement) (µs)"
            in table)
    assert "CUDA allocator" not in table
    assert plots.plot_png(nums).startswith(b"\x89PNG")
    zh = plots.numbers_html(nums, "zh")
    assert plots.ROWS_ZH["predicted"] in zh


def test_a_gpu_run_adds_the_allocators_peak():
    nums = {"time": (2e-4, 1e-4), "predicted": (3e-5, 1e-5),
            "cuda_peak": (3 * 2**20, 2**20), "bytes_moved": (4096, 1024),
            "kernels": (5, 1), "peak_bytes": (2048, 1024), "nodes": (5, 1),
            "io_nodes": (2, 2), "within_noise": False, "noise": 0.05, "rounds": 9,
            "threads": 1}
    table = plots.numbers_html(nums)
    assert "peak memory, CUDA allocator (MiB)" in table
    assert plots.units(nums)["cuda_peak"] == ("MiB", 2**20)
    assert plots.plot_png(nums).startswith(b"\x89PNG")


def test_the_static_explorer_carries_the_predicted_series():
    data = StaticExplorer(Chain(), torch.randn(64, 256), measure=False,
                          passes=["fuse_elementwise", "lower"]).data
    assert all(c["predicted"] > 0 for c in data["combos"])
    assert len({c["predicted"] for c in data["combos"]}) > 1  # it moves
    assert data["units"]["predicted"][0] in ("µs", "ms", "s")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_time_and_memory_come_from_the_gpu(engine):
    engine.measure_all([(), ("fuse_elementwise", "lower")], "cuda", budget_s=0.05)
    nums = plots.numbers(engine, ["fuse_elementwise", "lower"], "cuda")
    assert all(t > 0 for t in nums["time"])
    assert all(p >= engine.inputs[0].nbytes for p in nums["cuda_peak"])
