"""This machine's own limits, measured in the same run as the kernels (chapter 6).

A kernel is compared with the roofs of the machine it ran on, not with a datasheet:
copy bandwidth (the memory roof) and matmul throughput (the practical compute roof).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .report import Timing
from .timing import time_fn


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
