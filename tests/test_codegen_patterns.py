"""The backend's pattern kernels (chapter 7): oneDNN and MKL on the CPU, Triton
(interpreted) for the GPU, and the kernel the backend stage binds to each fused
module (`graphopt.backend.bind`, on a graph of one call).

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

from graphopt.backend import bind, onednn, rowwise
from graphopt.passes import activations
from graphopt.policy import Policy, resolve

# the fused kernels on small shapes: the policy's small-work rules are off here
pytestmark = pytest.mark.usefixtures("small_work_fused")

CHILD = os.environ.get("GRAPHOPT_TRITON_CHILD") == "1"
child_only = pytest.mark.skipif(not CHILD, reason="runs in the interpreter subprocess")
ACTS = [a for a in activations.ACTIVATIONS.values()]


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
    from graphopt.backend import patterns_gpu

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
    from graphopt.backend import patterns_gpu

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

    import graphopt.backend as be
    src = (Path(be.__file__).parent / "patterns_triton.py").read_text()
    assert "tl.where(y < 0.0, 0.0, y)" in src


def test_gpu_paths_are_not_chosen_for_cpu_tensors():
    from graphopt.backend import patterns_gpu

    if CHILD:
        pytest.skip("the interpreter runs Triton on CPU tensors on purpose")
    x = torch.randn(2, 4)
    assert not patterns_gpu.triton_linear_ok(x, torch.randn(3, 4), activations.RELU)
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


MKL_RULE = Policy(gemm_library="mkl")  # the earlier rule: MKL's GEMM where it can


def _bind(module, weight, input_shape, policy=None) -> list[str]:
    """What the backend stage does to `module` in a graph of one call on a constant
    `weight` and an input of `input_shape`: picks its kernel, prepacks the weight,
    binds the call. Returns the stage's notes for it."""
    root, graph = torch.nn.Module(), torch.fx.Graph()
    root.m, root.w = module, weight
    x, w, b = graph.placeholder("x"), graph.get_attr("w"), graph.placeholder("b")
    x.meta["val"], w.meta["val"] = torch.empty(input_shape, dtype=weight.dtype), weight
    node = graph.call_module("m", (x, w, b))
    graph.output(node)
    gm = torch.fx.GraphModule(root, graph)
    assert gm.m is module and gm.w is weight
    if policy == "measured":  # as graphopt.tuning asks it: timing, recording
        return bind(gm, node, module, Policy.measured().recording({}))
    return bind(gm, node, module, resolve(policy))


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
@pytest.mark.parametrize("policy, eager_faster", [("fixed", None), ("measured", True),
                                                  ("measured", False)])
def test_a_conv_on_a_1x1_map_runs_eager_conv2d_by_the_policy(policy, eager_faster,
                                                             monkeypatch):
    """The squeeze-and-excitation case (chapter 7): oneDNN's fixed cost per call beats
    the work on a 1x1 map, so a conv there runs eager conv2d. The fixed policy always
    does (two kernels with an activation) and never times; the measured one takes
    eager with an activation only where it measured faster (forced here both ways).
    The interpreter counts what ran."""
    import graphopt
    from graphopt.backend.single_ops import PackedConv
    from graphopt.passes.fused_modules import ConvReLU

    asked = []
    monkeypatch.setattr(onednn, "_EAGER_CONV_CHOICE", {})
    monkeypatch.setattr(onednn, "_measure_eager_conv",
                        lambda *a: asked.append(a) or eager_faster)
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 16, 1, 1), torch.randn(8, 16, 1, 1), torch.randn(8)
    packed = PackedConv(act=activations.ACTIVATIONS["none"])
    notes = _bind(packed, w, x.shape, policy)
    assert packed.kernel == "eager" and not packed.is_prepacked and packed.why_eager
    assert notes == [f"backend: m (PackedConv) runs eager: {packed.why_eager}"]
    fused = ConvReLU()
    notes = _bind(fused, w, x.shape, policy)
    eager = eager_faster is not False
    assert notes == ([f"backend: m (ConvReLU) runs eager: {fused.why_eager}"]
                     if eager else [])
    assert bool(asked) == (policy == "measured")
    assert fused.kernel == ("eager" if eager else "onednn")
    assert fused.is_prepacked != eager and bool(fused.why_eager) == eager
    assert (f"policy {policy}" in fused.why_eager) == eager
    big = PackedConv(act=activations.ACTIVATIONS["none"])  # over small_gemm_flops
    assert _bind(big, w, (1, 16, 96, 96), policy) == []
    assert big.kernel == "onednn" and big.is_prepacked
    with torch.no_grad():
        torch.testing.assert_close(packed(x, w, b), F.conv2d(x, w, b))
        torch.testing.assert_close(fused(x, w, b), torch.relu(F.conv2d(x, w, b)))
    assert graphopt.run(_one_node(packed), x, w, b).kernels == 1
    report = graphopt.run(_one_node(fused), x, w, b)
    assert report.kernels == (2 if eager else 1)


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
def test_the_1x1_map_choice_is_measured_once_per_shape():
    from graphopt.passes.fused_modules import ConvAddReLU

    w = torch.randn(8, 16, 1, 1)
    args = ([0, 0], [1, 1], [1, 1], 1)
    first = onednn.eager_conv_faster(w, (1, 16, 1, 1), args, activations.RELU)
    assert isinstance(first, bool)
    assert onednn.eager_conv_faster(w, (1, 16, 1, 1), args, activations.RELU) is first
    add = ConvAddReLU()  # its add and ReLU ride on oneDNN: never eager for speed
    assert _bind(add, w, (1, 16, 1, 1)) == []
    assert add.kernel == "onednn" and add.is_prepacked


