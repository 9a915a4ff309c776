"""oneDNN's C API, called directly through ctypes (chapter 7).

torch's `mkldnn` ops build oneDNN's objects again on every call: the memory
descriptors, the attributes with their post-ops, a lookup of the primitive in a
cache keyed by all of them, then the memory objects around the tensors. On
MobileNetV3's small convolutions that costs more than the kernel: some 25 us a
call against 5 (`benchmarks/onednn_direct.py`). A runtime such as ONNX Runtime
builds them once, when the session is created. This module lets graphopt's
backend do the same: `onednn_direct` creates each primitive once and, per call,
only points its memory objects at the call's tensors and executes it.

The library is oneDNN's own build for GNU OpenMP (the pip package
`onednn-cpu-gomp`), loaded after torch so that both use torch's OpenMP runtime
(one thread pool: `torch.set_num_threads` sets both). torch's own copy of oneDNN
cannot be used: libtorch hides its symbols. Where the package is missing (not
Linux x86-64), another OpenMP would load, or the library disagrees with the
numbers below, `why_unavailable()` says so and the backend keeps torch's ops.

Only what the backend calls is bound. The enum values are oneDNN 3.x's
(`dnnl_types.h`); `_check_enums` asks the library to name each one back.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os

import torch  # noqa: F401  loaded first: its OpenMP runtime is the one oneDNN finds

F32, CPU, FORWARD_INFERENCE, CONVOLUTION_DIRECT, FORMAT_ANY = 3, 1, 96, 1, 1
QUERY_WEIGHTS_MD, QUERY_IMPL_INFO_STR = 131, 8
ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS = 1, 17, 33, 41
ARG_POST_OP_0_SRC_1 = (1 << 15) | 2  # DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | SRC_1
BINARY_ADD = 0x1FFF0
# activation attr (the names torch's mkldnn ops take) -> oneDNN eltwise algorithm
ELTWISE = {"relu": 0x20, "hardswish": 52, "hardtanh": 46, "swish": 44,
           "gelu_erf": 49, "gelu_tanh": 43}
_NAMES = {0x20: "eltwise_relu", 52: "eltwise_hardswish", 46: "eltwise_clip",
          44: "eltwise_swish", 49: "eltwise_gelu_erf", 43: "eltwise_gelu_tanh",
          BINARY_ADD: "binary_add", CONVOLUTION_DIRECT: "convolution_direct"}

Handle = ctypes.c_void_p
Dims = ctypes.c_int64 * 12  # dnnl_dims_t


def eltwise(act):
    """An `Activation` as oneDNN's eltwise post-op: (algorithm, alpha, beta), None
    for "none", () for one it has not (chapter 7)."""
    if act.attr == "none":
        return None
    if act.attr == "gelu":
        return ELTWISE["gelu_tanh" if act.algorithm == "tanh" else "gelu_erf"], \
            0.0, 0.0
    if act.attr not in ELTWISE:
        return ()
    alpha, beta = {"hardswish": (1 / 6, 0.5), "swish": (1.0, 0.0)}.get(
        act.attr, act.scalars or (0.0, 0.0))  # hardtanh: alpha, beta = lo, hi
    return ELTWISE[act.attr], float(alpha), float(beta)


class ExecArg(ctypes.Structure):
    """dnnl_exec_arg_t: which argument of a primitive, and its memory (ch. 7)."""

    _fields_ = [("arg", ctypes.c_int), ("memory", Handle)]


class OneDNNError(RuntimeError):
    """A oneDNN call returned an error status (chapter 7)."""


def _library_path() -> str | None:
    """Where pip put libdnnl.so.3 (the wheel's data: <prefix>/lib), or None."""
    try:
        files = importlib.metadata.files("onednn-cpu-gomp") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "libdnnl.so.3":
            return str(f.locate())
    return None


def _openmp_runtimes() -> set[str]:
    """The OpenMP runtime files this process has mapped (Linux)."""
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps
                if "libgomp" in line or "libiomp" in line}


