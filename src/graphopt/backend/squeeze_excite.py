"""A squeeze-excite gate as one CPU kernel, compiled with numba (chapter 7).

    s   = mean of x over H x W           (C numbers per image: the squeeze)
    g   = gate(W2 @ act(W1 @ s + b1) + b2)   (two small matrix-vector products)
    out = x * g, channel by channel      (the excite)

Eager runs it as six ops (the pool, two 1x1 convs on a 1x1 map, their activation,
the gate, the multiply), each a dispatch of its own. The kernel reads x twice (for
the sums, then for the product) and writes the output once; the squeezed vectors
never leave the L1 cache. Measured on a 2-core EPYC (`benchmarks/squeeze_excite.py`,
batch 1): one MobileNetV3 gate took 10-22 us against eager's 24-47 us, and the
whole model, optimised without the pattern row, ran 1.1x slower at 1 thread and
1.16x at 2 (eager's gate ops each wake the second thread; the kernel is serial).
"""

from __future__ import annotations

import numpy as np
import torch

from .rowwise import _numba_installed

ACTS = {"none": 0, "relu": 1, "swish": 2}  # the first product's activation (attr)
GATES = {"hardsigmoid": 3, "sigmoid": 4}


def usable(x, w1, b1, w2, b2) -> bool:
    """float32 CPU tensors, x a non-empty (N, C, H, W) tensor, channels-last or
    NCHW-contiguous, the weights contiguous, no autograd: the kernel's domain
    (ch. 7)."""
    if not _numba_installed():
        return False
    ts = [t for t in (x, w1, b1, w2, b2) if t is not None]
    return (x.dim() == 4 and x.numel() > 0
            and (x.is_contiguous(memory_format=torch.channels_last)
                 or x.is_contiguous())
            and all(t.device.type == "cpu" and t.dtype is torch.float32 for t in ts)
            and all(t.is_contiguous() for t in ts[1:])
            and w1.shape[1] == x.shape[1] == w2.shape[0]
            and not (torch.is_grad_enabled() and any(t.requires_grad for t in ts)))


def gate(x, arrays: tuple, act: str, kind: str) -> torch.Tensor:
    """x * kind(W2 @ act(W1 @ mean(x) + b1) + b2), one kernel launch (ch. 7).
    `arrays` are the weights as `Weights` gives them; `act` is the activation's
    oneDNN name ("relu", "swish"), `kind` the gate's."""
    from . import squeeze_excite_numba as k

    n, c, h, w = x.shape
    last = x.is_contiguous(memory_format=torch.channels_last)
    out = torch.empty_like(x)  # in x's layout
    k.squeeze_excite(_flat(x, last), *arrays, _flat(out, last), n, h * w, c,
                     arrays[0].size // c, ACTS[act], GATES[kind], last)
    return out


def _flat(t: torch.Tensor, channels_last: bool) -> np.ndarray:
    """The flat buffer of a channels-last (N, H, W, C) or NCHW tensor: a view, no
    copy (numpy's transpose and reshape cost a third of torch's permute and view)."""
    a = t.detach().numpy()
    return (a.transpose(0, 2, 3, 1) if channels_last else a).reshape(-1)


class Weights:
    """The two convs' weights and biases as flat numpy views, made on the first
    call and again only when a tensor is another object or moved (a view sees an
    in-place write). A bias that is None reads zeros. What it keeps is one tuple,
    replaced whole: a call never pairs one call's tensors with another's views
    (a deep copy's module shares this plan). Chapter 7."""

    def __init__(self):
        self.kept = ((), (), ())  # tensors, their addresses, their views

    def __call__(self, w1, b1, w2, b2) -> tuple:
        tensors = (w1, b1, w2, b2)
        addresses = tuple(0 if t is None else t.data_ptr() for t in tensors)
        kept_tensors, kept_addresses, arrays = self.kept
        if addresses != kept_addresses or \
                any(a is not b for a, b in zip(tensors, kept_tensors)):
            zeros = (0, w1.shape[0], 0, w2.shape[0])
            arrays = tuple(
                np.zeros(zeros[i], np.float32) if t is None
                else t.detach().numpy().reshape(-1) for i, t in enumerate(tensors))
            self.kept = (tensors, addresses, arrays)
        return arrays
