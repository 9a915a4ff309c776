"""Where a time was measured: the CPU, its thread count and its load (chapter 6).

A time means little without the machine that produced it. Every live table in the
book ends with `Comparison.conditions`: the processor, the threads torch and numba
used, and the 1-minute load average before and after the rounds (a load above the
core count means other work shared the cores, and the spreads say how much).
"""

from __future__ import annotations

import os
import platform

import torch

from ..i18n import ngettext


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
    n = torch.get_num_threads()
    return f"{model} ({n} thread{'' if n == 1 else 's'})"


def load_average() -> float | None:
    """The 1-minute load average (None where the system has none, e.g. Windows)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def describe(device: str, threads: int, loads: tuple[float | None, float | None],
             cores: int | None = None) -> str:
    """'AMD EPYC 7B13, 2 threads of 2 cores, load 0.4-1.1': one line for a table."""
    name = device_name(device).split(" (")[0]
    cores = cores or os.cpu_count()
    if device == "cpu" and None not in loads:
        return ngettext("{name}, {threads} thread of {cores} cores, load {low}-{high}",
                        "{name}, {threads} threads of {cores} cores, load {low}-{high}",
                        threads).format(name=name, threads=threads, cores=cores,
                                        low=f"{loads[0]:.1f}", high=f"{loads[1]:.1f}")
    return ngettext("{name}, {threads} thread of {cores} cores",
                    "{name}, {threads} threads of {cores} cores", threads).format(
        name=name, threads=threads, cores=cores)
