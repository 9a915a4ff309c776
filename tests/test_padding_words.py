"""Convolutions whose padding is a word ("same", "valid"), as Hugging Face's
EfficientNet writes every one of them: aten's `conv2d.padding` overload, F.conv2d
with `padding="same"`, nn.Conv2d(padding="same").

`matching.conv_parts` gives their padding as numbers, so Conv+BN folding, the
pattern rows and the squeeze-excite row take them like any other conv; a "same"
that torch pads unevenly (an even kernel) has no symmetric number and is left alone.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphopt
from graphopt.passes.fused_modules import ConvReLU, SqueezeExcite
from graphopt.passes.matching import conv_parts, numeric_padding


class SameBlock(nn.Module):
    """conv(same) -> BN -> SiLU -> depthwise conv(same, dilated) -> BN -> SiLU ->
    squeeze-excite (convs with padding "same") -> conv(valid)."""

    def __init__(self, c=8, functional=False):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding="same", bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.dw = nn.Conv2d(c, c, 5, padding="same", dilation=2, groups=c, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.reduce = nn.Conv2d(c, 4, 1, padding="same")
        self.expand = nn.Conv2d(4, c, 1, padding="same")
        self.head = nn.Conv2d(c, c, 1, padding="valid")
        self.functional = functional

    def forward(self, x):
        if self.functional:  # the torch function with the word, as a module would not
            y = F.conv2d(x, self.stem.weight, None, 1, "same")
        else:
            y = self.stem(x)
        y = F.silu(self.bn1(y))
        y = F.silu(self.bn2(self.dw(y)))
        s = F.adaptive_avg_pool2d(y, 1)
        y = y * torch.sigmoid(self.expand(F.silu(self.reduce(s))))
        return self.head(y)


def _with_stats(model):
    torch.manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("padding, kernel, dilation, want", [
    ("valid", 3, 1, [0, 0]), ("same", 3, 1, [1, 1]), ("same", 5, 2, [4, 4]),
    ("same", 1, 1, [0, 0]), ("same", 4, 1, None), ([2, 1], 3, 1, [2, 1])])
def test_a_padding_word_becomes_numbers(padding, kernel, dilation, want):
    weight = torch.empty(8, 8, kernel, kernel)
    assert numeric_padding(padding, weight, dilation) == want


@pytest.mark.parametrize("functional", [False, True])
def test_every_form_is_a_conv_with_numeric_padding(functional):
    torch.manual_seed(0)
    model, x = _with_stats(SameBlock(functional=functional)).eval(), torch.randn(2, 3, 12, 12)
    gm = graphopt.capture(model, x)
    convs = [n for n in gm.graph.nodes if n.op == "call_function"
             and "conv2d" in str(n.target)]
    assert len(convs) == 5
    assert all(conv_parts(n) is not None for n in convs)
    assert [conv_parts(n).padding for n in convs] == [[1, 1], [4, 4], [0, 0], [0, 0],
                                                      [0, 0]]


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_words_fold_fuse_and_keep_the_answer(mode):
    torch.manual_seed(0)
    model = _with_stats(SameBlock()).train(mode == "train")
    x = torch.randn(2, 3, 12, 12)
    res = graphopt.optimize(copy.deepcopy(model), x)
    modules = list(res.module.modules())
    assert sum(isinstance(m, SqueezeExcite) for m in modules) == 1
    if mode == "eval":  # BN folded into both convs, each then fused with its SiLU
        assert sum(type(m) is ConvReLU for m in modules) == 2
        assert not [n for n in res.module.graph.nodes if "batch_norm" in str(n.target)]
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), model(x), atol=1e-5, rtol=1e-5)


def test_an_uneven_same_is_left_alone():
    conv = nn.Conv2d(4, 4, 2, padding="same")  # torch pads the right side one more
    x = torch.randn(1, 4, 6, 6)
    gm = graphopt.capture(conv, x)
    (node,) = [n for n in gm.graph.nodes if "conv2d" in str(n.target)]
    assert conv_parts(node) is None
    res = graphopt.optimize(conv, x)
    with torch.no_grad():
        torch.testing.assert_close(res.module(x), conv(x))


def test_a_folded_weight_records_a_concrete_shape():
    torch.manual_seed(0)
    model, x = _with_stats(SameBlock()).eval(), torch.randn(2, 3, 12, 12)
    gm = graphopt.optimize(model, x, passes=["fold_conv_bn"]).module
    folded = [n for n in gm.graph.nodes if n.op == "get_attr" and "folded" in n.target]
    assert folded and all(all(type(d) is int for d in n.meta["val"].shape)
                          for n in folded)
