"""Timing an asynchronous device: CUDA events, and the wrong way (chapter 6).

CUDA calls return as soon as the kernel is queued. `time_cuda_events` records
events around each call on the GPU itself; `time_unsynchronized` is the mistake,
kept so chapter 6 can print the gap between the two.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from ..errors import NoGPUError
from .report import Timing, from_times
from .timing import device_of, sync


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
    return from_times(label or getattr(fn, "__name__", "fn"), times, "cuda")


def time_unsynchronized(fn: Callable, *args, repeats: int = 20, warmup: int = 3,
                        label: str | None = None) -> Timing:
    """The WRONG way on a GPU: wall time around calls with no synchronisation.

    CUDA calls return as soon as the kernel is queued, so this reports launch cost,
    not kernel time (on a CPU it agrees with `time_fn`). Chapter 6 shows the gap.
    """
    device = device_of(args)
    for _ in range(warmup):
        fn(*args)
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    sync(device)  # drain the queue so the next measurement starts clean
    return from_times(label or getattr(fn, "__name__", "fn"), times, device)
