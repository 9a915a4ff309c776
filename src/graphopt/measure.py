"""Measurement done right: timing, peak memory, this machine's limits, a roofline.

Introduced in chapter 6. Rules the functions follow, and why:

- warm up first (lazy initialisation, numba compilation, caches), then repeat and
  report the median and the spread (interquartile range), never a single run;
- on a GPU, kernels launch asynchronously: synchronise, or time with CUDA events, or
  you measure how fast Python can *queue* work (`time_unsynchronized` shows this);
- compare a kernel with the machine's own limits measured in the same run (copy
  bandwidth, matmul throughput), not with a datasheet.

Timing uses `torch.utils.benchmark.Timer`, which warms up, picks a block size and
synchronises CUDA for us.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
import torch.utils.benchmark as tbench

from .errors import InputError, NoGPUError


@dataclass
class Timing:
    """Median and spread of repeated runs of one function (seconds)."""

    label: str
    median: float
    iqr: float
    times: list[float] = field(repr=False)
    device: str = "cpu"

    @property
    def best(self) -> float:
        """The fastest run: what the machine can do when nothing gets in the way."""
        return min(self.times) if self.times else self.median

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = 5 %)."""
        return self.iqr / self.median if self.median else 0.0

    def __str__(self) -> str:
        return (f"{self.label}: {fmt_time(self.median)} ± {self.spread:.0%} "
                f"({self.device})")


def fmt_time(seconds: float) -> str:
    """0.00123 -> '1.23 ms'."""
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _device_of(args) -> str:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def time_fn(fn: Callable, *args, label: str | None = None, min_run_time: float = 0.2,
            warmup: int = 2, device: str | None = None) -> Timing:
    """Median time of fn(*args) with warm-up, via torch.utils.benchmark (syncs CUDA)."""
    device = device or _device_of(args)
    for _ in range(warmup):
        fn(*args)
    _sync(device)
    timer = tbench.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args},
                         num_threads=torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return Timing(label or getattr(fn, "__name__", "fn"), m.median, m.iqr,
                  list(m.times), device)


def time_cuda_events(fn: Callable, *args, repeats: int = 20, warmup: int = 3,
                     label: str | None = None) -> Timing:
    """GPU time of fn(*args) from CUDA events recorded around each call."""
    if not torch.cuda.is_available():
        raise NoGPUError("time_cuda_events needs CUDA; use time_fn on the CPU.")
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()  # wait for the GPU to reach `end`
        times.append(start.elapsed_time(end) / 1e3)
    return _from_times(label or getattr(fn, "__name__", "fn"), times, "cuda")


def time_unsynchronized(fn: Callable, *args, repeats: int = 20, warmup: int = 3,
                        label: str | None = None) -> Timing:
    """The WRONG way on a GPU: wall time around calls with no synchronisation.

    CUDA calls return as soon as the kernel is queued, so this reports launch cost,
    not kernel time (on a CPU it agrees with `time_fn`). Chapter 6 shows the gap.
    """
    device = _device_of(args)
    for _ in range(warmup):
        fn(*args)
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    _sync(device)  # drain the queue so the next measurement starts clean
    return _from_times(label or getattr(fn, "__name__", "fn"), times, device)


