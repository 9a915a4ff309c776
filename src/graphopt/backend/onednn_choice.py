"""Which of oneDNN's implementations a primitive binds, as data (chapter 7).

For one descriptor oneDNN offers a list of implementations, best first by its own
ranking, and a primitive descriptor starts at the first. `INSTEAD` names the few
first choices the backend replaces, each by a later one on the same instruction
set, bound only where oneDNN offers it for the same descriptor: the same shapes,
layouts and post-ops, so the same answer up to float32 rounding. The choice
depends on the names alone, never on a timing.

The data (`benchmarks/sequence_effects.py`, MobileNetV3-Small's convolutions on
channels-last images, batch 1, one thread, an AVX2 EPYC): oneDNN's brgemm-based
kernels, its first choice on AVX2, ran their 17 1x1 shapes in 1.20 ms of CPU time
alone and 1.55 ms one after another; its older direct `jit_1x1` kernels in 1.03 ms
both ways. For the 11 depthwise shapes: 0.79 and 0.83 ms against `jit_dw`'s 0.59
and 0.55 ms. The whole model then ran 5-10 % faster, at one and two threads and
batch 1 and 8. AVX-512 keeps oneDNN's own ranking: nothing was measured there.
"""

from __future__ import annotations

import contextlib

from . import onednn_capi as capi

INSTEAD = {"brgconv_1x1:avx2": "jit_1x1:avx2", "brdgmm_dw:avx2": "jit_dw:avx2"}


def choose(pd, describe) -> str:
    """Fill `pd` through `describe(pd)` and move it to `INSTEAD`'s implementation
    where oneDNN's first one is listed and the other is offered; returns the name of
    the implementation `pd` now holds (chapter 7)."""
    describe(pd)
    first = capi.implementation(pd)
    wanted = INSTEAD.get(first)
    if wanted is None:
        return first
    next_impl = capi.library().lib.dnnl_primitive_desc_next_impl
    while next_impl(pd) == 0:  # 0: moved on; at the end pd stays at the last one
        if capi.implementation(pd) == wanted:
            return wanted
    capi.destroy("dnnl_primitive_desc_destroy", [pd])
    pd.value = None  # freed: never twice, should `describe` fail now
    describe(pd)  # not offered here: oneDNN's first choice again
    return first


@contextlib.contextmanager
def first_choices():
    """Primitives made inside bind oneDNN's first choice everywhere: how a benchmark
    measures what `INSTEAD` is worth (chapter 7)."""
    saved = dict(INSTEAD)
    INSTEAD.clear()
    try:
        yield
    finally:
        INSTEAD.update(saved)
