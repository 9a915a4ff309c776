"""The kernel cache: generated source and compiled code, keyed by signature (ch. 6).

Kernels are cached by the group's signature: its op sequence, the dtype and each
operand's indexing pattern (flat, scalar, strided), so two groups that compute the
same thing share one compiled kernel (`cache_info()`). A `Compiled` entry holds the
source at once and compiles it on first launch (`compiled`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import cpu
from . import triton as triton_gen
from .program import Program


class CacheInfo(NamedTuple):
    """The cache's hits, misses and size, as `cache_info()` gives them (ch. 6)."""

    hits: int
    misses: int
    size: int


@dataclass
class Compiled:
    """One specialisation: generated source plus the compiled function (made lazily)
    (chapter 6)."""

    backend: str
    source: str
    key: tuple
    fn: Any = None
    calls: int = 0


# mutated in place only: kernel.py holds these same objects
_CACHE: dict[tuple, Compiled] = {}
_STATS = {"hits": 0, "misses": 0}
_GENERATION = [0]


def cache_info() -> CacheInfo:
    """Hits and misses of the kernel cache since the last clear_cache() (ch. 6)."""
    return CacheInfo(_STATS["hits"], _STATS["misses"], len(_CACHE))


def clear_cache() -> None:
    """Forget every generated kernel (numba and Triton recompile on next use)
    (chapter 6)."""
    _CACHE.clear()
    _GENERATION[0] += 1  # Kernel objects drop what they remembered, too
    _STATS.update(hits=0, misses=0)


@contextlib.contextmanager
def unchanged():
    """Inside the block kernels are generated and cached as usual; after it, the
    cache holds what it held before and `cache_info()` counts as it did (ch. 6).
    For measuring (`calibrate`): it must not change what a reader sees (ch. 6)."""
    stats, keys = dict(_STATS), set(_CACHE)
    try:
        yield
    finally:
        _STATS.update(stats)
        for key in set(_CACHE) - keys:
            del _CACHE[key]


def compiled(spec: Compiled, prog: Program):
    """`spec`'s compiled function, compiled at its first use (ch. 6)."""
    if spec.fn is None:
        name = "_".join(s.op for s in prog.stmts)[:60] or "copy"
        compile_source = cpu.compile_source if spec.backend == "numba" \
            else triton_gen.compile_source
        spec.fn = compile_source(spec.source, name)
    return spec.fn
