"""Generated numba kernels compute what the group's own GraphModule computes (ch. 6)."""

import functools
import math
import operator
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import fx

import graphopt
from graphopt import codegen
from graphopt.codegen import KernelFallbackWarning
from graphopt.errors import InputError, NoGPUError, UnsupportedOpError
from numerics import assert_near_truth

UNARY = [torch.relu, torch.abs, torch.neg, torch.sigmoid, torch.tanh, torch.square]
BINARY = [operator.add, operator.sub, operator.mul, torch.maximum]


def chain(x, y):
    return torch.relu(x * 2.0 + y).abs()


def make_group(ops, n_inputs):
    """An fx graph applying `ops` in order; binary ops take an input or a scalar."""
    graph = fx.Graph()
    inputs = [graph.placeholder(f"x{k}") for k in range(n_inputs)]
    value = inputs[0]
    for fn, other in ops:
        if fn in UNARY:
            value = graph.call_function(fn, (value,))
        else:
            rhs = inputs[other] if isinstance(other, int) else other
            if fn is torch.maximum and not isinstance(rhs, fx.Node):
                fn = torch.clamp_min
            value = graph.call_function(fn, (value, rhs))
    graph.output(value)
    return fx.GraphModule(torch.nn.Module(), graph)


def check(kernel, gm, inputs, dtype):
    """float32 against the float64 answer within its derived bound (tests/numerics.py),
    not against torch's float32 result, which differs between instruction sets;
    float64 against torch's float64 (libm's double functions, within 1e-12)."""
    got, want = kernel(*inputs), gm(*inputs)
    assert got.dtype == want.dtype == dtype
    assert got.shape == want.shape
    if dtype == torch.float32:
        assert_near_truth(got, gm, *inputs)
    else:
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


@st.composite
def groups(draw):
    n_inputs = draw(st.integers(1, 3))
    op = st.tuples(st.sampled_from(UNARY + BINARY),
                   st.one_of(st.integers(0, n_inputs - 1),
                             st.sampled_from([0.5, -1.25, 3.0])))
    ops = draw(st.lists(op, min_size=1, max_size=5))
    shape = draw(st.lists(st.integers(1, 37), min_size=1, max_size=3))
    # each input is the full shape, a trailing broadcast slice, or a scalar
    kinds = draw(st.lists(st.sampled_from(["full", "row", "scalar", "transposed"]),
                          min_size=n_inputs, max_size=n_inputs))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return ops, n_inputs, shape, kinds, dtype


def make_input(kind, shape, dtype):
    if kind == "row":
        return torch.randn(shape[-1:], dtype=dtype)
    if kind == "scalar":
        return torch.randn((), dtype=dtype)
    if kind == "transposed":
        return torch.randn(shape[::-1], dtype=dtype).permute(
            *reversed(range(len(shape))))
    return torch.randn(shape, dtype=dtype)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(groups())
def test_generated_numba_kernel_equals_reference(case):
    ops, n_inputs, shape, kinds, dtype = case
    kinds[0] = "full"  # the output has the full shape
    gm = make_group(ops, n_inputs)
    inputs = [make_input(k, shape, dtype) for k in kinds]
    kernel = codegen.compile_group(gm, inputs)
    assert kernel.backend == "numba"
    check(kernel, gm, inputs, dtype)


def test_float32_stays_float32():
    gm = fx.symbolic_trace(chain)
    x, y = torch.randn(1000), torch.randn(1000)
    kernel = codegen.compile_group(gm, (x, y))
    assert "np.float32(2.0)" in kernel.source and "float64" not in kernel.source
    check(kernel, gm, (x, y), torch.float32)


def test_flat_inputs_get_the_simple_loop():
    gm = fx.symbolic_trace(chain)
    kernel = codegen.compile_group(gm, (torch.randn(3, 5), torch.randn(3, 5)))
    assert kernel.layout.patterns == ("flat", "flat", "flat")
    assert "for i in prange(n):" in kernel.source      # one block per thread
    assert "for i in range(n):" in kernel.source       # the serial twin
    assert "def kernel_serial(" in kernel.source
    assert kernel.source.count("prange(") == 1  # one loop: one kernel


