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


def split_rows(numel: int, rows: int, parallel_numel: int) -> bool:
    """Whether the rows go to numba's thread pool: from `parallel_numel` elements,
    with two rows or more and two threads or more (the rule `Policy.rows_parallel`
    gives generated row kernels). On one thread the pool still hands the loop to a
    worker thread and waits for it: a 1024 x 256 LayerNorm+Add took 3.5 ms that way
    against 0.27 ms serial on a busy 2-core machine. Chapter 6."""
    if numel < parallel_numel or rows < 2:
        return False
    import numba  # loaded: the kernels' module imported it

    return numba.get_num_threads() >= 2


def add_layer_norm(a, b, weight, bias, eps: float, out=None, welford: bool = False,
                   *, parallel_numel: int) -> torch.Tensor:
    """layer_norm(a + b) over the last dimension, one kernel launch; the rows are
    split over threads from `parallel_numel` elements (the kernel policy's
    `row_parallel_numel`, which the backend stage binds on the module) when there
    are two threads or more (`split_rows`). Chapter 4."""
    from . import rowwise_numba as k

    n = a.shape[-1]
    out = torch.empty_like(a) if out is None else out
    split = split_rows(a.numel(), a.numel() // n, parallel_numel)
    fn = k.rows_parallel if split else k.rows_serial
    fn(a.view(-1).numpy(), b.view(-1).numpy(),
       _EMPTY if weight is None else weight.detach().numpy(),
       _EMPTY if bias is None else bias.detach().numpy(),
       out.view(-1).numpy(), a.numel() // n, n, np.float32(eps),
       weight is not None, bias is not None, welford)
    return out

