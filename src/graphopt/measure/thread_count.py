"""Equal threads for both sides of a race: torch and numba together (chapter 6).

A numba kernel on 2 threads against torch on 1 is a thread race, not a kernel race,
so every timing sets both counts and says the count it used.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import torch


def _numba():
    """numba if this process already uses it (importing it just to set threads
    would cost half a second in every chapter that never compiles a kernel)."""
    return sys.modules.get("numba")


def set_threads(n: int) -> int:
    """Set torch's and (if loaded) numba's thread count; returns the count set."""
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
        yield set_threads(n or old_torch)
    finally:
        torch.set_num_threads(old_torch)
        nb = _numba()
        if nb is not None:
            nb.set_num_threads(old_numba or min(old_torch,
                                                nb.config.NUMBA_NUM_THREADS))
