"""Measurement done right: timing, peak memory, this machine's limits, a roofline.

Used from chapter 2 on, explained in chapter 6. Every time in the book comes from
ONE method, `compare` (and `time_fn`, its one-function form), because each rule
below removes an error that has fooled this book's own drafts:

- warm up every function first (lazy initialisation, numba compilation, caches);
- interleave: round r runs every function once (a block of calls each), in an order
  rotated by r, so a neighbour's burst of load or a CPU clock change hits all of
  them alike instead of whichever happened to be timed second;
- report the median of the rounds and its spread (interquartile range), never a
  single run; two medians whose IQRs overlap are *within noise* (`below_noise`);
- run both sides with the same thread count, set for torch AND numba (a numba
  kernel on 2 threads against torch on 1 is a thread race, not a kernel race), and
  say the count in every result;
- on a GPU, kernels launch asynchronously: synchronise, or time with CUDA events, or
  you measure how fast Python can *queue* work (`time_unsynchronized` shows this);
- compare a kernel with the machine's own limits measured in the same run (copy
  bandwidth, matmul throughput), not with a datasheet.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from .errors import InputError, NoGPUError


@dataclass
class Timing:
    """Median and spread of repeated runs of one function (seconds per call)."""

    label: str
    median: float
    iqr: float
    times: list[float] = field(repr=False)
    device: str = "cpu"
    threads: int | None = None  # torch (and numba) threads the runs used
    q1: float | None = None  # first and third quartiles of `times`
    q3: float | None = None

    @property
    def best(self) -> float:
        """The fastest run: what the machine can do when nothing gets in the way."""
        return min(self.times) if self.times else self.median

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = 5 %)."""
        return self.iqr / self.median if self.median else 0.0

    @property
    def rounds(self) -> int:
        return len(self.times)

    def __str__(self) -> str:
        lo = self.q1 if self.q1 is not None else self.median - self.iqr / 2
        hi = self.q3 if self.q3 is not None else self.median + self.iqr / 2
        unit, scale = _unit(self.median)
        plural = "" if self.threads == 1 else "s"
        threads = f", {self.threads} thread{plural}" if self.threads else ""
        device = "" if self.device == "cpu" else f", {self.device}"
        return (f"{self.label}: median {self.median / scale:.3g} {unit} "
                f"(IQR {lo / scale:.3g}-{hi / scale:.3g}, {self.rounds} rounds"
                f"{threads}{device})")

    __repr__ = __str__


def _unit(seconds: float) -> tuple[str, float]:
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return unit, scale
    return "ns", 1e-9


def fmt_time(seconds: float) -> str:
    """0.00123 -> '1.23 ms'."""
    unit, scale = _unit(seconds)
    return f"{seconds / scale:.3g} {unit}"


def _device_of(args) -> str:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


# ---------------------------------------------------------------- threads

def _numba():
    """numba if this process already uses it (importing it just to set threads
    would cost half a second in every chapter that never compiles a kernel)."""
    return sys.modules.get("numba")


def _set_threads(n: int) -> int:
    nb = _numba()
    if nb is not None:
        n = min(n, nb.config.NUMBA_NUM_THREADS)
        nb.set_num_threads(n)
    torch.set_num_threads(n)
    return n


@contextmanager
def threads(n: int | None = None):
    """Run torch and numba on the same `n` threads (default: torch's current
    count); yields the count used and restores both counts afterwards."""
    nb = _numba()
    old_torch = torch.get_num_threads()
    old_numba = nb.get_num_threads() if nb is not None else None
    try:
        yield _set_threads(n or old_torch)
    finally:
        torch.set_num_threads(old_torch)
        nb = _numba()
        if nb is not None:
            nb.set_num_threads(old_numba or min(old_torch,
                                                nb.config.NUMBA_NUM_THREADS))


# ---------------------------------------------------------------- timing

class Comparison(Mapping):
    """Timings of several functions measured in the same interleaved rounds.

    `cmp["fused"]` is a `Timing`; `order` lists (round, label) in the order the
    blocks ran; `verdict(a, b)` is a sentence a notebook can print.
    """

    def __init__(self, timings: dict[str, Timing], order: list[tuple[int, str]],
                 threads: int):
        self.timings, self.order, self.threads = timings, order, threads

    def __getitem__(self, label: str) -> Timing:
        return self.timings[label]

    def __iter__(self):
        return iter(self.timings)

    def __len__(self) -> int:
        return len(self.timings)

    def ratio(self, slow: str, fast: str) -> float:
        """How many times faster `fast` ran than `slow` (ratio of medians)."""
        return self[slow].median / self[fast].median

    def below_noise(self, a: str, b: str) -> bool:
        """True when the two interquartile ranges overlap: the measurement cannot
        tell the two apart, whatever the medians say."""
        ta, tb = self[a], self[b]
        return ta.q1 <= tb.q3 and tb.q1 <= ta.q3

    def verdict(self, a: str, b: str) -> str:
        """'a ran 2.3x faster than b' or 'a and b are within noise here ...'."""
        r = self.ratio(b, a)
        if self.below_noise(a, b):
            return (f"{a} and {b} are within noise here (medians differ by "
                    f"{abs(r - 1):.0%}, their interquartile ranges overlap)")
        if r >= 1:
            return f"{a} ran {r:.2g}x faster than {b}"
        return f"{a} ran {1 / r:.2g}x slower than {b}"

    def __str__(self) -> str:
        return "\n".join(str(t) for t in self.timings.values())

    __repr__ = __str__


