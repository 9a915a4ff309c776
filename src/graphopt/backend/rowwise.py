"""LayerNorm+Add as one CPU row kernel, compiled with numba (chapter 4).

    out[r, :] = layer_norm(a[r, :] + b[r, :]) * weight + bias

Each row is read from memory once. The first sweep over a row adds a and b and
gathers its mean and variance (Welford's one-pass update, or a sum then a sum of
squared deviations over the row while it sits in the L1 cache: both avoid the
cancellation of the sum-of-squares formula); the last sweep writes the normalised
values. The sum a + b never reaches memory: the kernel reads a, b, weight, bias and
writes out, one launch, where eager writes the sum and reads it back.
"""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import torch


@functools.cache
def _numba_installed() -> bool:
    """Asked once: `find_spec` searches sys.path on every call until numba is
    imported (76 us a call on a Whisper encoder whose rows never reach the kernel)."""
    return importlib.util.find_spec("numba") is not None


def usable(a, b, weight, bias) -> bool:
    """float32 CPU rows of equal shape, contiguous, no autograd: the kernel's domain.
    Chapter 4."""
    if not _numba_installed():
        return False
    ts = [t for t in (a, b, weight, bias) if t is not None]
    return (a.shape == b.shape and a.dim() >= 1 and a.numel() > 0
            and all(t.device.type == "cpu" and t.dtype is torch.float32
                    and t.is_contiguous() for t in ts)
            and all(t.shape == a.shape[-1:] for t in (weight, bias) if t is not None)
            and not (torch.is_grad_enabled() and any(t.requires_grad for t in ts)))


_EMPTY = np.zeros(1, dtype=np.float32)


def row_blocks(numel: int, rows: int, parallel_numel: int) -> int:
    """How many blocks of rows the kernel runs, one per thread; 1: serial. Split
    from `parallel_numel` elements, with two rows or more and two threads or more
    (the rule `Policy.rows_parallel` gives generated row kernels). On one thread
    numba's pool would still hand the loop to a worker thread and wait for it.
    Chapter 6."""
    if numel < parallel_numel or rows < 2:
        return 1
    import numba  # loaded: the kernels' module imported it

    return min(rows, numba.get_num_threads())


def add_layer_norm(a, b, weight, bias, eps: float, out=None, welford: bool = False,
                   *, parallel_numel: int) -> torch.Tensor:
    """layer_norm(a + b) over the last dimension, one kernel launch; the rows are
    split over threads from `parallel_numel` elements (the kernel policy's
    `row_parallel_numel`, which the backend stage binds on the module) when there
    are two threads or more (`row_blocks`). Chapter 4."""
    from . import rowwise_numba as k

    n = a.shape[-1]
    out = torch.empty_like(a) if out is None else out
    rows = a.numel() // n
    blocks = row_blocks(a.numel(), rows, parallel_numel)
    args = (a.view(-1).numpy(), b.view(-1).numpy(),
            _EMPTY if weight is None else weight.detach().numpy(),
            _EMPTY if bias is None else bias.detach().numpy(),
            out.view(-1).numpy(), rows, n, np.float32(eps),
            weight is not None, bias is not None, welford)
    if blocks > 1:
        k.rows_parallel(*args, blocks)
    else:
        k.rows_serial(*args)
    return out

