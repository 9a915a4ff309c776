"""oneDNN called directly: convolution primitives made once (backend/onednn_direct.py).

Each test optimizes a real model, so the primitives run where the backend puts
them, and compares with eager torch; a primitive must be remade when what it was
made for changes (the input's layout, the weight, written in place or replaced),
and torch's op must take over where oneDNN cannot take the tensors by address.
"""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import graphopt
from graphopt.backend import onednn_capi, onednn_direct
from graphopt.models import example
from graphopt.passes.activations import RELU
from graphopt.passes.convert_layout import ToLayout
from graphopt.torch_internals import TorchDispatchMode
from graphopt.verify import random_like

pytestmark = pytest.mark.skipif(
    bool(onednn_capi.why_unavailable()),
    reason=f"oneDNN cannot be called directly here: {onednn_capi.why_unavailable()}")

ACTS = {"none": nn.Identity(), "relu": nn.ReLU(), "relu6": nn.ReLU6(),
        "hardswish": nn.Hardswish(), "silu": nn.SiLU(), "gelu": nn.GELU(),
        "gelu_tanh": nn.GELU(approximate="tanh")}


def _conv_net(act: str, groups=1, stride=1, padding=1, dilation=1, bias=True):
    """Two convs big enough for the policy to give them oneDNN (over
    `small_gemm_flops` on a 64x64 input)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(32, 32, 3, stride, padding, dilation, groups, bias=bias)
    return nn.Sequential(conv, ACTS[act], nn.Conv2d(32, 48, 3), nn.ReLU()).eval()


def _image(*, seed=0, channels_last=True, size=(64, 64)):
    """A channels-last image (the layout `convert_layout` gives conv regions, and
    the one primitives take), or NCHW."""
    x = torch.randn(1, 32, *size, generator=torch.Generator().manual_seed(seed))
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _primitives(gm) -> list:
    """The convs' and linears' primitives (a `ToLayout`'s reorder is another
    kind: tests/test_onednn_reorder.py)."""
    return [m._primitive for m in gm.modules()
            if hasattr(m, "_primitive") and not isinstance(m, ToLayout)]


def _check(model, *inputs, atol=1e-4):
    with torch.no_grad():
        gm = graphopt.optimize(model, *inputs).module
        for x in (inputs, random_like(inputs, seed=1)):
            torch.testing.assert_close(gm(*x), model(*x), atol=atol, rtol=1e-4)
    return gm


@pytest.mark.parametrize("act", sorted(ACTS))
def test_every_activation_post_op_answers_as_eager(act):
    gm = _check(_conv_net(act), _image())
    made = _primitives(gm)
    assert made and all(isinstance(p, onednn_direct.ConvPrimitive) for p in made)


@pytest.mark.parametrize("groups, stride, padding, dilation, bias", [
    (1, 2, 0, 1, True), (2, 1, 2, 2, False), (32, 1, 1, 1, True), (8, 2, 1, 1, True),
    (1, (2, 1), (0, 1), (1, 2), True)])
def test_strides_padding_dilation_groups_answer_as_eager(groups, stride, padding,
                                                         dilation, bias):
    model = _conv_net("relu", groups, stride, padding, dilation, bias)
    gm = _check(model, _image(size=(61, 59)))
    made = _primitives(gm)
    assert made and all(p is not None for p in made)


def test_residual_add_post_op_and_channels_last_regions():
    model, inputs = example("small_resnet")
    gm = _check(model.eval(), *inputs)
    kinds = {type(m).__name__ for m in gm.modules() if hasattr(m, "_primitive")}
    assert "ConvAddReLU" in kinds and all(p is not None for p in _primitives(gm))


def test_mobilenet_v3_runs_every_conv_and_linear_on_a_primitive():
    """Both classifier linears too: the 1024 -> 1000 one, below the policy's
    `onednn_gemm_flops`, is not sent to MKL's shorter call where a primitive's
    call is shorter still (the "made once" rule)."""
    model, inputs = example("mobilenet_v3_small")
    gm = _check(model.eval(), *inputs)
    made = _primitives(gm)
    convs = [p for p in made if isinstance(p, onednn_direct.ConvPrimitive)]
    linears = [p for p in made if isinstance(p, onednn_direct.LinearPrimitive)]
    assert len(convs) == 34 and len(linears) == 2 and len(made) == 36
    last = gm.get_submodule(next(n.target for n in reversed(gm.graph.nodes)
                                 if n.op == "call_module"))
    assert last.kernel == "onednn" and "made once" in last.why


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh", "silu"])
def test_linear_post_ops_on_rows_of_any_rank_answer_as_eager(act):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), ACTS[act], nn.Linear(512, 256)).eval()
    gm = _check(model, torch.randn(2, 64, 256))
    made = _primitives(gm)
    assert made and all(isinstance(p, onednn_direct.LinearPrimitive) for p in made)
    with torch.no_grad():  # a transposed (not contiguous) input: torch's op
        x = torch.randn(2, 256, 64).transpose(1, 2)
        torch.testing.assert_close(gm(x), model(x), atol=1e-4, rtol=1e-4)


def test_bert_runs_its_onednn_linears_on_primitives():
    model, inputs = example("bert")
    gm = _check(model.eval(), *inputs, atol=2e-4)
    kinds = {type(p).__name__ for p in _primitives(gm)}
    assert kinds == {"LinearPrimitive"}


def test_a_primitive_is_kept_and_remade_when_its_input_or_weight_changes():
    model, x = _conv_net("relu"), _image()
    with torch.no_grad():
        gm = graphopt.optimize(model, x).module
        gm(x)
        first = _primitives(gm)
        gm(_image(seed=1))
        assert [a is b for a, b in zip(first, _primitives(gm))] == [True] * len(first)
        for p in list(gm.parameters()) + list(model.parameters()):
            p.mul_(0.5)  # in place: the version counter moves
        torch.testing.assert_close(gm(x), model(x), atol=1e-4, rtol=1e-4)
        assert not any(a is b for a, b in zip(first, _primitives(gm)))
        # a strided view of the same shape: torch's op (not channels-last)
        view = torch.randn(1, 32, 128, 64).to(memory_format=torch.channels_last)
        view = view[:, :, ::2]
        torch.testing.assert_close(gm(view), model(view), atol=1e-4, rtol=1e-4)
        y = _image(seed=2)
        torch.testing.assert_close(gm(y), model(y), atol=1e-4, rtol=1e-4)
        # another thread count: oneDNN fixed its split when it made the primitive
        before, threads = _primitives(gm), torch.get_num_threads()
        torch.set_num_threads(threads + 1)
        try:
            torch.testing.assert_close(gm(y), model(y), atol=1e-4, rtol=1e-4)
        finally:
            torch.set_num_threads(threads)
        assert not any(a is b for a, b in zip(before, _primitives(gm)))
        assert all(p.key[-1] == threads + 1 for p in _primitives(gm))


def test_where_onednn_has_only_reference_code_torchs_op_runs(monkeypatch):
    model, x = _conv_net("relu"), _image()
    monkeypatch.setattr(onednn_capi, "implementation", lambda pd: "ref:any")
    with torch.no_grad():
        gm = graphopt.optimize(model, x).module
        for _ in range(2):
            torch.testing.assert_close(gm(x), model(x), atol=1e-4, rtol=1e-4)
    made = _primitives(gm)
    assert made and all(isinstance(p, onednn_direct.Refused) for p in made)
    assert not onednn_direct.ConvPrimitive.takes(_image(channels_last=False))


def test_tensors_oneDNN_cannot_take_by_address_take_torchs_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    w, b = torch.randn(48, 32, 3, 3), torch.randn(48)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(_image())
    assert not onednn_direct.usable(fake, w, b)
    assert not onednn_direct.ConvPrimitive.takes(_image()[0])  # not a batch
    assert not onednn_direct.LinearPrimitive.takes(torch.randn(4, 6).t())
    assert not onednn_direct.usable(_image(), w, torch.randn(96)[::2])
    assert onednn_direct.usable(_image(), w, b) and onednn_direct.usable(_image(), w,
                                                                          None)
    image = _image()
    with TorchDispatchMode():  # a mode watching (the interpreter's counter)
        assert not onednn_direct.usable(image, w, b)


def test_the_interpreter_makes_no_primitive_and_counts_torchs_op():
    model, x = _conv_net("relu"), _image()
    gm = graphopt.optimize(model, x).module
    assert all(p is None for p in _primitives(gm))  # optimize's own runs: none
    report = graphopt.run(gm, x)
    assert all(p is None for p in _primitives(gm))
    with torch.no_grad():
        torch.testing.assert_close(report.outputs, model(x), atol=1e-4, rtol=1e-4)


def test_copies_and_pickles_make_their_own_primitives():
    model, x = _conv_net("relu6"), _image()
    with torch.no_grad():
        gm = graphopt.optimize(model, x).module
        expected = gm(x)
        twin = copy.deepcopy(gm)
        assert all(p is None for p in _primitives(twin))
        for p in twin.parameters():
            p.zero_()
        assert twin(x).abs().max() == 0  # its own weights, not the original's
        torch.testing.assert_close(gm(x), expected)
        conv = next(m for m in gm.modules() if getattr(m, "_primitive", None))
        args = (x, conv._primitive.weight, conv._primitive.bias)
        buffer = io.BytesIO()
        torch.save(conv, buffer)  # the primitive is not saved: made again on use
        buffer.seek(0)
        back = torch.load(buffer, weights_only=False)
        assert back._primitive is None
        torch.testing.assert_close(back(*args), conv(*args))
        assert back._primitive is not None


def test_the_interpreter_counts_one_kernel_per_direct_conv():
    model, x = _conv_net("relu"), _image()
    gm = graphopt.optimize(model, x).module
    report = graphopt.run(gm, x)
    convs = [r for r in report.nodes if "Conv" in r.op]
    assert convs and all(r.kernels == 1 for r in convs)


def test_turned_off_the_backend_keeps_torchs_ops():
    code = ("import torch, graphopt\n"
            "from graphopt.backend import onednn_capi\n"
            "from torch import nn\n"
            "m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()\n"
            "x = torch.randn(1, 3, 8, 8)\n"
            "gm = graphopt.optimize(m, x).module\n"
            "with torch.no_grad():\n"
            "    torch.testing.assert_close(gm(x), m(x))\n"
            "print(onednn_capi.why_unavailable())\n"
            "print([getattr(s, '_primitive', 'none') for s in gm.modules()"
            " if hasattr(s, 'kernel')])\n")
    env = dict(os.environ, GRAPHOPT_ONEDNN_DIRECT="0", GRAPHOPT_QUIET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ["turned off (GRAPHOPT_ONEDNN_DIRECT=0)", "['none']"]


def test_one_openmp_runtime_and_the_enums_named_back():
    # in a fresh process: later imports (numba, ORT, ...) may map other runtimes
    # into a long test process; what matters is that loading oneDNN added none
    code = ("import torch\n"
            "from graphopt.backend import onednn_capi\n"
            "print(repr(onednn_capi.why_unavailable()))\n"
            "print(len(onednn_capi._openmp_runtimes()))\n")
    env = dict(os.environ, GRAPHOPT_QUIET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ["''", "1"]
    assert onednn_direct.supported(RELU)


def test_both_runners_answer_alike_and_threads_never_mix_their_tensors(monkeypatch):
    """The numba runner (one native call, the GIL held) and the ctypes one (a
    lock) run the same steps; two threads calling one primitive each get their
    own answer."""
    import threading

    from graphopt.backend import onednn_execute, rowwise

    model, x = _conv_net("relu"), _image()
    with torch.no_grad():
        gm = graphopt.optimize(model, x).module
        images = [_image(seed=s) for s in range(4)]
        want = [model(i) for i in images]
        answers = {}

        def work(k):
            for _ in range(20):
                answers[k] = gm(images[k])

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in range(4):
            torch.testing.assert_close(answers[k], want[k], atol=1e-4, rtol=1e-4)
        onednn_execute.runner.cache_clear()
        monkeypatch.setattr(rowwise, "_numba_installed", lambda: False)
        monkeypatch.setattr(onednn_execute, "_numba_installed", lambda: False)
        try:
            slow = graphopt.optimize(model, x).module
            assert not hasattr(onednn_execute.runner(), "py_func")  # ctypes's
            torch.testing.assert_close(slow(x), model(x), atol=1e-4, rtol=1e-4)
        finally:
            onednn_execute.runner.cache_clear()
            monkeypatch.undo()
    assert hasattr(onednn_execute.runner(), "py_func")  # numba's, again
