"""measure.py: timing statistics, peak memory, machine limits, roofline (chapter 6).

Timings are never asserted against thresholds; only structure and exact counts.
"""

import io

import matplotlib
import pytest
import torch

import graphopt
from graphopt import measure
from graphopt.errors import InputError, NoGPUError

matplotlib.use("Agg")


def test_time_fn_reports_median_and_spread():
    x = torch.randn(1000)
    t = measure.time_fn(torch.relu, x, min_run_time=0.01, label="relu")
    assert t.label == "relu" and t.device == "cpu"
    assert t.median > 0 and t.iqr >= 0 and len(t.times) >= 1
    assert "relu:" in str(t) and "(cpu)" in str(t)


def test_unsynchronized_timing_uses_quantiles_of_its_runs():
    calls = []
    t = measure.time_unsynchronized(lambda: calls.append(1), repeats=9, warmup=2)
    assert len(calls) == 11 and len(t.times) == 9
    ordered = sorted(t.times)
    assert t.median == pytest.approx(ordered[4])


def test_cuda_events_need_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoGPUError):
        measure.time_cuda_events(torch.relu, torch.randn(3))


def test_cpu_peak_memory_is_the_interpreters_exact_count():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 2) + 1

    x = torch.randn(256, 256)
    gm = graphopt.capture(M(), x)
    assert measure.peak_memory(gm, x) == graphopt.run(gm, x).peak_bytes
    with pytest.raises(InputError, match="GraphModule"):
        measure.peak_memory(M(), x)


def test_copy_bandwidth_counts_read_and_write():
    bw = measure.copy_bandwidth(1 << 16, min_run_time=0.01)
    assert bw.nbytes == 2 * 4 * (1 << 16)
    assert bw.gbps == pytest.approx(bw.nbytes / bw.timing.best / 1e9)
    assert bw.timing.best <= bw.timing.median


def test_kernel_point_and_roofline():
    p = measure.KernelPoint("fused chain", flops=8e6, nbytes=8e6, seconds=1e-3)
    assert (p.intensity, p.gflops, p.gbps) == (1.0, 8.0, 8.0)
    assert measure.attainable_gflops(0.1, 20.0, 100.0) == pytest.approx(2.0)
    assert measure.attainable_gflops(100.0, 20.0, 100.0) == 100.0
    fig = measure.roofline([p], bandwidth_gbps=20.0, peak_gflops=100.0,
                           device="Test CPU")
    assert "Test CPU" in fig.axes[0].get_title()
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("fused chain" in s for s in labels)


def test_progress_prints_one_line():
    out = io.StringIO()
    prog = measure.Progress(3, "bench", stream=out)
    for name in "abc":
        prog.step(name)
    text = out.getvalue()
    assert text.count("\n") == 1 and "bench: 3/3 c" in text