def test_broadcast_scalar_and_strided_operands_need_no_copy():
    gm = fx.symbolic_trace(lambda x, y, s: x * y + s)
    base = torch.randn(6, 9)
    x = base.t()                       # non-contiguous view
    y = torch.randn(6)                 # broadcast along the last dim
    s = torch.tensor(0.5)              # 0-d tensor: loaded once
    kernel = codegen.compile_group(gm, (x, y, s))
    assert kernel.layout.patterns == ("strided", "strided", "scalar", "flat")
    check(kernel, gm, (x, y, s), torch.float32)
    sliced = torch.randn(8, 20)[1:, ::3]  # storage offset and a step
    check(kernel, gm, (sliced, torch.randn(7), s), torch.float32)


def test_per_channel_operand_merges_trailing_dims():
    gm = fx.symbolic_trace(lambda x, w: torch.relu(x * w))
    x, w = torch.randn(2, 3, 4, 5), torch.randn(3, 1, 1)
    kernel = codegen.compile_group(gm, (x, w))
    assert kernel.layout.shape == (2, 3, 20)  # H and W walk contiguously for both
    check(kernel, gm, (x, w), torch.float32)


def test_all_spellings_share_one_cached_kernel():
    class Chain(torch.nn.Module):
        def forward(self, x, y):
            return chain(x, y)

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    traced = fx.symbolic_trace(chain)
    aten = graphopt.capture(Chain(), x, y, level="aten")
    first = codegen.compile_group(traced, (x, y))
    before = codegen.cache_info()
    second = codegen.compile_group(aten, (x, y))
    after = codegen.cache_info()
    assert second.source == first.source
    assert after.hits == before.hits + 1 and after.misses == before.misses
    assert_near_truth(second(x, y), traced, x, y)  # same structure
    # another size with the same layout: still a hit, no new kernel
    first(torch.randn(7, 3), torch.randn(7, 3))
    assert codegen.cache_info().misses == after.misses


def test_module_and_method_spellings():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.LeakyReLU(0.2)

        def forward(self, x):
            return self.act(x.mul(3.0)).clamp(min=-0.1).sigmoid()

    gm = fx.symbolic_trace(M())
    x = torch.randn(5, 7, dtype=torch.float64)
    kernel = codegen.compile_group(gm, (x,))
    assert [s.op for s in kernel.program.stmts] == ["mul", "leaky_relu", "clamp_min",
                                                    "sigmoid"]
    check(kernel, gm, (x,), torch.float64)


def test_several_outputs_and_out_argument():
    gm = fx.symbolic_trace(lambda x, y: (x + y, torch.relu(x + y) * 2.0))
    x, y = torch.randn(3, 4), torch.randn(4)
    kernel = codegen.compile_group(gm, (x, y))
    a, b = kernel(x, y)
    torch.testing.assert_close(a, x + y)
    torch.testing.assert_close(b, torch.relu(x + y) * 2.0)
    out = (torch.empty(3, 4), torch.empty(3, 4))
    result = kernel(x, y, out=out)
    assert result[0] is out[0] and torch.equal(out[1], b)
    with pytest.raises(InputError, match="contiguous"):
        kernel(x, y, out=(torch.empty(4, 3).t(), torch.empty(3, 4)))


def test_empty_input():
    kernel = codegen.compile_group(fx.symbolic_trace(chain))
    assert kernel(torch.randn(0, 3), torch.randn(3)).shape == (0, 3)


def test_unsupported_op_names_the_op():
    gm = fx.symbolic_trace(lambda x: torch.softmax(x, 0) + 1)  # not the last dim
    with pytest.raises(UnsupportedOpError, match="softmax"):
        codegen.compile_group(gm)
    gm = fx.symbolic_trace(lambda x: x ** 3)
    with pytest.raises(UnsupportedOpError, match="pow"):
        codegen.compile_group(gm)


def test_fallback_warns_when_no_backend_can_run(monkeypatch):
    gm = fx.symbolic_trace(chain)
    x, y = torch.arange(6).reshape(2, 3), torch.arange(3)
    kernel = codegen.compile_group(gm)
    with pytest.warns(KernelFallbackWarning, match="int64"):
        assert torch.equal(kernel(x, y), gm(x, y))
    assert kernel.fallbacks == 1
    monkeypatch.setattr(codegen.kernel, "numba_available",
                        lambda: (False, "numba is missing"))
    xf, yf = x.float(), y.float()
    with pytest.warns(KernelFallbackWarning, match="numba is missing"):
        assert torch.equal(kernel(xf, yf), gm(xf, yf))
    with pytest.raises(InputError, match="int64"):
        codegen.compile_group(gm, backend="numba")(x, y)


