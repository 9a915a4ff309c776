"""Chapter 4's pattern kernels: oneDNN on the CPU, Triton (interpreted) for the GPU.

The Triton kernels run under TRITON_INTERPRET=1 in a child process (it must be set
before `import triton`, which another test may have done); tiny sizes only. The cuDNN
path needs a GPU and is not run here.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from graphopt.codegen import onednn, rowwise

CHILD = os.environ.get("GRAPHOPT_TRITON_CHILD") == "1"
child_only = pytest.mark.skipif(not CHILD, reason="runs in the interpreter subprocess")
ACTS = [a for a in onednn.ACTIVATIONS.values()]


@pytest.mark.skipif(CHILD, reason="this is the child")
def test_triton_pattern_kernels_in_interpreter_subprocess():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "GRAPHOPT_TRITON_CHILD": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", "triton_", __file__], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "4 passed" in r.stdout, r.stdout[-2000:]  # 2 matmul, LN, NaN source


@child_only
@pytest.mark.parametrize("bias", [True, False])
def test_triton_matmul_epilogue_matches_eager(bias):
    from graphopt.codegen import patterns_gpu

    torch.manual_seed(0)
    x, w = torch.randn(2, 5, 24), torch.randn(20, 24)
    b = torch.randn(20) if bias else None
    with torch.no_grad():
        for act in ACTS:
            if not patterns_gpu.triton_linear_ok(x, w, act):
                assert act.algorithm == "tanh"  # the one epilogue not written
                continue
            got = patterns_gpu.linear_act(x, w, b, act, block=(16, 16, 16))
            torch.testing.assert_close(got, act.eager(F.linear(x, w, b)),
                                       rtol=1e-4, atol=1e-4)


@child_only
def test_triton_add_layer_norm_matches_eager():
    from graphopt.codegen import patterns_gpu

    torch.manual_seed(0)
    a, b = torch.randn(3, 7, 40), torch.randn(3, 7, 40)
    w, bias = torch.randn(40), torch.randn(40)
    with torch.no_grad():
        assert patterns_gpu.triton_rows_ok(a, b, w, bias)
        for ww, bb in ((w, bias), (None, None)):
            got = patterns_gpu.add_layer_norm(a, b, ww, bb, 1e-5)
            torch.testing.assert_close(got, F.layer_norm(a + b, (40,), ww, bb, 1e-5),
                                       rtol=1e-4, atol=1e-4)


def test_triton_relu_keeps_nan_like_torch():
    # source check: tl.maximum(y, 0) would turn NaN into 0, torch.relu keeps NaN
    from pathlib import Path

    import graphopt.codegen as cg
    src = (Path(cg.__file__).parent / "patterns_triton.py").read_text()
    assert "tl.where(y < 0.0, 0.0, y)" in src


def test_gpu_paths_are_not_chosen_for_cpu_tensors():
    from graphopt.codegen import patterns_gpu

    if CHILD:
        pytest.skip("the interpreter runs Triton on CPU tensors on purpose")
    x = torch.randn(2, 4)
    assert not patterns_gpu.triton_linear_ok(x, torch.randn(3, 4), onednn.RELU)
    assert not patterns_gpu.triton_rows_ok(x, x, None, None)


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
def test_onednn_kernels_match_eager_with_and_without_packing():
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 8, 9, 9), torch.randn(6, 4, 3, 3), torch.randn(6)
    args = ([1, 1], [2, 2], [1, 1], 2)
    packed = onednn.pack_conv_weight(w, *args, x.shape)
    assert packed.layout is torch._mkldnn
    with torch.no_grad():
        for act in ACTS:
            want = act.eager(F.conv2d(x, w, b, 2, 1, 1, 2))
            for weight in (w, packed):
                got = onednn.conv_act(x, weight, b, *args, act)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        other = torch.randn_like(want)
        got = onednn.conv_add_relu(x, packed, b, other, *args)
        want = torch.relu(F.conv2d(x, w, b, 2, 1, 1, 2) + other)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        lw = torch.randn(5, 8)
        lp = onednn.pack_linear_weight(lw, 6)
        a = torch.randn(2, 3, 8)
        for act in ACTS:
            torch.testing.assert_close(onednn.linear_act(a, lp, None, act),
                                       act.eager(F.linear(a, lw)), rtol=1e-4, atol=1e-4)


def test_why_not_names_the_reason():
    assert "float32" in onednn.why_not(torch.randn(2, dtype=torch.float64))
    assert onednn.why_not(torch.randn(2)) in (None, "this torch build has no oneDNN")


def test_row_kernel_domain():
    a = torch.randn(4, 8)
    assert rowwise.usable(a, a, None, None) in (True, False)  # numba may be missing
    assert not rowwise.usable(a, a.t().contiguous().t(), None, None)  # not contiguous
    assert not rowwise.usable(a.double(), a.double(), None, None)
    assert not rowwise.usable(a, a[:1].expand(4, 8), None, None)  # a broadcast view


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
def test_a_conv_without_activation_on_a_1x1_map_runs_eager_conv2d_as_one_kernel():
    """The squeeze-and-excitation case (chapter 7): oneDNN's fixed cost per call beats
    the work on a 1x1 map, so PackedConv keeps eager conv2d there; with an activation
    (two eager kernels) the fused oneDNN kernel stays."""
    import graphopt
    from graphopt.passes.fused_modules import ConvReLU, PackedConv

    torch.manual_seed(0)
    x, w, b = torch.randn(1, 16, 1, 1), torch.randn(8, 16, 1, 1), torch.randn(8)
    packed = PackedConv(act=onednn.ACTIVATIONS["none"])
    packed.prepack(w, x.shape)
    assert packed.kernel == "eager" and not packed.is_prepacked and packed.why_eager
    fused = ConvReLU()
    fused.prepack(w, x.shape)
    assert fused.kernel == "onednn" and fused.is_prepacked
    big = PackedConv(act=onednn.ACTIVATIONS["none"])
    big.prepack(w, (1, 16, 2, 2))
    assert big.kernel == "onednn" and big.is_prepacked
    with torch.no_grad():
        torch.testing.assert_close(packed(x, w, b), F.conv2d(x, w, b))
        torch.testing.assert_close(fused(x, w, b), torch.relu(F.conv2d(x, w, b)))
    root, graph = torch.nn.Module(), torch.fx.Graph()
    root.m = packed
    graph.output(graph.call_module("m", tuple(graph.placeholder(n) for n in "xwb")))
    assert graphopt.run(torch.fx.GraphModule(root, graph), x, w, b).kernels == 1
