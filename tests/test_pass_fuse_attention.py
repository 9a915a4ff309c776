"""fuse_attention: the attention chain becomes one SDPA call, only where that is legal."""

import math

import pytest
import torch
from torch import nn

import graphopt
from graph_match import assert_unchanged
from graphopt import models
from graphopt.passes.fuse_attention import fuse_attention
from graphopt.verify import equivalent, random_like


def _sdpa(gm):
    return [n for n in gm.graph.nodes if "scaled_dot_product_attention" in str(n.target)]


class Attention(nn.Module):
    """Hand-written attention: (q kᵀ · scale + mask) → softmax → dropout → · v."""

    def __init__(self, mask="input", divide=False, p=0.0, dim=-1, causal_buffer=False):
        super().__init__()
        self.mask, self.divide, self.dim = mask, divide, dim
        self.drop = nn.Dropout(p)
        if causal_buffer:
            self.register_buffer("causal", torch.full((6, 6), float("-inf")).triu(1))

    def forward(self, q, k, v, mask=None):
        s = q @ k.transpose(-2, -1)
        s = s / 4.0 if self.divide else s * 0.25  # 4 = sqrt(head dim 16)
        if hasattr(self, "causal"):
            s = s + self.causal
        elif mask is not None:
            s = s + mask
        return self.drop(torch.softmax(s, dim=self.dim)) @ v


def _qkv(mask_shape=(2, 1, 1, 6), dtype=torch.float32):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 16, dtype=dtype) for _ in range(3))
    if mask_shape is None:
        return q, k, v
    return q, k, v, torch.randn(mask_shape, dtype=dtype)


def _check(gm, res, x):
    assert equivalent(gm, res.module, x, raise_on_mismatch=True)
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)


@pytest.mark.parametrize("level", ["aten", "module"])
@pytest.mark.parametrize("divide", [False, True])
def test_hand_written_attention_becomes_one_kernel(level, divide):
    x = _qkv()
    gm = graphopt.capture(Attention(divide=divide).eval(), *x, level=level)
    res = fuse_attention(gm)
    (node,) = _sdpa(res.module)
    scale = 1 / math.sqrt(16) if divide else 0.25
    assert node.kwargs["scale"] == pytest.approx(scale)
    assert node.kwargs["attn_mask"] is not None and not node.kwargs["is_causal"]
    _check(gm, res, x)
    fused = [n for n in graphopt.run(res.module, *x).nodes if "scaled" in n.op]
    assert [n.kernels for n in fused] == [1]
    (node,) = _sdpa(res.module)
    assert graphopt.ops.flops(node) == 2 * (2 * 3) * 6 * 6 * (16 + 16)
    assert graphopt.run(res.module, *x).kernels < graphopt.run(gm, *x).kernels


@pytest.mark.parametrize("mask_shape", [(1, 6), (1, 6, 6), (2, 3, 6, 6)])
def test_broadcastable_masks(mask_shape):
    x = _qkv(mask_shape)
    gm = graphopt.capture(Attention().eval(), *x)
    res = fuse_attention(gm)
    assert len(_sdpa(res.module)) == 1
    _check(gm, res, x)


def test_no_mask():
    x = _qkv(None)
    gm = graphopt.capture(Attention().eval(), *x)
    res = fuse_attention(gm)
    assert len(_sdpa(res.module)) == 1 and _sdpa(res.module)[0].kwargs["attn_mask"] is None
    _check(gm, res, x)


def test_constant_causal_mask_is_detected():
    x = _qkv(None)
    gm = graphopt.capture(Attention(causal_buffer=True).eval(), *x)
    res = fuse_attention(gm)
    (node,) = _sdpa(res.module)
    assert node.kwargs["is_causal"] and node.kwargs["attn_mask"] is None
    assert any("causal" in n for n in res.notes)
    _check(gm, res, x)


@pytest.mark.parametrize("case", ["dropout_training", "softmax_dim", "bool_mask",
                                  "scores_read_twice", "mask_too_big", "mask_1d"])
def test_must_not_fuse(case):
    if case == "dropout_training":
        model, x = Attention(p=0.5).train(), _qkv()
    elif case == "softmax_dim":
        model, x = Attention(dim=-2).eval(), _qkv()
    elif case == "bool_mask":
        q, k, v, _ = _qkv()
        model, x = Attention().eval(), (q, k, v, torch.ones(2, 1, 1, 6, dtype=torch.bool))
    elif case == "mask_1d":  # broadcasts, but SDPA wants a 2-d mask at least
        model, x = Attention().eval(), _qkv((6,))
    elif case == "mask_too_big":
        model, x = Attention().eval(), _qkv((4, 3, 6, 6))[:3] + (torch.randn(4, 3, 6, 6),)
    else:
        class Twice(Attention):
            def forward(self, q, k, v, mask=None):
                p = torch.softmax(q @ k.transpose(-2, -1) * 0.25 + mask, dim=-1)
                return p @ v, p

        model, x = Twice().eval(), _qkv()
    if case == "mask_too_big":
        with pytest.raises(RuntimeError):
            model(*x)  # the unfused graph cannot run either: nothing to capture
        return
    gm = graphopt.capture(model, *x)
    res = assert_unchanged(fuse_attention, gm)
    assert not _sdpa(res.module)


@pytest.mark.parametrize("layers", [2])
def test_hf_bert_eager_attention_is_fused(layers):
    pytest.importorskip("transformers")
    model, x = models.example("bert")
    assert model.config._attn_implementation == "eager"  # else HF already calls SDPA
    gm = graphopt.capture(model, *x)
    res = fuse_attention(gm)
    n_layers = model.config.num_hidden_layers
    assert len(_sdpa(res.module)) == n_layers
    assert all("additive" in n for n in res.notes) and len(res.notes) == n_layers
    assert equivalent(gm, res.module, x, raise_on_mismatch=True)
    before, after = graphopt.run(gm, *x), graphopt.run(res.module, *x)
    # per layer: matmul, mul, add, softmax, dropout, matmul -> one SDPA kernel
    assert before.kernels - after.kernels >= 4 * n_layers
    assert after.bytes_moved < before.bytes_moved
    with torch.no_grad():
        torch.testing.assert_close(res.module(*x), gm(*x), rtol=1e-4, atol=1e-4)