def test_reference_backend_runs_the_graph_silently():
    gm = fx.symbolic_trace(chain)
    x, y = torch.randn(4), torch.randn(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel = codegen.compile_group(gm, backend="reference")
        assert torch.equal(kernel(x, y), gm(x, y))


def test_triton_source_without_gpu(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    gm = fx.symbolic_trace(chain)
    x, y = torch.randn(4, 5), torch.randn(5)
    kernel = codegen.compile_group(gm, (x, y), backend="triton")
    assert "@triton.jit" in kernel.source and "mask=mask" in kernel.source
    with pytest.raises(NoGPUError, match="TRITON_INTERPRET"):
        kernel(x, y)


def test_fused_graph_node_runs_its_generated_kernel(monkeypatch):
    from graphopt.codegen import GeneratedKernel, lower
    from graphopt.passes import fuse_elementwise
    from graphopt.policy import Policy

    class M(torch.nn.Module):
        def forward(self, x, b):
            return torch.sigmoid(torch.relu(x * 3.0 + b)) - 0.5

    x, b = torch.randn(64, 512), torch.randn(512)
    # b is broadcast (a strided operand, which the default policy runs eagerly):
    # a policy that lets it run the kernel
    policy = Policy(strided_kernels=True)
    grouped = fuse_elementwise(graphopt.capture(M(), x, b)).module
    fused = lower(grouped, policy=policy).module  # the group's generated kernel
    (group,) = [m for m in fused.modules() if isinstance(m, GeneratedKernel)]
    assert group.policy is policy
    assert_near_truth(fused(x, b), M(), x, b)
    kernel = codegen.kernel_of(group)
    assert kernel.backend == "numba" and kernel._spec.calls >= 1
    calls = kernel._spec.calls
    group.backend = "reference"  # the reference executor on request
    torch.testing.assert_close(fused(x, b), M()(x, b))
    assert kernel._spec.calls == calls
    # the interpreter counts what ran: the five eager ops of the reference executor...
    assert graphopt.run(fused, x, b).kernels == 5
    group.backend = "auto"  # ...and ONE launch for the generated kernel
    assert graphopt.run(fused, x, b).kernels == 1
    # before `lower` the group runs by reference: its five eager ops, no kernel
    assert graphopt.run(grouped, x, b).kernels == 5
    assert kernel._spec.calls == calls + 1  # only the lowered call above


def test_fused_node_falls_back_with_a_warning_on_unsupported_ops(monkeypatch):
    from graphopt.codegen import GeneratedKernel, lower
    from graphopt.passes import fuse_elementwise

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.floor(x * 2.0) + 1.0

    x = torch.randn(4, 8)
    fused = lower(fuse_elementwise(graphopt.capture(M(), x)).module).module
    assert any(isinstance(m, GeneratedKernel) for m in fused.modules())
    with pytest.warns(KernelFallbackWarning, match="floor"):
        torch.testing.assert_close(fused(x), M()(x))


@pytest.mark.parametrize("fn", [torch.nn.functional.hardsigmoid,
                                torch.nn.functional.hardswish])
def test_mobilenet_gates(fn):
    gm = fx.symbolic_trace(lambda x, y: fn(x * 2.0) * y)
    x = torch.linspace(-5, 5, 101)
    x[3] = float("nan")
    y = torch.randn(101)
    got = codegen.compile_group(gm, (x, y), backend="numba")(x, y)
    assert_near_truth(got, gm, x, y)


# ------------------------------------------------ the vectorisable exp (exp_numba)

@functools.lru_cache(maxsize=None)
def _exp_kernel():
    import numba

    from graphopt.codegen.exp_numba import exp32

    @numba.njit
    def apply(a, out):
        for i in range(a.shape[0]):
            out[i] = exp32(a[i])
    return apply


def _ulps(a, b):
    """Distance in representable float32 values (same sign: bit patterns differ)."""
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    return np.abs(ia - ib)


def _exp_inputs():
    """Every 4099th float32 bit pattern (both signs, denormals, inf, NaN) plus the
    values where exp turns inf, denormal or 0, each with its neighbours."""
    grid = np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32)
    edges = np.array([88.72283172607422, -103.97207641601562, -87.33654022216797,
                      0.0, -0.0, 1e-45, -1e-45, 1e-38, np.inf, -np.inf, np.nan],
                     dtype=np.float32)
    near = np.concatenate([np.nextafter(edges, np.float32(np.inf)),
                           np.nextafter(edges, np.float32(-np.inf)), edges])
    return np.concatenate([grid.view(np.float32), near.astype(np.float32)])


def test_exp32_within_one_ulp_of_the_rounded_exact_value_everywhere():
    x = _exp_inputs()
    got = np.empty_like(x)
    _exp_kernel()(x, got)
    exact = torch.exp(torch.from_numpy(x).double()).float().numpy()
    # NaN and inf exactly where the exact value rounded to float32 has them
    for cls in (np.isnan, np.isposinf):
        assert np.array_equal(cls(got), cls(exact))
    ok = np.isfinite(exact)
    # measured: at most 1 ulp (as torch's own float32 exp here; not asserted: torch's
    # vectorised exp differs between instruction sets)
    assert _ulps(got[ok], exact[ok]).max() <= 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True,
                          allow_subnormal=True), min_size=1, max_size=16))
