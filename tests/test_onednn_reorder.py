"""Layout conversions as a oneDNN reorder made once (backend/onednn_reorder.py).

`convert_layout`'s `ToLayout` nodes get the reorder as their copy kernel from the
backend stage. It must give exactly torch's copy, in both directions, be made
again when the input's shape, strides or the thread count change, and leave the
copy to torch where it cannot run (autograd, another dtype, a dispatch mode: the
interpreter counts the copy it sees) or where there is nothing to copy.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch

import graphopt
from graphopt.backend import onednn_capi, onednn_reorder
from graphopt.models import example
from graphopt.passes.convert_layout import ToLayout
from graphopt.torch_internals import TorchDispatchMode

pytestmark = pytest.mark.skipif(
    bool(onednn_capi.why_unavailable()),
    reason=f"oneDNN cannot be called directly here: {onednn_capi.why_unavailable()}")

CL = torch.channels_last


def _bound(layout: str) -> ToLayout:
    module = ToLayout(layout)
    module.copy = onednn_reorder.copy  # as the backend stage binds it
    return module


class Seen(TorchDispatchMode):
    """The ops that reach the dispatcher, as the interpreter's counter sees them."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def test_the_backend_binds_it_only_where_the_recorded_input_passes_the_rule():
    """basic_block's one conversion is its 16-channel exit: torch's copy, and no
    check of the rule per call."""
    model, inputs = example("basic_block")
    gm = graphopt.optimize(model, *inputs).module
    conversions = [m for m in gm.modules() if isinstance(m, ToLayout)]
    assert conversions and all(m.copy is None for m in conversions)


def test_optimized_models_bind_it_and_the_interpreter_counts_one_copy():
    model, inputs = example("mobilenet_v3_small")
    with torch.no_grad():
        gm = graphopt.optimize(model, *inputs).module
        conversions = [m for m in gm.modules() if isinstance(m, ToLayout)]
        assert conversions and all(m.copy is onednn_reorder.copy
                                   for m in conversions)
        torch.testing.assert_close(gm(*inputs), model(*inputs), atol=1e-5,
                                   rtol=1e-5)
        assert all(isinstance(m._primitive, onednn_reorder.Reorder)
                   for m in conversions)
    report = graphopt.run(gm, *inputs)
    copies = [r for r in report.nodes if "ToLayout" in r.op]
    assert copies and all(r.kernels == 1 for r in copies)
    assert all(r.bytes_written == inputs[0].nbytes for r in copies)


def test_copies_and_pickles_make_their_own_reorder():
    module, x = _bound("channels_last"), torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        module(x)
        twin = copy.deepcopy(module)
        assert twin._primitive is None and twin.copy is onednn_reorder.copy
        buffer = io.BytesIO()
        torch.save(module, buffer)
        buffer.seek(0)
        back = torch.load(buffer, weights_only=False)
        assert back._primitive is None
        assert torch.equal(back(x), x.contiguous(memory_format=CL))
        assert isinstance(back._primitive, onednn_reorder.Reorder)


@pytest.mark.parametrize("layout, shape", [("channels_last", (1, 3, 224, 224)),
                                           ("channels_last", (2, 4, 37, 29)),
                                           ("nchw", (1, 3, 112, 112))])
def test_the_reorder_copies_exactly_as_torch_does(layout, shape):
    x = torch.randn(shape)
    x = x.contiguous(memory_format=CL) if layout == "nchw" else x
    module = _bound(layout)
    with torch.no_grad():
        out = module(x)
    assert isinstance(module._primitive, onednn_reorder.Reorder)
    want = x.contiguous(memory_format=CL if layout == "channels_last" else
                        torch.contiguous_format)
    assert torch.equal(out, want) and out.stride() == want.stride()
    assert out.data_ptr() != x.data_ptr()


def test_a_reorder_is_kept_and_remade_when_the_input_or_threads_change():
    module, x = _bound("channels_last"), torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        module(x)
        first = module._primitive
        assert torch.equal(module(torch.ones_like(x)), torch.ones_like(x))
        assert module._primitive is first  # same shape and strides: kept
        bigger = torch.randn(2, 3, 64, 64)
        assert torch.equal(module(bigger), bigger.contiguous(memory_format=CL))
        assert module._primitive is not first
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1 if threads > 1 else 2)
            kept = module._primitive
            assert torch.equal(module(bigger), bigger.contiguous(memory_format=CL))
            assert module._primitive is not kept
        finally:
            torch.set_num_threads(threads)


@pytest.mark.parametrize("shape", [(1, 16, 32, 32), (1, 3, 32, 32)])
def test_the_shape_rule_leaves_many_channels_and_small_images_to_torch(shape):
    """With many channels torch's copy vectorises and splits over the threads; on a
    small image the reorder's own fixed cost is more than the copy."""
    module, x = _bound("channels_last"), torch.randn(shape)
    assert not onednn_reorder.worth_it(x)
    with torch.no_grad():
        assert torch.equal(module(x), x.contiguous(memory_format=CL))
    assert getattr(module, "_primitive", None) is None


def test_torch_copies_where_the_reorder_cannot_or_need_not():
    module = _bound("channels_last")
    done = torch.randn(1, 3, 64, 64).contiguous(memory_format=CL)
    assert module(done) is done  # already in the layout: no copy, as contiguous
    doubles = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    assert module(doubles).is_contiguous(memory_format=CL)
    assert getattr(module, "_primitive", None) is None
    x = torch.randn(1, 3, 64, 64, requires_grad=True)
    y = module(x)  # autograd records: torch's copy, which has a backward
    assert y.grad_fn is not None
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    with torch.no_grad():
        module(x)  # now made...
    assert isinstance(module._primitive, onednn_reorder.Reorder)
    plain, seen = x.detach(), Seen()
    with seen:  # ...but a mode watching sees torch's copy
        assert module(plain).is_contiguous(memory_format=CL)
    assert any("clone" in str(op) or "copy" in str(op) for op in seen.ops)


def test_another_dtype_after_the_reorder_was_made_gets_torch_copy():
    """A reorder's key is the shape, strides and threads, not the dtype: a float64
    input of the recorded shape must not be read as float32. (It was, once: the
    optimised MobileNet, called with float64, returned float32 values 1e12 off.)"""
    module = _bound("channels_last")
    with torch.no_grad():
        module(torch.randn(1, 3, 64, 64))
        assert isinstance(module._primitive, onednn_reorder.Reorder)
        for dtype in (torch.float64, torch.bfloat16):
            x = torch.randn(1, 3, 64, 64).to(dtype)
            y = module(x)
            assert y.dtype is dtype and torch.equal(y, x.contiguous(memory_format=CL))


def test_a_model_given_float64_fails_as_eager_does():
    model, inputs = example("mobilenet_v3_small")
    gm = graphopt.optimize(model, *inputs).module
    x = inputs[0].double()
    with torch.no_grad():
        gm(*inputs)  # the reorder made for float32
        with pytest.raises(RuntimeError, match="(?i)double"):
            model(x)
        with pytest.raises(RuntimeError, match="(?i)double"):
            gm(x)
