"""Which of oneDNN's implementations a primitive binds, as data (chapter 7).

For one descriptor oneDNN offers a list of implementations, best first by its own
ranking, and a primitive descriptor starts at the first. `INSTEAD` names the few
first choices the backend replaces, each by a later one on the same instruction
set, bound only where oneDNN offers it for the same descriptor: the same shapes,
layouts and post-ops, so the same answer up to float32 rounding. The choice
depends on the names alone, never on a timing.

The data (`benchmarks/sequence_effects.py`, `benchmarks/results/
sequence_effects_cpu.txt`; MobileNetV3-Small's convolutions on channels-last images,
batch 1, one thread, a 2-core AVX2 EPYC): each alone, its 22 1x1 convolutions took
0.78-0.94x of the time on `jit_1x1` that they took on oneDNN's first choice, the
brgemm-based `brgconv_1x1`, and its 11 depthwise ones 0.68-0.75x on `jit_dw` against
`brdgmm_dw`: as fast as oneDNN's blocked layout, without leaving channels-last. The
whole model took 0.88-0.96x of its CPU time. On the same CPU the dense 3x3 convs of
ResNet-18 stay on `brgconv` (the direct `jit` kernel took 1.27-1.33x as long), so
they are not listed. AVX-512 keeps oneDNN's own ranking: nothing was measured there.
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
    measures what `INSTEAD` is worth (chapter 7). The table is the process's: a
    primitive another thread makes meanwhile gets first choices too."""
    saved = dict(INSTEAD)
    INSTEAD.clear()
    try:
        yield
    finally:
        INSTEAD.update(saved)
