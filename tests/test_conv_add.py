"""Conv+Add: an inverted residual's tail, conv(x) + other with no ReLU after it.

The projection conv of MobileNetV2/V3 and EfficientNet blocks is followed by the
residual add and nothing else. The row takes the pair into one `ConvAddReLU` with
no activation; the backend runs it as one oneDNN kernel, the add a binary post-op.
An add whose one reader is a ReLU stays Conv+Add+ReLU's.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import graphopt
from graphopt.backend import onednn
from graphopt.backend.plan import plan_for
from graphopt.passes import fold_conv_bn, fuse_patterns
from graphopt.passes.fused_modules import ConvAddReLU

needs_onednn = pytest.mark.skipif(not onednn.available(), reason="no oneDNN")


class InvertedResidual(nn.Module):
    """expand (1x1) -> depthwise 3x3 -> project (1x1), + x; then `tail`."""

    def __init__(self, channels=16, tail=None):
        super().__init__()
        wide = channels * 4
        self.expand = nn.Sequential(nn.Conv2d(channels, wide, 1), nn.BatchNorm2d(wide),
                                    nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(wide, wide, 3, padding=1, groups=wide),
                                       nn.BatchNorm2d(wide), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(wide, channels, 1),
                                     nn.BatchNorm2d(channels))
        self.tail = tail or nn.Identity()

    def forward(self, x):
        return self.tail(self.project(self.depthwise(self.expand(x))) + x)


def _model(tail=None):
    torch.manual_seed(0)
    model = nn.Sequential(InvertedResidual(tail=tail), InvertedResidual()).eval()
    for m in model.modules():  # BN statistics that are not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(2, 16, 20, 20),)


def _adds(gm) -> list:
    return [m for m in gm.modules() if isinstance(m, ConvAddReLU)]


@needs_onednn
def test_both_residual_tails_become_one_kernel_each_and_answer_as_eager():
    model, x = _model()
    res = graphopt.optimize(model, *x)
    adds = _adds(res.module)
    assert [m.act.name for m in adds] == ["none", "none"]
    assert all(m.kernel == "onednn" and m.plan is not None for m in adds)
    with torch.no_grad():
        for _ in range(2):  # the second call reuses what the first made
            torch.testing.assert_close(res.module(*x), model(*x), atol=1e-4,
                                       rtol=1e-4)
    report = graphopt.run(res.module, *x)
    tails = [n for n in report.nodes if "conv_add" in n.name]
    assert len(tails) == 2 and all(n.kernels == 1 for n in tails)


def test_an_add_then_relu_stays_conv_add_relu():
    model, x = _model(tail=nn.ReLU())
    gm = graphopt.capture(model, *x)
    fused = fuse_patterns(fold_conv_bn(gm).module).module
    assert [m.act.name for m in _adds(fused)] == ["relu", "none"]
    with torch.no_grad():
        torch.testing.assert_close(fused(*x), model(*x), atol=1e-4, rtol=1e-4)


def test_training_mode_folds_nothing_and_fuses_no_tail():
    model, x = _model()
    model.train()
    res = graphopt.optimize(model, *x)
    assert not _adds(res.module)  # the BN before the add is not folded


def test_a_gpu_plan_only_for_the_relu_tail():
    module = ConvAddReLU(1, 0, 1, 1, act=graphopt.passes.activations.ACTIVATIONS[
        "none"])
    module.kernel = "onednn"
    assert plan_for(module, "cuda") is None  # cuDNN fuses the add with a ReLU only
    relu = ConvAddReLU(1, 0, 1, 1)
    relu.kernel = "onednn"
    assert plan_for(relu, "cuda").kernel == "cudnn"
