"""Which oneDNN implementation a primitive binds (backend/onednn_choice.py).

The table replaces a first choice only by an implementation oneDNN offers for the
same descriptor; where it offers none, the first choice stays. Either way the
answer is the conv's. The tests run on any CPU: on one whose first choices the
table does not list, they check that nothing changed.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphopt
from graphopt.backend import onednn_capi, onednn_choice
from graphopt.backend.onednn_direct import ConvPrimitive
from graphopt.models import example
from graphopt.passes.activations import ACTIVATIONS

pytestmark = pytest.mark.skipif(
    bool(onednn_capi.why_unavailable()),
    reason=f"oneDNN cannot be called directly here: {onednn_capi.why_unavailable()}")

# (in, out, kernel, stride, groups, map): a 1x1, a depthwise and a dense 3x3 conv
CONVS = {"1x1": (24, 88, 1, 1, 1, 28), "depthwise": (96, 96, 5, 2, 96, 28),
         "3x3": (16, 32, 3, 1, 1, 20)}


def _conv(kind: str, act="hardswish", add=False):
    cin, cout, k, stride, groups, size = CONVS[kind]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, cin, size, size, generator=g).contiguous(
        memory_format=torch.channels_last)
    w = torch.randn(cout, cin // groups, k, k, generator=g)
    b = torch.randn(cout, generator=g)
    args = (w, b, (stride, stride), (k // 2, k // 2), (1, 1), groups,
            ACTIVATIONS[act])
    want = F.conv2d(x, w, b, stride, k // 2, 1, groups)
    other = None
    if add:
        other = torch.randn(want.shape, generator=g).contiguous(
            memory_format=torch.channels_last)
        want = want + other
    want = F.hardswish(want) if act == "hardswish" else want
    return x, args, b, other, want, add


def _run(x, args, b, other, want, add):
    p = ConvPrimitive(x, *args, add=add)
    got = p(x, b, other) if add else p(x, b)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    return p.implementation


@pytest.mark.parametrize("kind", sorted(CONVS))
@pytest.mark.parametrize("add", [False, True])
def test_the_table_replaces_a_listed_first_choice_and_keeps_the_answer(kind, add):
    case = _conv(kind, add=add)
    with onednn_choice.first_choices():
        first = _run(*case)
    assert not first.startswith("ref")
    assert _run(*case) == onednn_choice.INSTEAD.get(first, first)


@pytest.mark.parametrize("kind", sorted(CONVS))
def test_a_replacement_not_offered_leaves_the_first_choice(kind, monkeypatch):
    case = _conv(kind)
    with onednn_choice.first_choices():
        first = _run(*case)
    monkeypatch.setitem(onednn_choice.INSTEAD, first, "no_such_kernel:any")
    assert _run(*case) == first  # the descriptor made again, nothing freed twice


def test_first_choices_puts_the_table_back_after_an_error():
    table = dict(onednn_choice.INSTEAD)
    with pytest.raises(RuntimeError), onednn_choice.first_choices():
        assert onednn_choice.INSTEAD == {}
        raise RuntimeError("inside")
    assert onednn_choice.INSTEAD == table


def test_mobilenet_binds_the_table_choices_and_gives_eager_answer():
    """Every conv primitive of the model holds the table's implementation where its
    first choice is listed (on AVX2: all 33 of its 1x1 and depthwise ones)."""
    model, (x,) = example("mobilenet_v3_small")
    with torch.no_grad():
        want = model(x)
        fast = graphopt.optimize(model, x).module
        torch.testing.assert_close(fast(x), want, rtol=1e-4, atol=1e-4)
    bound = [m._primitive.implementation for m in fast.graph_module.modules()
             if getattr(getattr(m, "_primitive", None), "conv", None)]
    assert len(bound) >= 33
    assert not set(bound) & set(onednn_choice.INSTEAD)