def compare(fns, *args, rounds: int = 15, warmup: int = 2,
            min_run_time: float = 0.2, threads: int | None = None,
            number: int | None = None, device: str | None = None) -> Comparison:
    """Time each function on `args` in `rounds` interleaved rounds.

    `fns` is a dict {label: fn} or a list of functions (labelled by __name__).
    Each function is warmed up, then given a block size (`number` calls, or as
    many as fill min_run_time / (rounds x functions)); round r runs one block of
    each, starting at function r mod n. Times are seconds per call.
    """
    fns = _labelled(fns)
    device = device or _device_of(args)
    order: list[tuple[int, str]] = []
    raw: dict[str, list[float]] = {label: [] for label in fns}
    with threads_ctx(threads) as n:
        for fn in fns.values():
            for _ in range(warmup):
                fn(*args)
        n = _set_threads(n)  # a warm-up may have imported numba: set it too
        _sync(device)
        target = min_run_time / (rounds * len(fns))
        blocks = {k: number or _block_size(f, args, target, device)
                  for k, f in fns.items()}
        labels = list(fns)
        for r in range(rounds):
            for i in range(len(labels)):
                label = labels[(r + i) % len(labels)]
                order.append((r, label))
                k = blocks[label]
                raw[label].append(_run_block(fns[label], args, k, device) / k)
    timings = {k: _from_times(k, v, device, n) for k, v in raw.items()}
    return Comparison(timings, order, n)


threads_ctx = threads  # `compare` has a parameter named threads


def _labelled(fns) -> dict[str, Callable]:
    if isinstance(fns, Mapping):
        return dict(fns)
    out = {}
    for fn in fns:
        out[getattr(fn, "__name__", f"fn{len(out)}")] = fn
    if len(out) != len(fns):
        raise InputError("compare: two functions share a name; pass a dict "
                         "{label: fn} instead.")
    return out


def _run_block(fn, args, number: int, device: str) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(number):
        fn(*args)
    _sync(device)
    return time.perf_counter() - start


def _block_size(fn, args, target: float, device: str) -> int:
    """Calls per block so one block lasts about `target` seconds (1 to 10000):
    a timer reads in ~50 ns steps, a block of microsecond calls needs many."""
    one = _run_block(fn, args, 1, device)
    return max(1, min(10_000, int(target / max(one, 1e-9))))


def time_fn(fn: Callable, *args, label: str | None = None, min_run_time: float = 0.2,
            warmup: int = 2, device: str | None = None, rounds: int = 15,
            threads: int | None = None) -> Timing:
    """Median time of fn(*args): `compare` with one function (same method)."""
    label = label or getattr(fn, "__name__", "fn")
    return compare({label: fn}, *args, rounds=rounds, warmup=warmup,
                   min_run_time=min_run_time, threads=threads, device=device)[label]


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


def _from_times(label: str, times: list[float], device: str,
                threads: int | None = None) -> Timing:
    if len(times) >= 2:
        q1, med, q3 = statistics.quantiles(times, n=4, method="inclusive")
    else:
        q1 = med = q3 = times[0]
    return Timing(label, med, q3 - q1, list(times), device,
                  threads or torch.get_num_threads(), q1, q3)


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

    On a terminal it rewrites `label: 3/8 name` on one line (stderr) and ends
    with a newline. Anywhere else (a notebook, a log file) it prints nothing:
    carriage-return updates would land in saved outputs as a pile of lines.
    """

    def __init__(self, total: int, label: str = "measuring", stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(isatty and isatty()) and not quiet()

    def step(self, name: str = "") -> None:
        self.done += 1
        if not self.live:
            return
        end = "\n" if self.done == self.total else ""
        elapsed = time.perf_counter() - self.start
        self.stream.write(f"\r{self.label}: {self.done}/{self.total} {name:<28}"
                          f" {elapsed:5.1f} s{end}")
        self.stream.flush()


def quiet() -> bool:
    """True when progress output is unwanted (GRAPHOPT_QUIET=1)."""
    return os.environ.get("GRAPHOPT_QUIET", "0") not in ("", "0")


__all__ = ["Bandwidth", "Comparison", "KernelPoint", "Progress", "Timing",
           "attainable_gflops", "compare", "copy_bandwidth", "device_name", "fmt_time", "matmul_gflops", "peak_memory",
           "roofline", "threads", "time_cuda_events", "time_fn", "time_unsynchronized"]
