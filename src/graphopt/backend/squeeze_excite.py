"""A squeeze-excite gate as one CPU kernel, compiled with numba (chapter 7).

    s   = mean of x over H x W           (C numbers per image: the squeeze)
    g   = gate(W2 @ act(W1 @ s + b1) + b2)   (two small matrix-vector products)
    out = x * g, channel by channel      (the excite)

Eager runs it as six ops (the pool, two 1x1 convs on a 1x1 map, their activation,
the gate, the multiply), each a dispatch of its own. The kernel reads x twice (for
the sums, then for the product) and writes the output once; the squeezed vectors
never leave the L1 cache. Measured on a 2-core EPYC (`benchmarks/squeeze_excite.py`,
batch 1, 1 thread): one MobileNetV3 gate alone took 8-20 us against eager's 24-45 us
and ONNX Runtime's 12-33 us for the same six ops, and the whole model, optimised
without the pattern row, ran 1.1-1.25x slower. Inside the model the nine gates
cost about twice their time alone (`benchmarks/squeeze_excite_ab.py`: the layers
between two gates push the weights and this module's Python out of the caches),
which is why the binding below is kept to a few calls.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from .rowwise import _numba_installed

ACTS = {"none": 0, "relu": 1, "swish": 2}  # the first product's activation (attr)
GATES = {"hardsigmoid": 3, "sigmoid": 4}


def usable(x, w1, b1, w2, b2) -> bool:
    """float32 CPU tensors, x a non-empty (N, C, H, W) tensor, channels-last or
    NCHW-contiguous, the weights contiguous, no autograd: the kernel's domain
    (ch. 7). It runs before every call outside the fast path, so each test is the
    cheap one (`is_cpu`, not `device.type`: a device object costs 0.3 us)."""
    if not _numba_installed():
        return False
    weights = [t for t in (w1, b1, w2, b2) if t is not None]
    return (x.dim() == 4 and x.numel() > 0 and x.dtype is torch.float32 and x.is_cpu
            and (x.is_contiguous(memory_format=torch.channels_last)
                 or x.is_contiguous())
            and all(t.dtype is torch.float32 and t.is_cpu and t.is_contiguous()
                    for t in weights)
            and w1.shape[1] == x.shape[1] == w2.shape[0]
            and not (torch.is_grad_enabled()
                     and any(t.requires_grad for t in (x, *weights))))


def gate(x, arrays: tuple, act: str, kind: str) -> torch.Tensor:
    """x * kind(W2 @ act(W1 @ mean(x) + b1) + b2), one kernel launch (ch. 7).
    `arrays` are the weights as `Weights` gives them; `act` is the activation's
    oneDNN name ("relu", "swish"), `kind` the gate's.

    Each line here runs on every call, so the binding is kept to a handful of
    calls: inside a model, with the caches full of other layers' data, this Python
    cost about as much as the kernel itself."""
    n, c, h, w = x.shape
    out = torch.empty_like(x)  # x's strides, so both flat views run in one order
    _kernel()(_flat(x), *arrays, _flat(out), n, h * w, c, arrays[0].size // c,
              ACTS[act], GATES[kind],
              x.is_contiguous(memory_format=torch.channels_last))
    return out


@functools.cache
def _kernel():
    """The compiled kernel, imported on first use (importing numba is slow), then
    kept: an import statement in `gate` would cost a lookup on every call."""
    from .squeeze_excite_numba import squeeze_excite

    return squeeze_excite


def _flat(t: torch.Tensor) -> np.ndarray:
    """The flat buffer of a channels-last (N, H, W, C) or NCHW tensor in memory
    order: a view, no copy (`ravel("K")` follows the strides; `force` detaches a
    tensor that requires grad). Both are one C call each, cheaper than a
    transpose and a reshape, and far cheaper than torch's permute and view."""
    return t.numpy(force=True).ravel("K")


class Weights:
    """The two convs' weights and biases as flat numpy views, made on the first
    call and again only when a tensor is another object or moved (a view sees an
    in-place write). A bias that is None reads zeros. What it keeps is one tuple,
    replaced whole: a call never pairs one call's tensors with another's views
    (a deep copy's module shares this plan). Chapter 7."""

    def __init__(self):
        self.kept = ((), (), ())  # the key, the tensors, their views

    def __call__(self, w1, b1, w2, b2) -> tuple:
        tensors = (w1, b1, w2, b2)
        # One tuple of ints, compared in C: each tensor's id (no other object can
        # have it while `kept` holds the tensor) and address. Every call pays
        # for this check; `map` costs less than a generator's frame.
        key = (*map(id, tensors), *map(_address, tensors))
        kept_key, _, arrays = self.kept
        if key != kept_key:
            zeros = (0, w1.shape[0], 0, w2.shape[0])
            arrays = tuple(
                np.zeros(zeros[i], np.float32) if t is None
                else t.detach().numpy().reshape(-1) for i, t in enumerate(tensors))
            self.kept = (key, tensors, arrays)
        return arrays


def _address(t) -> int:
    return 0 if t is None else t.data_ptr()
