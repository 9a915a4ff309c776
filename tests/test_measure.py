"""graphopt.measure: timing statistics, peak memory, machine limits, roofline (ch. 6).

Timings are never asserted against thresholds; only structure and exact counts.
"""

import io
import pathlib
import re

import matplotlib
import pytest
import torch

import graphopt
from graphopt import measure
from graphopt.errors import InputError, NoGPUError

matplotlib.use("Agg")


def test_time_fn_reports_median_and_spread():
    x = torch.randn(1000)
    t = measure.time_fn(torch.relu, x, min_run_time=0.01, label="relu", rounds=7)
    assert t.label == "relu" and t.device == "cpu" and t.rounds == 7
    assert t.q1 <= t.median <= t.q3 and t.iqr == pytest.approx(t.q3 - t.q1)
    assert t.threads == torch.get_num_threads()
    text = repr(t)
    assert text.startswith("relu: median ") and "(IQR " in text
    assert f"7 rounds, {t.threads} threads)" in text and "0x" not in text


def _counting(calls, name):
    def fn():
        calls.append(name)
    return fn


def test_compare_interleaves_rounds_and_rotates_the_start():
    calls = []
    fns = {k: _counting(calls, k) for k in "abc"}
    cmp = measure.compare(fns, rounds=4, warmup=1, number=2)
    expected = [(0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"),
                (2, "c"), (2, "a"), (2, "b"), (3, "a"), (3, "b"), (3, "c")]
    assert cmp.order == expected
    # warm-up (one call each), then blocks of 2 calls in exactly that order
    assert calls == list("abc") + [k for _, k in expected for _ in range(2)]
    assert set(cmp) == set("abc") and all(cmp[k].rounds == 4 for k in cmp)


def test_compare_result_structure_is_deterministic():
    x = torch.randn(64)
    shapes = []
    for _ in range(2):
        cmp = measure.compare([torch.relu, torch.abs], x, rounds=5, min_run_time=0.01)
        shapes.append((list(cmp), [cmp[k].rounds for k in cmp], cmp.threads,
                       [label for _, label in cmp.order]))
    assert shapes[0] == shapes[1]
    assert shapes[0][0] == ["relu", "abs"]


def test_compare_sets_equal_threads_and_restores_them():
    before = torch.get_num_threads()
    seen = []
    measure.compare({"f": lambda: seen.append(torch.get_num_threads())},
                    rounds=2, warmup=1, number=1, threads=1)
    assert seen == [1, 1, 1] and torch.get_num_threads() == before


def test_threads_sets_numba_too_and_restores_it():
    numba = pytest.importorskip("numba")
    before = (torch.get_num_threads(), numba.get_num_threads())
    with measure.threads(1) as n:
        assert n == 1 and torch.get_num_threads() == numba.get_num_threads() == 1
    assert (torch.get_num_threads(), numba.get_num_threads()) == before


def test_verdict_says_within_noise_when_the_ranges_overlap():
    def timing(label, q1, med, q3):
        return measure.Timing(label, med, q3 - q1, [q1, med, q3], "cpu", 2, q1, q3)

    cmp = measure.Comparison({"a": timing("a", 1.0, 1.1, 1.3),
                              "b": timing("b", 1.2, 1.25, 1.4),
                              "c": timing("c", 2.0, 2.2, 2.4)}, [], 2)
    assert cmp.below_noise("a", "b") and "within noise" in cmp.verdict("a", "b")
    assert not cmp.below_noise("a", "c")
    assert cmp.verdict("a", "c") == "a ran 2x faster than c"
    assert cmp.verdict("c", "a") == "c ran 2x slower than a"
    assert cmp.ratio("c", "a") == pytest.approx(2.0)


def test_compare_refuses_two_functions_with_one_name():
    with pytest.raises(InputError, match="dict"):
        measure.compare([lambda: 1, lambda: 2], rounds=1)


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


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_prints_one_line_on_a_terminal_only(monkeypatch):
    monkeypatch.delenv("GRAPHOPT_QUIET", raising=False)
    out, saved = _Tty(), io.StringIO()
    for stream in (out, saved):
        prog = measure.Progress(3, "bench", stream=stream)
        for name in "abc":
            prog.step(name)
    text = out.getvalue()
    assert text.count("\n") == 1 and "bench: 3/3 c" in text
    assert saved.getvalue() == ""  # a notebook's saved output stays clean


def test_package_keeps_its_api_and_small_files():
    """One concept per file (STYLE.md): every file under 300 lines of at most 88
    characters, a docstring naming its chapter; every public name importable."""
    for name in measure.__all__:
        assert getattr(measure, name).__module__.startswith("graphopt.measure."), name
    folder = pathlib.Path(measure.__file__).parent
    files = sorted(folder.glob("*.py"))
    assert len(files) > 5
    for path in files:
        lines = path.read_text().splitlines()
        assert len(lines) < 300 and max(map(len, lines)) <= 88, path.name
        doc = path.read_text().split('"""')[1]
        assert re.search(r"\b(chapter|ch\.) \d", doc), path.name