# ---------------------------------------------- MKL's packed GEMM for float32 linears

needs_mkl = pytest.mark.skipif(not (onednn.available() and onednn.mkl_available()),
                               reason="no MKL in this torch build")


def _one_node(module, n_inputs=3):
    """A graph of one call to `module`, for the interpreter's kernel count."""
    root, graph = torch.nn.Module(), torch.fx.Graph()
    root.m = module
    args = tuple(graph.placeholder(f"a{i}") for i in range(n_inputs))
    graph.output(graph.call_module("m", args))
    return torch.fx.GraphModule(root, graph)


@needs_mkl
@pytest.mark.parametrize("policy, faster", [("fixed", None), ("mkl", None),
                                            ("measured", True), ("measured", False)])
@pytest.mark.parametrize("act", ["none", "gelu", "relu", "gelu_tanh"])
def test_linear_kernel_choice_counts_and_equivalence_on_3d_inputs(act, policy, faster,
                                                                  monkeypatch):
    """The default rule binds oneDNN with the bias and activation as post-ops (one
    kernel); `gemm_library="mkl"` runs MKL's GEMM (bias in the GEMM) before exact
    GELU or alone; the measured policy times MKL against oneDNN where MKL can take
    the activation (none, exact GELU; the verdict forced here, both ways). The
    interpreter counts an activation after MKL as its own kernel."""
    import graphopt
    from graphopt.passes.fused_modules import LinearReLU

    asked = []
    monkeypatch.setattr(onednn, "mkl_faster",
                        lambda *a: asked.append(a) or faster)
    torch.manual_seed(0)
    w, b = torch.randn(24, 16), torch.randn(24)
    mod = LinearReLU(activations.ACTIVATIONS[act])
    assert mod.kernel == "reference" and mod.plan is None  # as the pass left it
    notes = _bind(mod, w, (2, 5, 16),
                  Policy(gemm_library="mkl") if policy == "mkl" else policy)
    takes = act in ("none", "gelu")  # what torch can run after MKL's GEMM
    assert bool(asked) == (takes and policy == "measured")
    mkl = takes and (policy == "mkl" or faster is True)
    assert mod.kernel == ("mkl" if mkl else "onednn") and mod.is_prepacked
    assert mod.why.startswith("MKL's packed GEMM") == mkl
    count = "2 kernels" if act == "gelu" else "1 kernel"
    assert notes == ([f"backend: m (LinearReLU) runs {count}: {mod.why}"] if mkl
                     else [f"backend: m (LinearReLU) runs oneDNN: {mod.why}"])
    assert mkl or "post-op" in mod.why or "measured faster" in mod.why
    act_kernels = 0 if act == "none" else 1
    gm = _one_node(mod)
    with torch.no_grad():
        for seed in range(3):  # fresh inputs, repeated calls on the one pack
            x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(seed))
            want = activations.ACTIVATIONS[act].eager(F.linear(x, w, b))
            torch.testing.assert_close(mod(x, w, b), want, rtol=1e-5, atol=1e-5)
            report = graphopt.run(gm, x, w, b)
            kernels = 1 + (act_kernels if mkl else 0)
            assert report.kernels == kernels
            # two kernels in a row: the product is written, then read back by the GELU
            assert report.bytes_written == kernels * want.numel() * want.element_size()
        for x in (torch.randn(3, 16), torch.randn(5, 2, 16).transpose(0, 1)):
            # other rows than packed for (the plain weight), a strided view, no bias
            for bias in (b, None):
                want = activations.ACTIVATIONS[act].eager(F.linear(x, w, bias))
                torch.testing.assert_close(mod(x, w, bias), want, rtol=1e-5,
                                           atol=1e-5)