class _Library:
    """The loaded library and one engine and stream, or why there is none."""

    def __init__(self):
        self.lib, self.engine, self.stream, self.why = None, None, None, ""
        if os.environ.get("GRAPHOPT_ONEDNN_DIRECT", "1") == "0":
            self.why = "turned off (GRAPHOPT_ONEDNN_DIRECT=0)"
            return
        path = _library_path()
        if path is None:
            self.why = "the package onednn-cpu-gomp is not installed"
            return
        before = _openmp_runtimes()
        lib = ctypes.CDLL(path)
        if len(_openmp_runtimes()) > max(1, len(before)):
            self.why = "it would bring a second OpenMP runtime into this process"
            return
        self.lib = lib
        lib.dnnl_alg_kind2str.restype = ctypes.c_char_p
        lib.dnnl_primitive_desc_query_md.restype = Handle
        lib.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        lib.dnnl_memory_set_data_handle.argtypes = [Handle, Handle]
        lib.dnnl_primitive_execute.argtypes = [Handle, Handle, ctypes.c_int, Handle]
        self.why = self._check_enums()
        if self.why:
            self.lib = None
            return
        self.engine, self.stream = Handle(), Handle()
        call("dnnl_engine_create", ctypes.byref(self.engine), CPU, 0, lib=lib)
        call("dnnl_stream_create", ctypes.byref(self.stream), self.engine, 1, lib=lib)

    def _check_enums(self) -> str:
        for value, name in _NAMES.items():
            said = self.lib.dnnl_alg_kind2str(value).decode()
            if said != name:
                return f"this oneDNN names {value:#x} {said!r}, not {name!r}"
        return ""


_LIB: _Library | None = None


def library() -> _Library:
    """The process's one loaded library (loaded on first use) (chapter 7)."""
    global _LIB
    if _LIB is None:
        _LIB = _Library()
    return _LIB


def why_unavailable() -> str:
    """Why oneDNN cannot be called directly here, or "" (chapter 7)."""
    return library().why


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int),
                ("patch", ctypes.c_int), ("hash", ctypes.c_char_p)]


def version() -> str:
    """The loaded library's version ("3.2.0"), or "" where none loaded (ch. 7)."""
    lib = library().lib
    if lib is None:
        return ""
    lib.dnnl_version.restype = ctypes.POINTER(_Version)
    v = lib.dnnl_version().contents
    return f"{v.major}.{v.minor}.{v.patch}"


def implementation(pd) -> str:
    """The name of the implementation oneDNN chose for a primitive descriptor
    ("brg_conv_fwd:avx512_core", "ref:any", ...) (chapter 7)."""
    info = ctypes.c_char_p()
    call("dnnl_primitive_desc_query", pd, QUERY_IMPL_INFO_STR, 0, ctypes.byref(info))
    return (info.value or b"").decode()


def call(name: str, *args, lib=None) -> None:
    """Call the C function `name`; raise OneDNNError on a non-zero status (ch. 7)."""
    status = getattr(lib or library().lib, name)(*args)
    if status != 0:
        raise OneDNNError(f"oneDNN's {name} returned status {status}")


def memory_desc(shape, strides=None) -> Handle:
    """A float32 memory descriptor: these strides (in elements), or, with None,
    "any" (the primitive picks its layout: how a weight gets oneDNN's blocked one).
    Chapter 7."""
    md = Handle()
    if strides is None:
        call("dnnl_memory_desc_create_with_tag", ctypes.byref(md), len(shape),
             Dims(*shape), F32, FORMAT_ANY)
    else:
        call("dnnl_memory_desc_create_with_strides", ctypes.byref(md), len(shape),
             Dims(*shape), F32, Dims(*strides))
    return md


def clone(md) -> Handle:
    """A copy of a memory descriptor that outlives the object it came from (a
    primitive descriptor owns what it is queried for) (chapter 7)."""
    out = Handle()
    call("dnnl_memory_desc_clone", ctypes.byref(out), md)
    return out


def memory(md, pointer: int = 0) -> Handle:
    """A memory object for `md` over `pointer` (0: none yet; set per call) (ch. 7)."""
    mem = Handle()
    call("dnnl_memory_create", ctypes.byref(mem), md, library().engine,
         Handle(pointer))
    return mem


def destroy(name: str, handles) -> None:
    """Free oneDNN objects (`name`: e.g. "dnnl_memory_destroy") (chapter 7)."""
    lib = library().lib
    for h in handles:
        if h and lib is not None:
            getattr(lib, name)(h)


def reorder(src_md, src: int, dst_md, dst: int) -> None:
    """Copy the tensor at address `src` (laid out as `src_md`) to `dst` in the
    layout `dst_md`: one reorder primitive, made, run and freed (chapter 7)."""
    engine, stream = library().engine, library().stream
    pd, primitive = Handle(), Handle()
    call("dnnl_reorder_primitive_desc_create", ctypes.byref(pd), src_md, engine,
         dst_md, engine, None)
    mems = [memory(src_md, src), memory(dst_md, dst)]
    args = (ExecArg * 2)(ExecArg(ARG_SRC, mems[0]), ExecArg(ARG_DST, mems[1]))
    try:
        call("dnnl_primitive_create", ctypes.byref(primitive), pd)
        call("dnnl_primitive_execute", primitive, stream, 2, args)
        call("dnnl_stream_wait", stream)
    finally:
        destroy("dnnl_memory_destroy", mems)
        destroy("dnnl_primitive_destroy", [primitive])
        destroy("dnnl_primitive_desc_destroy", [pd])