def test_exp32_property_any_float32(values):
    x = np.array(values, dtype=np.float32)
    got = np.empty_like(x)
    _exp_kernel()(x, got)
    want = torch.exp(torch.from_numpy(x).double()).float().numpy()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert (_ulps(got[ok], want[ok]) <= 1).all()


def _loop_ir(kernel) -> str:
    """The LLVM IR of a one-loop kernel, compiled for float32 (x86-64 and ARM64 only)."""
    import platform
    if platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
        pytest.skip("vector widths checked on x86-64 and ARM64 only")
    x = np.ones(64, dtype=np.float32)
    kernel(x, np.empty_like(x))
    return next(iter(kernel.inspect_llvm().values()))


def test_exp32_loop_is_vectorised():
    """The reason it exists: the loop that calls it uses vector registers."""
    ir = _loop_ir(_exp_kernel())
    # no exp call left (math.exp's loop calls llvm.exp, which becomes one scalar
    # expf call per lane without a vector math library), and vector float products
    assert not re.search(r"@llvm\.exp|@expf", ir)
    assert re.search(r"fmul [a-z ]*<\d+ x float>", ir)


# ------------------------------------------------ the vectorisable erf (erf_numba)

@functools.lru_cache(maxsize=None)
def _erf_kernel():
    import numba

    from graphopt.codegen.erf_numba import erf32

    @numba.njit(error_model="numpy")  # as the generated kernels are compiled
    def apply(a, out):
        for i in range(a.shape[0]):
            out[i] = erf32(a[i])
    return apply


def test_erf32_within_three_ulp_of_the_rounded_exact_value_everywhere():
    x = np.concatenate([_exp_inputs(), np.float32([0.75, 0.7499999, 0.7500001, 4.0])])
    got = np.empty_like(x)
    _erf_kernel()(x, got)
    exact = torch.erf(torch.from_numpy(x).double()).float().numpy()
    assert np.array_equal(np.isnan(got), np.isnan(exact))
    assert np.array_equal(np.signbit(got), np.signbit(exact))  # erf(-0) is -0
    ok = ~np.isnan(exact)
    # measured: at most 2.4 ulp (the Taylor branch's rounding near |x| = 0.46)
    assert _ulps(got[ok], exact[ok]).max() <= 3


def test_erf32_loop_is_vectorised_and_gelu_kernels_use_it():
    ir = _loop_ir(_erf_kernel())
    assert not re.search(r"@llvm\.erf|@erff|@erf\b", ir)
    assert re.search(r"fmul [a-z ]*<\d+ x float>", ir)
    gm = fx.symbolic_trace(lambda t: torch.nn.functional.gelu(t) * 2.0)
    t = torch.linspace(-10, 10, 4097)
    gelu = codegen.compile_group(gm, (t,))
    assert "import erf32 as ERF" in gelu.source and "math.erf" not in gelu.source
    # Against float64, not torch's float32 GELU: in the negative tail 1 + erf cancels,
    # and torch's float32 answer there differs between AVX2 and AVX-512 and can be
    # the less accurate one. The bound (tests/numerics.py, gelu's rule) is
    # 2 * u * (3|x| + 3|y|) + ...: erf32's 4 ulps of |erf| <= 1 are multiplied by |x|/2.
    assert_near_truth(gelu(t), gm, t)