@needs_mkl
def test_mkl_or_onednn_is_measured_once_per_shape_and_threads():
    act = activations.ACTIVATIONS["gelu"]
    w = torch.randn(64, 32)
    onednn._MKL_CHOICE.clear()
    state = torch.random.get_rng_state()
    verdict = onednn.mkl_faster(w, (2, 8, 32), act)
    assert isinstance(verdict, bool) and len(onednn._MKL_CHOICE) == 1
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's stream
    assert onednn.mkl_faster(torch.randn(64, 32), (2, 8, 32), act) is verdict
    assert len(onednn._MKL_CHOICE) == 1  # same shape, same answer, not re-measured
    onednn.mkl_faster(w, (2, 8, 32), activations.ACTIVATIONS["none"])
    assert len(onednn._MKL_CHOICE) == 2


@needs_mkl
def test_mkl_pack_is_tied_to_its_weight_version_and_never_copied(monkeypatch):
    import copy
    import io

    from graphopt.backend.single_ops import PackedLinear

    monkeypatch.setattr(onednn, "mkl_faster", lambda *a: True)
    torch.manual_seed(1)
    w, b, x = torch.randn(8, 6), torch.randn(8), torch.randn(4, 6)
    mod = PackedLinear(act=activations.ACTIVATIONS["none"])
    _bind(mod, w, x.shape, MKL_RULE)
    assert mod.kernel == "mkl" and mod.packed(w, 4) is not None
    copied = copy.deepcopy(mod)  # shares MKL's buffer (tied to its address)
    assert copied._pack[2] is mod._pack[2] and copied._pack[0] is not w
    with torch.no_grad():
        torch.testing.assert_close(copied(x, copied._pack[0], b), F.linear(x, w, b))
        w.mul_(-2.0)  # an in-place write (load_state_dict does one): pack is stale
        assert mod.packed(w, 4) is None
        torch.testing.assert_close(mod(x, w, b), F.linear(x, w, b))
    buf = io.BytesIO()
    torch.save(mod, buf)  # MKL's buffer is not saved: the plain weight runs
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert not loaded.is_prepacked and loaded.kernel == "mkl"
    with torch.no_grad():
        torch.testing.assert_close(loaded(x, w, b), F.linear(x, w, b))


@needs_mkl
def test_without_mkl_or_when_mkl_cannot_pack_onednn_runs_it(monkeypatch):
    import graphopt
    from graphopt.passes.fused_modules import LinearReLU

    w, b, x = torch.randn(8, 6), torch.randn(8), torch.randn(2, 3, 6)
    monkeypatch.setattr(onednn, "mkl_available", lambda: False)
    mod = LinearReLU(activations.ACTIVATIONS["gelu"])
    assert _bind(mod, w, x.shape, MKL_RULE) == [
        f"backend: m (LinearReLU) runs oneDNN: {mod.why}"]
    assert mod.kernel == "onednn" and "(no MKL here)" in mod.why
    assert graphopt.run(_one_node(mod), x, w, b).kernels == 1  # the post-op
    monkeypatch.undo()

    def broken(weight, rows):
        raise RuntimeError("MKL packing is not supported")

    monkeypatch.setattr(onednn, "pack_mkl_linear_weight", broken)
    monkeypatch.setattr(onednn, "mkl_faster", lambda *a: True)
    mod = LinearReLU(activations.ACTIVATIONS["none"])
    notes = _bind(mod, w, x.shape, MKL_RULE)
    assert mod.kernel == "onednn" and "oneDNN runs it" in mod.why
    assert notes == [f"backend: m (LinearReLU) runs oneDNN: {mod.why}"]
    with torch.no_grad():
        torch.testing.assert_close(mod(x, w, b), F.linear(x, w, b), rtol=1e-5,
                                   atol=1e-5)


