"""Generated Triton kernels, run by Triton's CPU interpreter on tiny inputs (ch. 6).

TRITON_INTERPRET=1 must be set before `import triton`: Triton's own library functions
(tl.sigmoid ...) are made interpreted or compiled when triton is imported. Another test
in this process may already have imported it, so the parent process runs this same
file again in a child process with the variable set; only the child runs the kernels.
"""

import operator
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import fx

from graphopt import codegen
from numerics import assert_near_truth

pytest.importorskip("triton")

CHILD = os.environ.get("GRAPHOPT_TRITON_CHILD") == "1"


@pytest.mark.skipif(CHILD, reason="this is the child")
def test_triton_kernels_in_interpreter_subprocess():
    env = {**os.environ, "TRITON_INTERPRET": "1", "GRAPHOPT_TRITON_CHILD": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        __file__], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "6 passed" in r.stdout, r.stdout[-2000:]


child_only = pytest.mark.skipif(not CHILD, reason="runs in the interpreter subprocess")


def check(kernel, gm, inputs):
    """Against the float64 answer within its derived bound (tests/numerics.py)."""
    got, want = kernel(*inputs), gm(*inputs)
    assert kernel.backend == "triton"
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_near_truth(got, gm, *inputs)


@child_only
def test_flat_chain_with_partial_last_block():
    gm = fx.symbolic_trace(lambda x, y: torch.relu(x * 2.0 + y).abs())
    x, y = torch.randn(100), torch.randn(100)
    kernel = codegen.compile_group(gm, (x, y), backend="triton", block=64)
    assert "mask = offs < n" in kernel.source
    check(kernel, gm, (x, y))  # 2 blocks of 64, the second one mostly masked


@child_only
def test_broadcast_strided_and_scalar_operands():
    gm = fx.symbolic_trace(lambda x, w, s: torch.sigmoid(x * w) - s)
    x = torch.randn(5, 7, 3).permute(2, 0, 1)      # non-contiguous
    w, s = torch.randn(7), torch.tensor(0.25)
    kernel = codegen.compile_group(gm, (x, w, s), backend="triton")
    assert kernel.layout.patterns == ("strided", "strided", "scalar", "flat")
    check(kernel, gm, (x, w, s))


@child_only
def test_float64_and_gelu_tanh():
    gm = fx.symbolic_trace(lambda x: torch.tanh(torch.nn.functional.gelu(x)))
    x = torch.randn(33, dtype=torch.float64)
    kernel = codegen.compile_group(gm, (x,), backend="triton")
    got = kernel(x)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, gm(x), rtol=1e-6, atol=1e-6)


@child_only
def test_same_group_same_layout_hits_cache():
    gm = fx.symbolic_trace(lambda x: torch.clamp(x, -0.5, 0.5) * 3.0)
    kernel = codegen.compile_group(gm, backend="triton")
    kernel(torch.randn(10))
    hits = codegen.cache_info().hits
    check(kernel, gm, (torch.randn(17),))
    assert codegen.cache_info().hits == hits + 1


@child_only
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([operator.add, operator.mul, operator.sub]),
                min_size=1, max_size=4),
       st.lists(st.integers(1, 9), min_size=1, max_size=3),
       st.booleans())
def test_random_chains_equal_reference(ops, shape, broadcast):
    graph = fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    value = x
    for fn in ops:
        value = graph.call_function(torch.relu, (graph.call_function(fn, (value, y)),))
    graph.output(value)
    gm = fx.GraphModule(torch.nn.Module(), graph)
    inputs = (torch.randn(shape), torch.randn(shape[-1:] if broadcast else shape))
    check(codegen.compile_group(gm, inputs, backend="triton"), gm, inputs)


@child_only
def test_nan_propagates_like_torch():
    # tl.maximum(nan, 0.0) is 0.0; torch.relu(nan), maximum and clamp keep the NaN
    gm = fx.symbolic_trace(lambda x, y: torch.relu(x) + torch.maximum(x, y)
                           + torch.clamp(x, -0.5, 0.5) + torch.nn.functional.relu6(y))
    nan = float("nan")
    x, y = torch.tensor([nan, -1.0, 2.0, 0.3, 0.0]), torch.tensor([0.0, nan, 1, 0, 7])
    got = codegen.compile_group(gm, (x, y), backend="triton")(x, y)
    torch.testing.assert_close(got, gm(x, y), equal_nan=True)
    assert got[:2].isnan().all()
    gates = fx.symbolic_trace(lambda t: torch.nn.functional.hardswish(t)
                              + torch.nn.functional.hardsigmoid(t))
    torch.testing.assert_close(codegen.compile_group(gates, (x,), backend="triton")(x),
                               gates(x), equal_nan=True)
    relu = codegen.compile_group(fx.symbolic_trace(lambda t: torch.relu(t)), (x,),
                                 backend="triton")
    assert torch.equal(relu(x).isnan(), torch.relu(x).isnan())
