"""A layout conversion as a oneDNN reorder made once (chapter 7).

`convert_layout` puts a `ToLayout` node where a region of convolutions begins or
ends: a copy of the activations from NCHW into channels-last, or back. torch's
copy (`contiguous(memory_format=...)`) writes the output in order and reads the
input with a stride of H x W floats; on an image, with three channels, its inner
loop is three floats long. oneDNN generates a reorder for the two layouts; made
once, like the convolutions' primitives (`onednn_direct`), a call only points it
at the tensors. NCHW into channels-last, batch 1, us a call (2-core EPYC):

    shape            torch's copy, 1 / 2 threads    oneDNN's reorder, 1 / 2 threads
    3 x 224 x 224         87 / 49                        30 / 31
    3 x 64 x 64            9 / 9                          6 / 9
    3 x 32 x 32            4 / 4                          5 / 7
    64 x 56 x 56         121 / 72                        55 / 89

The reorder wins where torch's copy is slowest, on an image's three channels,
except on the smallest ones (its own fixed cost, and at 2 threads the split);
with many channels torch's copy vectorises and splits well over two threads, the
reorder not. So the rule (`worth_it`, on the shape alone): an input of at most
`MAX_CHANNELS` channels and at least `MIN_NUMEL` elements.

The backend stage gives `copy` as its kernel to each `ToLayout` node whose
recorded input passes the rule (`binds`); torch's copy still runs where the
reorder cannot (not a float32 CPU tensor, autograd recording, a dispatch mode
watching: the interpreter counts the copy it sees), where a call's input fails
the rule, and where the tensor is already in that layout (no copy at all, as
`contiguous` does).
"""

from __future__ import annotations

import ctypes

import torch

from ..passes.convert_layout import FORMATS
from ..torch_internals import dispatch_modes
from . import onednn_capi as capi
from .onednn_direct import NoFastKernel, Primitive, Refused, threads

MAX_CHANNELS, MIN_NUMEL = 4, 1 << 13


def worth_it(x) -> bool:
    """The shape rule of the module docstring: an image-like input (ch. 7)."""
    return x.shape[1] <= MAX_CHANNELS and x.numel() >= MIN_NUMEL


def binds(node) -> bool:
    """Whether the backend gives a `ToLayout` node `copy`: oneDNN's library loads
    and the input it recorded passes the shape rule (chapter 7)."""
    x = node.args[0].meta.get("val") if node.args else None
    return not capi.why_unavailable() and isinstance(x, torch.Tensor) and \
        x.dim() == 4 and worth_it(x)


class Reorder(Primitive):
    """x copied into the layout `layout` (a torch memory format), for one input
    shape and strides (ch. 7). A `Primitive` with no weight: its call sets the
    source's and the output's addresses and runs the reorder."""

    def __init__(self, x, layout):
        self.key = (x.shape, x.stride(), threads())
        self.out_shape = x.shape
        self.out_strides = torch.empty(x.shape, memory_format=layout).stride()
        self._mds = [capi.memory_desc(x.shape, x.stride()),
                     capi.memory_desc(x.shape, self.out_strides)]
        engine = capi.library().engine
        self._make(lambda pd: capi.call(
            "dnnl_reorder_primitive_desc_create", ctypes.byref(pd),
            self._mds[0], engine, self._mds[1], engine, None))
        self._src, self._dst = capi.memory(self._mds[0]), capi.memory(self._mds[1])
        self._bias = self._other = None
        self._arguments({})


def copy(module, x):
    """`module`'s conversion of `x` (a `ToLayout` node's kernel): a `Reorder`,
    kept on the module as `_primitive` for the last input shape and strides, or
    torch's copy where the reorder cannot run it (chapter 7). The reorder's domain
    is asked on every call: its key says nothing of the dtype, and a float64 input
    of the recorded shape must not be read as float32."""
    layout = FORMATS[module.layout]
    if not _takes(x) or x.is_contiguous(memory_format=layout):
        return x.contiguous(memory_format=layout)
    p = getattr(module, "_primitive", None)
    key = (x.shape, x.stride(), threads())
    if p is None or key != p.key:
        try:
            p = module._primitive = Reorder(x, layout)
        except NoFastKernel:
            p = module._primitive = Refused(key)
    return x.contiguous(memory_format=layout) if p.refused else p(x)


def _takes(x) -> bool:
    """A plain float32 CPU tensor of 4 dims the rule picks, nothing watching: the
    reorder's domain."""
    return type(x) is torch.Tensor and x.dtype is torch.float32 and x.is_cpu and \
        x.dim() == 4 and worth_it(x) and not dispatch_modes() and \
        not (x.requires_grad and torch.is_grad_enabled())