def _from_times(label: str, times: list[float], device: str) -> Timing:
    t = torch.tensor(times, dtype=torch.float64)
    q = torch.quantile(t, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return Timing(label, float(q[1]), float(q[2] - q[0]), times, device)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------- memory

def peak_memory(fn: Callable, *args) -> int:
    """Peak bytes while running fn(*args) (weights excluded where they can be).

    CUDA: the caching allocator's peak above what was allocated before the call.
    CPU: there is no allocator counter, so fn must be a GraphModule and the answer is
    the interpreter's exact live-bytes count (graphopt.run(gm, *args).peak_bytes).
    """
    if _device_of(args) == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            fn(*args)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base + _input_bytes(args)
    if not isinstance(fn, torch.fx.GraphModule):
        raise InputError("On the CPU peak memory is counted by graphopt's interpreter: "
                         "pass a GraphModule (gm = graphopt.capture(model, *inputs)).")
    from .interpret import run
    return run(fn, *args).peak_bytes


def _input_bytes(args) -> int:
    return sum(a.numel() * a.element_size() for a in args
               if isinstance(a, torch.Tensor))


# ---------------------------------------------------------------- machine limits

def device_name(device: str = "cpu") -> str:
    """A human name for the device that produced a measurement (for plot titles)."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f
                     if ln.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    return f"{model} ({torch.get_num_threads()} threads)"


@dataclass
class Bandwidth:
    """Copy bandwidth: bytes read plus bytes written per second (of the best run)."""

    gbps: float
    timing: Timing
    nbytes: int


def copy_bandwidth(numel: int = 1 << 26, device: str = "cpu",
                   dtype: torch.dtype = torch.float32, min_run_time: float = 0.3,
                   copy: Callable | None = None) -> Bandwidth:
    """Measure dst.copy_(src) into a preallocated tensor; counts read + write bytes.

    64M float32 (256 MiB each) is far larger than any cache, so this is the memory
    system's speed. The destination is allocated and touched once before timing:
    a fresh allocation would add page faults to the first pass. A roof is a limit,
    so the fastest run counts, not the median: on a shared machine the median also
    measures the neighbours.
    """
    src = torch.randn(numel, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    copy = copy or (lambda d, s: d.copy_(s))  # or another loop, e.g. a generated one
    copy(dst, src)
    timing = time_fn(copy, dst, src, label="copy", min_run_time=min_run_time,
                     device=device)
    nbytes = 2 * src.numel() * src.element_size()
    return Bandwidth(nbytes / timing.best / 1e9, timing, nbytes)


def matmul_gflops(n: int | None = None, device: str = "cpu",
                  dtype: torch.dtype = torch.float32,
                  min_run_time: float = 0.3) -> float:
    """Measured matmul throughput (GFLOP/s, fastest run): the practical compute roof."""
    n = n or (4096 if device == "cuda" else 1024)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b, c = torch.randn_like(a), torch.empty_like(a)
    timing = time_fn(lambda: torch.mm(a, b, out=c), min_run_time=min_run_time,
                     device=device)
    return 2 * n ** 3 / timing.best / 1e9


# ---------------------------------------------------------------- roofline

@dataclass
class KernelPoint:
    """One measured kernel: its work (FLOPs), its traffic (bytes) and its time."""

    name: str
    flops: float
    nbytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.nbytes

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def gbps(self) -> float:
        return self.nbytes / self.seconds / 1e9


def attainable_gflops(intensity: float, bandwidth_gbps: float,
                      peak_gflops: float) -> float:
    """The roofline: min(compute roof, intensity x memory bandwidth)."""
    return min(peak_gflops, intensity * bandwidth_gbps)


def roofline(points: Iterable[KernelPoint], bandwidth_gbps: float, peak_gflops: float,
             device: str, ax=None):
    """Plot kernels on this machine's roofline; returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    points = list(points)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    xs = [p.intensity for p in points] + [peak_gflops / bandwidth_gbps]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    ax.plot(grid, [attainable_gflops(x, bandwidth_gbps, peak_gflops) for x in grid],
            color="black", lw=1.5,
            label=f"roof: copy {bandwidth_gbps:.0f} GB/s, "
                  f"matmul {peak_gflops:.0f} GFLOP/s")
    for i, p in enumerate(points):
        ax.scatter([p.intensity], [p.gflops], s=40, zorder=3, color=f"C{i % 10}",
                   label=f"{p.name} ({p.gbps:.3g} GB/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(f"Roofline of {device}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return ax.figure


# ---------------------------------------------------------------- progress

class Progress:
    """A one-line progress counter for long measurements (no tqdm needed).

    Prints `label: 3/8 name` updates on one line (stderr) and a final newline, so a
    notebook cell shows a single line that can be ignored by nbval.
    """

    def __init__(self, total: int, label: str = "measuring", stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()

    def step(self, name: str = "") -> None:
        self.done += 1
        end = "\n" if self.done == self.total else ""
        elapsed = time.perf_counter() - self.start
        self.stream.write(f"\r{self.label}: {self.done}/{self.total} {name:<28}"
                          f" {elapsed:5.1f} s{end}")
        self.stream.flush()


def quiet() -> bool:
    """True when progress output is unwanted (GRAPHOPT_QUIET=1)."""
    return os.environ.get("GRAPHOPT_QUIET", "0") not in ("", "0")


__all__ = ["Bandwidth", "KernelPoint", "Progress", "Timing", "attainable_gflops",
           "copy_bandwidth", "device_name", "fmt_time", "matmul_gflops", "peak_memory",
           "roofline", "time_cuda_events", "time_fn", "time_unsynchronized"]
