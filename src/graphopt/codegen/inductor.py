"""What torch.compile (inductor) generates for the same function, to read side by side.

Introduced in chapter 6. `inductor_kernels(fn, *args)` compiles `fn` once, runs it, and
returns the compiled function with the kernels inductor wrote: C++/OpenMP on a CPU,
Triton on a GPU. Only the kernels are kept: the Python wrapper around them names
cache paths on this machine, which a reader does not need.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..torch_internals import run_and_get_code


@dataclass
class InductorCode:
    """The result of one compiled call and the generated kernels' source texts
    (ch. 6)."""

    compiled: Callable
    result: Any
    kernels: list[str]
    full_source: str


def inductor_kernels(fn: Callable, *args, **compile_options) -> InductorCode:
    """Compile fn with torch.compile, run it on args, return its generated kernels
    (ch. 6)."""

    compiled = torch.compile(fn, **compile_options)
    result, sources = run_and_get_code(compiled, *args)
    full = "\n".join(sources)
    return InductorCode(compiled, result, extract_kernels(full), full)


def extract_kernels(source: str) -> list[str]:
    """The C++ (`extern "C"` functions) or Triton (`@triton.jit` functions) kernels
    (ch. 6)."""
    kernels = []
    for match in re.finditer(r"r'''(.*?)'''", source, flags=re.S):
        body = match.group(1)
        if 'extern "C"' in body:
            text = body[body.index('extern "C"'):]
            kernels.append(_drop_paths(text).strip())
        elif "@triton.jit" in body:
            kernels.append(_drop_paths(body[body.index("@triton.jit"):]).strip())
    return kernels


def _drop_paths(text: str) -> str:
    # include lines and comments can name this machine's cache directory
    return "\n".join(ln for ln in text.splitlines()
                     if not ln.lstrip().startswith("#include") and "/tmp/" not in ln)
