"""Ahead-of-time compilation for a named GPU, on any machine (chapter 6).

Triton compiles a kernel in stages, Triton IR -> Triton GPU IR -> LLVM IR -> PTX ->
cubin (machine code), and none of them needs a GPU: `triton.compile` takes the
target as an argument. The cubin says what one thread block will ask of the chip,
and the `cuobjdump` that Triton bundles reads it:

    REG       registers per thread (at most 255; what does not fit is spilled)
    STACK     bytes of stack frame per thread: spilled registers, in local memory,
              which lives in the GPU's DRAM behind the caches (0 is what you want)
    SHARED    static shared memory; Triton asks for its shared memory at launch
              instead, and records how much in the kernel's metadata (`shared`)
    CONSTANT  the kernel's arguments, in constant memory

    k = compile_kernel(fn, "sm_90", constexprs={"BLOCK": 1024})
    print(k.resources)              # registers, shared memory, spills
    print(k.resources.occupancy())  # blocks and warps per SM (`occupancy`)

Arguments are typed the way Triton's own AOT tool (`triton/tools/compile.py`) types
them: pointers aligned to 16 bytes (what torch's allocators return), integers 32-bit.
Kernels must live in a file: Triton reads their source with `inspect`.
"""

from __future__ import annotations

import os
import re
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..errors import InputError
from .occupancy import SMS, Occupancy, occupancy
from .triton import import_source

ARCHS = {"sm_80": 80, "sm_90": 90}       # A100, H100 (see occupancy.SMS)
# the PTX instructions that move data between memories, or make threads wait
PTX_MOVES = r"ld\.global|st\.global|ld\.shared|st\.shared|cp\.async|bar\.sync|mma"
_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
          torch.float64: "fp64"}


@dataclass(frozen=True)
class Resources:
    """What one block of a compiled kernel asks of a multiprocessor (ch. 6)."""

    kernel: str
    arch: str
    num_warps: int
    registers: int            # per thread
    shared: int               # bytes per block: Triton's launch request + static
    spill: int                # bytes of stack per thread (spilled registers)
    constant: int             # bytes of constant memory (the arguments)

    def occupancy(self) -> Occupancy:
        """Resident blocks and warps per SM, from the SM's published limits."""
        return occupancy(SMS[self.arch], self.num_warps, self.registers, self.shared)

    def __str__(self) -> str:
        return (f"{self.kernel} on {self.arch}: {self.registers} registers/thread, "
                f"{self.shared} B shared/block, {self.spill} B spilled/thread")


@dataclass(frozen=True)
class AotKernel:
    """One kernel compiled for one target (ch. 6): its texts, machine code and
    resources."""

    name: str
    arch: str
    asm: dict                 # "ttir", "ttgir", "llir", "ptx": text
    cubin: bytes
    resources: Resources

    def ptx_excerpt(self, pattern: str = PTX_MOVES, limit: int = 12) -> str:
        """The PTX lines that move data or synchronise, the ones worth reading."""
        hits = [ln.strip() for ln in self.asm["ptx"].splitlines()
                if re.search(pattern, ln) and not ln.lstrip().startswith("//")]
        more = f"\n... ({len(hits) - limit} more)" if len(hits) > limit else ""
        return "\n".join(hits[:limit]) + more


