"""A fused group as one Triton kernel for the GPU (chapter 6).

Each program instance handles BLOCK consecutive output elements: it computes their
indices `offs`, masks off the ones past the end (`offs < n`: sizes need not be a
multiple of BLOCK), loads one value per input, runs the group's math and stores.

Triton compiles a function from its *source*, which it reads with `inspect`; so the
generated text is written to a file in the kernel cache directory and imported as a
module, not `exec`-ed. On a machine without a GPU, `TRITON_INTERPRET=1` (set before
the kernel is imported) runs the same kernel with numpy on CPU tensors: slow, but it
checks the generated code.

Strided operands (broadcast or non-contiguous) get index arithmetic over the merged
loop shape: `offs` is split into one coordinate per dimension and dotted with the
operand's strides. The source therefore depends on the number of merged dimensions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import tempfile
from pathlib import Path

import torch

from .common import OPS, Const, Layout, Program

DEFAULT_BLOCK = 1024


def interpreting() -> bool:
    """True when Triton runs kernels with its CPU interpreter, TRITON_INTERPRET=1
    (ch. 6)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def available() -> tuple[bool, str]:
    """Whether Triton can be imported here, and if not, why (ch. 6)."""
    try:
        import triton  # noqa: F401
    except ImportError as e:  # Linux-only extra: pip install 'graphopt[triton]'
        return False, f"triton is not installed ({e}); pip install 'graphopt[triton]'"
    return True, ""


def generate(prog: Program, layout: Layout, dtype: torch.dtype) -> str:
    """The Triton source of one kernel for this program, layout and dtype (ch. 6)."""
    strided = [k for k, p in enumerate(layout.patterns) if p == "strided"]
    nd = len(layout.shape)
    n_in, n_out = len(prog.inputs), len(prog.outputs)
    params = [f"in{k}" for k in range(n_in)] + [f"out{k}" for k in range(n_out)] + ["n"]
    if strided:
        params += [f"S{d}" for d in range(1, nd)]
        params += [f"st{k}_{d}" for k in strided for d in range(nd)]
    lines = [
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        f"def kernel({', '.join(params)}, BLOCK: tl.constexpr):",
        "    pid = tl.program_id(0)",
        "    offs = pid * BLOCK + tl.arange(0, BLOCK)",
        "    mask = offs < n  # the last block may run past the end",
    ]
    if strided:
        lines += ["    # coordinates along the merged dimensions, for strided operands"]
        lines += _unravel(nd)
    for k, var in enumerate(prog.inputs):
        lines.append(f"    {var} = tl.load({_address(k, layout, nd)})")
    lines += ["    " + ln for ln in _body(prog)]
    for k, var in enumerate(prog.outputs):
        addr = _address(n_in + k, layout, nd).replace(", mask=mask", "")
        lines.append(f"    tl.store({addr}, {var}, mask=mask)")
    del dtype  # pointers carry the dtype; constants are weakly typed in Triton
    return "\n".join(lines) + "\n"


def _unravel(nd: int) -> list[str]:
    if nd == 1:
        return ["    c0 = offs"]
    lines = ["    rem = offs"]
    for d in range(nd - 1, 0, -1):
        lines.append(f"    c{d} = rem % S{d}")
        lines.append(f"    rem = rem // S{d}" if d > 1 else f"    c0 = rem // S{d}")
    return lines


def _address(k: int, layout: Layout, nd: int) -> str:
    base = "in" if k < len(layout.patterns) - len(layout.out_shapes) else "out"
    index = k if base == "in" else k - (len(layout.patterns) - len(layout.out_shapes))
    pattern = layout.patterns[k]
    if pattern == "scalar":
        # an output of one element is written by every lane (the same value)
        if base == "in":
            return f"{base}{index}"
        return f"{base}{index} + offs * 0, mask=mask"
    if pattern == "flat":
        return f"{base}{index} + offs, mask=mask"
    dot = " + ".join(f"c{d} * st{k}_{d}" for d in range(nd))
    return f"{base}{index} + {dot}, mask=mask"


def _body(prog: Program) -> list[str]:
    lines = []
    for stmt in prog.stmts:
        names = {a: (_literal(v.value) if isinstance(v, Const) else v)
                 for a, v in stmt.args}
        lines.append(f"{stmt.var} = " + OPS[stmt.op].triton.format(**names))
    return lines


def _literal(v: float) -> str:
    return repr(v) if math.isfinite(v) else f'float("{v}")'


def cache_dir() -> Path:
    """Where generated kernel files live: $GRAPHOPT_CACHE_DIR, else a per-user temp
    folder (ch. 6)."""
    default = Path(tempfile.gettempdir()) / f"graphopt-kernels-{os.getuid()}"
    path = Path(os.environ.get("GRAPHOPT_CACHE_DIR", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def import_source(source: str, prefix: str, name: str):
    """Write source to the cache directory (once, atomically) and import it (ch. 6)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"graphopt_{prefix}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = cache_dir() / f"{module_name}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(f"# generated by graphopt.codegen for {name}\n" + source)
        tmp.replace(path)  # atomic: another process may import it at the same time
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[module_name] = module
    return module


def compile_source(source: str, name: str):
    """Import the generated source and return its @triton.jit kernel (ch. 6).

    Interpreted and compiled kernels are different objects: the module name says which.
    """
    prefix = "triton_interp" if interpreting() else "triton"
    return import_source(source, prefix, name).kernel


def launch(fn, prog: Program, layout: Layout, inputs, outputs,
           block: int | None) -> None:
    """Launch a compiled Triton kernel over the output with one program per BLOCK
    (ch. 6)."""
    n = layout.numel
    if n == 0:
        return
    if block is None:
        # the interpreter pays per program instance: one big block is fastest there
        block = min(1 << max(n - 1, 1).bit_length(), 65536) if interpreting() \
            else DEFAULT_BLOCK
    strided = [k for k, p in enumerate(layout.patterns) if p == "strided"]
    args = list(inputs) + list(outputs) + [n]
    if strided:
        args += list(layout.shape[1:])
        nd = len(layout.shape)
        args += [layout.strides[k][d] for k in strided for d in range(nd)]
    fn[(math.ceil(n / block),)](*args, BLOCK=block)
