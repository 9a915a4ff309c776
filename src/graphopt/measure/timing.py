"""The book's one timing method: `compare` (and `time_fn`, its one-function form).

Introduced in chapter 2, explained in chapter 6. Every function is warmed up, then
timed in blocks of calls, round after round, in an order rotated each round, with
torch and numba on the same thread count (the rules are listed in `measure`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Callable

import torch

from ..errors import InputError
from .conditions import load_average
from .report import Comparison, Timing, from_times
from .thread_count import set_threads
from .thread_count import threads as threads_ctx  # `compare` has a parameter threads


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
    device = device or device_of(args)
    order: list[tuple[int, str]] = []
    raw: dict[str, list[float]] = {label: [] for label in fns}
    load_before = load_average()
    with threads_ctx(threads) as n:
        for fn in fns.values():
            for _ in range(warmup):
                fn(*args)
        n = set_threads(n)  # a warm-up may have imported numba: set it too
        sync(device)
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
    timings = {k: from_times(k, v, device, n) for k, v in raw.items()}
    return Comparison(timings, order, n, device, (load_before, load_average()))


def time_fn(fn: Callable, *args, label: str | None = None, min_run_time: float = 0.2,
            warmup: int = 2, device: str | None = None, rounds: int = 15,
            threads: int | None = None) -> Timing:
    """Median time of fn(*args): `compare` with one function (same method)."""
    label = label or getattr(fn, "__name__", "fn")
    return compare({label: fn}, *args, rounds=rounds, warmup=warmup,
                   min_run_time=min_run_time, threads=threads, device=device)[label]


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
    sync(device)
    start = time.perf_counter()
    for _ in range(number):
        fn(*args)
    sync(device)
    return time.perf_counter() - start


def _block_size(fn, args, target: float, device: str) -> int:
    """Calls per block so one block lasts about `target` seconds (1 to 10000):
    a timer reads in ~50 ns steps, a block of microsecond calls needs many."""
    one = _run_block(fn, args, 1, device)
    return max(1, min(10_000, int(target / max(one, 1e-9))))


def device_of(args) -> str:
    """The device of the first tensor among `args` ('cpu' when there is none)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def sync(device: str) -> None:
    """Wait for queued GPU work (a CPU call has finished when it returns)."""
    if device == "cuda":
        torch.cuda.synchronize()
