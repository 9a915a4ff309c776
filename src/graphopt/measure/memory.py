"""Peak memory of a run: the allocator's counter on a GPU, the interpreter's on a CPU.

Introduced in chapter 1 (`graphopt.run` counts live bytes), used in chapters 3-6.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..errors import InputError
from .timing import device_of


def peak_memory(fn: Callable, *args) -> int:
    """Peak bytes while running fn(*args) (weights excluded where they can be).

    CUDA: the caching allocator's peak above what was allocated before the call.
    CPU: there is no allocator counter, so fn must be a GraphModule and the answer is
    the interpreter's exact live-bytes count (graphopt.run(gm, *args).peak_bytes).
    """
    if device_of(args) == "cuda":
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
    from ..interpret import run
    return run(fn, *args).peak_bytes


def _input_bytes(args) -> int:
    return sum(a.numel() * a.element_size() for a in args
               if isinstance(a, torch.Tensor))
