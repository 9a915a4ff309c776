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

One file per concept:

    report.py         Timing and Comparison: median, IQR, verdicts; fmt_time
    thread_count.py   threads(n): torch and numba on the same thread count
    timing.py         compare and time_fn: warm-up, interleaved rotated rounds
    gpu.py            time_cuda_events, and time_unsynchronized (the wrong way)
    memory.py         peak_memory
    conditions.py     where a time was measured: device_name, CPU, threads, load
    limits.py         this machine's roofs: copy_bandwidth, matmul_gflops
    roofline_model.py KernelPoint, attainable_gflops, the roofline plot
    perf_model.py     the performance model: predict a kernel, a node, a run
    progress.py       Progress: a one-line counter for long measurements
    recorded.py       a run saved in benchmarks/results/, shown beside a live one
"""

from .conditions import device_name
from .gpu import time_cuda_events, time_unsynchronized
from .limits import Bandwidth, copy_bandwidth, matmul_gflops
from .memory import peak_memory
from .progress import Progress
from .report import Comparison, Timing, fmt_time
from .roofline_model import KernelPoint, attainable_gflops, roofline
from .thread_count import threads
from .timing import compare, time_fn

__all__ = ["Bandwidth", "Comparison", "KernelPoint", "Progress", "Timing",
           "attainable_gflops", "compare", "copy_bandwidth", "device_name",
           "fmt_time", "matmul_gflops", "peak_memory", "roofline", "threads",
           "time_cuda_events", "time_fn", "time_unsynchronized"]