def test_a_gelu_written_with_erf_is_one_kernel_near_the_truth():
    """A model that writes exact GELU by hand (BERT's original code does) fuses into
    one kernel calling the same erf32, instead of falling back to its five ops."""
    gm = fx.symbolic_trace(lambda t: 0.5 * t * (1.0 + torch.erf(t / math.sqrt(2.0))))
    t = torch.linspace(-10, 10, 4097)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no KernelFallbackWarning
        kernel = codegen.compile_group(gm, (t,))
        got = kernel(t)
    assert "import erf32 as ERF" in kernel.source
    assert_near_truth(got, gm, t)


@pytest.mark.parametrize("fn", [torch.exp, torch.sigmoid, torch.nn.functional.silu])
def test_exp_ops_keep_torch_semantics_on_special_values(fn):
    gm = fx.symbolic_trace(lambda x: fn(x) * 2.0)
    x = torch.tensor([0.0, -0.0, 1.0, -1.0, 88.7, 89.0, -103.9, -104.0, -1e30, 1e30,
                      1e-45, float("inf"), float("-inf"), float("nan")] * 3)
    kernel = codegen.compile_group(gm, (x,), backend="numba")
    assert "import exp32 as EXP" in kernel.source
    # special values exactly as float64 rounded to float32 gives them (inf, NaN, 0),
    # finite ones within exp's derived bound (tests/numerics.py)
    assert_near_truth(kernel(x), gm, x)
    x64 = x.double()  # float64 keeps libm's double exp
    k64 = codegen.compile_group(gm, (x64,), backend="numba")
    assert "EXP = math.exp" in k64.source
    torch.testing.assert_close(k64(x64), gm(x64), equal_nan=True)


def _strided_ir(kernel, inputs) -> str:
    """LLVM IR of a strided kernel's serial loop, compiled here without numba's disk
    cache (code loaded from the cache cannot be inspected)."""
    from graphopt.codegen.cpu import CHUNK, _flat_view
    namespace: dict = {}
    exec(kernel.source.replace("cache=True", "cache=False"), namespace)
    layout = kernel.layout
    out = torch.empty(layout.out_shape)
    strided = [np.asarray(st, dtype=np.int64) for st, p in
               zip(layout.strides, layout.patterns) if p == "strided"]
    serial = namespace["kernel_serial"]
    serial(*[_flat_view(t) for t in inputs], out.view(-1).numpy(), *strided,
           np.asarray(layout.shape, dtype=np.int64), CHUNK)
    return "\n".join(serial.inspect_llvm().values())


def test_sliced_and_broadcast_rows_keep_the_strided_loop_vectorised():
    """A slice's row (step 1) is read through a slice of the chunk, a per-row value
    (step 0) once per chunk: both written into the source, so LLVM vectorises the
    row loop. Only a transposed operand keeps a run-time stride (s{k})."""
    gm = fx.symbolic_trace(lambda x, b, s: torch.relu(x * s + b))
    x = torch.randn(16, 2048)[:, :1024]          # a slice: contiguous rows
    b, s = torch.randn(1024), torch.randn(16, 1)  # a bias along the row; one per row
    kernel = codegen.compile_group(gm, (x, b, s), backend="numba")
    assert kernel.layout.patterns[:3] == ("strided", "strided", "strided")
    assert kernel.layout.inner_steps[:3] == (1, 1, 0)
    assert not kernel.layout.runtime_strides
    loop = kernel.source.split("def kernel_serial(")[1]
    assert "r0[jj]" in loop and "r1[jj]" in loop and not re.search(r"\* s\d", loop)
    assert_near_truth(kernel(x, b, s), gm, x, b, s)
    assert re.search(r"fmul [a-z ]*<\d+ x float>", _strided_ir(kernel, (x, b, s)))
    xt = torch.randn(1024, 16).t()               # a transposed view: run-time stride
    transposed = codegen.compile_group(gm, (xt, b, s), backend="numba")
    assert transposed.layout.runtime_strides
    assert_near_truth(transposed(xt, b, s), gm, xt, b, s)