@needs_mkl
def test_mkl_linear_under_autograd_and_other_dtypes_runs_eager(monkeypatch):
    from graphopt.passes.fused_modules import LinearReLU

    monkeypatch.setattr(onednn, "mkl_faster", lambda *a: True)
    torch.manual_seed(2)
    w = torch.randn(8, 6, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    mod = LinearReLU(activations.ACTIVATIONS["gelu"])
    _bind(mod, w, (4, 6), MKL_RULE)
    assert mod.kernel == "mkl"
    x = torch.randn(4, 6, requires_grad=True)
    mod(x, w, b).sum().backward()  # MKL's op has no backward: eager ops run
    got = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    F.gelu(F.linear(x, w, b)).sum().backward()
    for g, t in zip(got, (x, w, b)):
        torch.testing.assert_close(g, t.grad)
    with torch.no_grad():
        xd, wd, bd = x.double(), w.double(), b.double()
        torch.testing.assert_close(mod(xd, wd, bd), F.gelu(F.linear(xd, wd, bd)))


@needs_mkl
def test_eval_bert_runs_its_linears_on_mkl_and_checks(monkeypatch):
    """BERT (random weights, eval) through the whole pipeline with check=True under
    `gemm_library="mkl"`: the plain and GELU linears run MKL's GEMM; the caller's
    weights are untouched (the default rule's oneDNN: tests/test_gemm_choice.py)."""
    from graphopt import models, optimize
    from graphopt.passes.fused_modules import LinearReLU

    monkeypatch.setattr(onednn, "mkl_faster", lambda *a: True)
    model, (ids, mask) = models.example("bert", batch=2, seq_len=8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = optimize(model, input_ids=ids, attention_mask=mask, check=True,
                   stats=False, keep_stages=False, policy=MKL_RULE)
    linears = [m for m in res.module.modules() if isinstance(m, LinearReLU)]
    assert linears and all(m.kernel == "mkl" and m.is_prepacked for m in linears)
    assert any(m.act.name == "gelu" for m in linears)
    packs = {id(m._pack[0]) for m in linears}
    assert not packs & {id(p) for p in model.parameters()}  # nothing shared
    new_ids, _ = models.token_inputs(30522, *ids.shape, seed=7)
    with torch.no_grad():
        want = model(input_ids=new_ids, attention_mask=mask)
        for _ in range(3):
            got = res.module(input_ids=new_ids, attention_mask=mask)
            torch.testing.assert_close(_hidden(got), _hidden(want), rtol=1e-3,
                                       atol=1e-3)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def _hidden(out):
    """The last hidden state of a BERT output (a ModelOutput, a tuple or a tensor)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return _hidden(out[0])


# ------------------------------------ the backend's single ops, before and expected

def _single_conv(build, **modules):
    """An aten graph of `build(g, x)` on constants w, b, annotated for (1, 3, 8, 8)."""
    from graphopt.capture import annotate

    torch.manual_seed(3)
    root = torch.nn.Module()
    root.register_buffer("w", torch.randn(4, 3, 3, 3))
    root.register_buffer("b", torch.randn(4))
    for name, module in modules.items():
        root.add_module(name, module)
    g = torch.fx.Graph()
    build(g, g.placeholder("x"), g.get_attr("w"), g.get_attr("b"))
    return annotate(torch.fx.GraphModule(root, g), torch.randn(1, 3, 8, 8))


def _conv(g, x, w, b):
    g.output(g.call_function(torch.ops.aten.conv2d.default, (x, w, b)))


@pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
def test_backend_rewrites_a_lone_conv_into_a_packed_conv():
    """TVM style (tests/graph_match.py): a conv no pattern took becomes one
    PackedConv call on the same x, w and b, oneDNN on its prepacked weight."""
    from graph_match import assert_same_graph
    from graphopt.backend import bind_backend
    from graphopt.backend.single_ops import PackedConv

    before = _single_conv(_conv)
    res = bind_backend(before)
    packed = PackedConv(act=activations.ACTIVATIONS["none"])
    packed.kernel = "onednn"  # the setting the stage chose (graph_match compares it)
    expected = _single_conv(lambda g, x, w, b: g.output(g.call_module("c", (x, w, b))),
                            c=packed)
    assert_same_graph(res.module, expected)
    (conv,) = [m for m in res.module.modules() if isinstance(m, PackedConv)]
    assert conv.kernel == "onednn" and conv.is_prepacked
    assert not [m for m in before.modules() if isinstance(m, PackedConv)]
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), before(x), rtol=1e-4, atol=1e-4)


def test_backend_leaves_a_lone_conv_alone_without_onednn(monkeypatch):
    from graph_match import assert_same_graph
    from graphopt.backend import bind_backend

    monkeypatch.setattr(onednn, "available", lambda: False)
    before = _single_conv(_conv)
    res = bind_backend(before)
    assert not res.rewritten
    assert_same_graph(res.module, before)
