"""What one call of a generated kernel does, planned once per input signature (ch. 6).

The first call with a new *signature* (every input's shape, strides, dtype, device)
plans everything that does not depend on the values: the layout, the compiled
function and its direct entry point, the index arrays, the loop's thread count, the
output shapes. Later calls with the same signature only build the signature tuple,
look it up, convert the tensors to numpy views (zero-copy) and call. That is the
whole per-call overhead a fused node adds (`benchmarks/fusion.py` measures it).

Outputs come from an `OutputPool`: a buffer is handed out again only when nothing
else can see it any more (no Python reference, no view, no numpy array, no storage
object, no weak reference: `unshared`). Inside a graph, torch.fx drops each
intermediate after its last use, so a fused node's next call reuses the pages it
wrote last time instead of faulting in fresh ones; an output the caller still holds
is never overwritten.
"""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Callable

import torch

from ..torch_internals import storage_use_count
from .cache import _GENERATION


@dataclass(frozen=True)
class LaunchPlan:
    """What every call with one input signature does (chapter 6): `run(inputs, out)`
    runs it; `kind` names what runs ("numba", "triton", or "reference": the group's
    own ops); `pool` holds a kernel's output buffers, `parallel` whether its numba
    loop is the parallel one (None where there is no such choice)."""

    kind: str
    run: Callable
    pool: "OutputPool | None" = None
    parallel: bool | None = None

    @property
    def kernels(self) -> int | None:
        """Launches torch's dispatcher cannot see: 1, the generated kernel; None
        for the group's own ops (the interpreter counts what they dispatch)."""
        return None if self.kind == "reference" else 1


class Plans(dict):
    """The per-signature cache: one `LaunchPlan` per `signature`, emptied when the
    kernel cache is cleared (`clear_cache`: kernels recompile on next use) (ch. 6).

    Two layers hold one, each deciding something else for the same signature: a
    `Kernel` (kernel.py), how its generated kernel runs these inputs (backend,
    layout, loop, output buffers); a fused node (`plan_of` in fused.py), whether
    it runs that kernel at all (the policy's size and stride rules, autograd). Where
    it does, the node's entry is the Kernel's plan itself: nothing is planned twice.
    """

    generation = -1

    def fresh(self) -> Plans:
        """This cache, emptied first if the kernel cache was cleared since."""
        if self.generation != _GENERATION[0]:
            self.clear()
            self.generation = _GENERATION[0]
        return self


def signature(inputs) -> tuple:
    """What a plan depends on: shape, strides, dtype, device, autograd of each input
    (and inference mode: a pooled output made inside it is an inference tensor)
    (ch. 6)."""
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled()) + tuple(
        (t.shape, t.stride(), t.dtype, t.device, t.requires_grad)
        if isinstance(t, torch.Tensor) else (type(t), t) for t in inputs)


def _counts(bufs) -> list[tuple[int, ...]]:
    # Called the same way for the baseline and for real buffers, so the references
    # this function's own frame holds cancel out.
    out = []
    for b in bufs:
        storage = b.untyped_storage()
        out.append((sys.getrefcount(b), sys.getrefcount(storage),
                    storage_use_count(storage),
                    weakref.getweakrefcount(b)))
    return out


_BASELINE: dict = {}


def unshared(bufs, with_arrays: bool = False) -> bool:
    """True when every buffer in `bufs` is referenced by the pool alone (ch. 6).

    `with_arrays`: the pool also keeps one numpy view of each buffer (one more user
    of the storage), measured the same way for the baseline.
    """
    if with_arrays not in _BASELINE:
        probe = [torch.empty(1)]
        views = [probe[0].numpy()] if with_arrays else []
        _BASELINE[with_arrays] = _counts(probe)[0]
        del views
    return _free(bufs, _BASELINE[with_arrays])


def _free(bufs, base: tuple) -> bool:
    """`unshared` with its baseline given: one loop, no list, for every pool take.

    It holds each buffer and its storage exactly as `_counts` does (the list, the
    loop's name, one local for the storage), so its counts compare with the
    baseline `_counts` measured."""
    for b in bufs:
        storage = b.untyped_storage()
        if (sys.getrefcount(b), sys.getrefcount(storage), storage_use_count(storage),
                weakref.getweakrefcount(b)) != base:
            return False
    return True


class OutputPool:
    """Output tensors of one plan, reused only when `unshared` proves it safe (ch. 6).

    On the CPU the pool also keeps a flat numpy view of each buffer, so a reused
    buffer costs no tensor-to-numpy conversion either.
    """

    def __init__(self, shapes, dtype, device):
        self.shapes, self.dtype, self.device = shapes, dtype, device
        self.bufs: list | None = None
        self.arrays: list | None = None
        self.reused = 0
        self._numpy = torch.device(device).type == "cpu"
        self._lock = threading.Lock()  # two threads must not take the same buffer
        unshared([], self._numpy)  # measures the baseline once, not per take
        self._base = _BASELINE[self._numpy]

    def take(self) -> tuple[list[torch.Tensor], list | None]:
        """Output tensors (and their numpy views on the CPU) for one call."""
        with self._lock:
            if self.bufs is not None and _free(self.bufs, self._base):
                self.reused += 1
            else:
                self.bufs = [torch.empty(s, dtype=self.dtype, device=self.device)
                             for s in self.shapes]
                self.arrays = [b.numpy().reshape(-1) for b in self.bufs] \
                    if self._numpy else None
            return list(self.bufs), self.arrays


def check_out(out, shapes, like: torch.Tensor) -> list[torch.Tensor]:
    """The caller's out= tensors, checked against what the kernel writes (ch. 6)."""
    from ..errors import InputError
    from ..i18n import _

    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(shapes):
        raise InputError(_("out= needs {wanted} tensor(s), got {got}.").format(
            wanted=len(shapes), got=len(outs)))
    for o, s in zip(outs, shapes):
        if tuple(o.shape) != tuple(s) or o.dtype != like.dtype or \
                not o.is_contiguous() or o.device != like.device:
            raise InputError(_(
                "out= must be a contiguous {dtype} tensor of shape {shape} on "
                "{device}; got {got_dtype} {got_shape} on {got_device}.").format(
                dtype=like.dtype, shape=tuple(s), device=like.device,
                got_dtype=o.dtype, got_shape=tuple(o.shape), got_device=o.device))
    return outs