def compile_kernel(fn, arch: str = "sm_90", *, constexprs: dict,
                   types: dict | None = None, num_warps: int = 4,
                   num_stages: int = 3, multiples_of_16: tuple = ()) -> AotKernel:
    """Compile a @triton.jit function for `arch` ("sm_80", "sm_90"), no GPU needed
    (ch. 6).

    `types` maps argument names to Triton types ("*fp32", "i32"); by default every
    non-constexpr argument named like a pointer (`in0`, `out0` in graphopt's
    generated kernels, `a_ptr`) is "*fp32" and the rest are "i32".
    `multiples_of_16` names the integer arguments known to be multiples of 16, as
    Triton's launcher finds them at run time (a size of 8M): the compiler then loads
    16 bytes at a time.
    """
    from triton import compile as triton_compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if arch not in ARCHS:
        raise InputError(f"Unknown target {arch!r}: choose one of {sorted(ARCHS)}.")
    names = list(fn.arg_names)
    missing = [n for n in names if _is_constexpr(fn, n) and n not in constexprs]
    if missing:
        raise InputError(f"Give a value for the constexpr argument(s) {missing}, "
                         "e.g. constexprs={'BLOCK': 1024}.")
    # an integer given a value is compiled as a constant: Triton's launcher does
    # that by itself for arguments equal to 1 (the unit stride of a contiguous row)
    signature = {n: "constexpr" if _is_constexpr(fn, n) or n in constexprs else
                 (types or {}).get(n, _default_type(n)) for n in names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
               if signature[n].startswith("*") or n in multiples_of_16}
    source = ASTSource(fn, signature, constexprs, attrs=aligned)
    options = {"num_warps": num_warps, "num_stages": num_stages,
               "enable_fp_fusion": True}  # what a launch on the GPU uses
    compiled = triton_compile(source, target=GPUTarget("cuda", ARCHS[arch], 32),
                              options=options)
    cubin = compiled.asm["cubin"]
    usage = read_resource_usage(cubin)
    resources = Resources(fn.__name__, arch, num_warps, usage["REG"],
                          compiled.metadata.shared + usage["SHARED"],
                          usage["STACK"] + usage["LOCAL"], usage["CONSTANT"])
    texts = {k: compiled.asm[k] for k in ("ttir", "ttgir", "llir", "ptx")}
    return AotKernel(fn.__name__, arch, texts, cubin, resources)


def _is_constexpr(fn, name: str) -> bool:
    return fn.params[fn.arg_names.index(name)].is_constexpr


def _default_type(name: str) -> str:
    return "*fp32" if re.fullmatch(r"(in|out)\d+|\w+_ptr", name) else "i32"


def read_resource_usage(cubin: bytes) -> dict:
    """REG, STACK, SHARED, LOCAL, CONSTANT of a one-kernel cubin, from cuobjdump
    (ch. 6)."""
    import triton

    tool = triton.knobs.nvidia.cuobjdump.path
    path = _scratch_path()
    with open(path, "wb") as f:
        f.write(cubin)
    try:
        out = subprocess.run([tool, "--dump-resource-usage", path], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    line = next(ln for ln in out.splitlines() if "REG:" in ln)
    fields = dict(re.findall(r"(\w+)(?:\[\d+\])?:(\d+)", line))
    return {k: int(fields.get(k, 0)) for k in ("REG", "STACK", "SHARED", "LOCAL",
                                                "CONSTANT")}


def _scratch_path() -> str:
    from .triton import cache_dir
    return str(cache_dir() / f"aot-{os.getpid()}-{id(object())}.cubin")


@contextmanager
def _compiling():
    """Import kernels as compilable functions even under TRITON_INTERPRET=1."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


def jit_from_source(source: str, name: str = "kernel"):
    """The @triton.jit function `name` of a source text, written to a file first
    (ch. 6)."""
    with _compiling():
        module = import_source(source, "triton_aot", name)
    return getattr(module, name)


def jit_from_file(path, name: str):
    """The @triton.jit function `name` defined in the file at `path` (ch. 6),
    compilable even where TRITON_INTERPRET=1 made the imported one an interpreted
    function."""
    from pathlib import Path
    return jit_from_source(Path(path).read_text(), name)


def compile_group(kernel, arch: str = "sm_90", *, block: int = 1024,
                  num_warps: int = 4, dtype: torch.dtype = torch.float32,
                  multiples_of_16: tuple = ("n", "D")) -> AotKernel:
    """A generated Triton kernel (`codegen.compile_group(..., backend="triton")`)
    compiled for `arch` with BLOCK = `block`: chapter 6's fused kernels.

    By default the element count `n` and the row length `D` are taken to be
    multiples of 16, as they are for the chapter's tensors.
    """
    if kernel.backend != "triton":
        raise InputError("Generate the Triton kernel first: "
                         "codegen.compile_group(gm, inputs, backend='triton').")
    fn = jit_from_source(kernel.source)
    pointer = f"*{_TYPES[dtype]}"
    types = {n: pointer for n in fn.arg_names if re.fullmatch(r"(in|out)\d+", n)}
    hints = tuple(n for n in multiples_of_16 if n in fn.arg_names)
    return compile_kernel(fn, arch, constexprs={"BLOCK": block}, types=types,
                          num_warps=num_warps, multiples_of_16=hints)
