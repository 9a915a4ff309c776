"""Whole-graph FLOP and op counts (graphopt.analysis, chapter 3)."""

import torch
from torch import nn

import graphopt
from graphopt import models
from graphopt.analysis import count_ops, flops_by_op, op_counts, total_flops


def _conv_bn_relu():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU()).eval()
    return m, torch.randn(1, 3, 10, 10)


def test_counts_a_conv_bn_relu_by_hand():
    m, x = _conv_bn_relu()
    gm = graphopt.capture(m, x)
    out = 4 * 8 * 8                      # output elements of the 3x3 conv on 10x10
    conv = 2 * out * 3 * 3 * 3           # a multiply-add per weight per output element
    assert flops_by_op(gm) == {"conv2d": conv, "batch_norm": out, "relu": out}
    assert total_flops(gm) == conv + 2 * out
    assert op_counts(gm) == {"batch_norm": 1, "conv2d": 1, "relu": 1}
    assert count_ops(gm) == 3


def test_module_and_aten_levels_agree():
    m, x = _conv_bn_relu()
    assert total_flops(graphopt.capture(m, x, level="module")) == \
        total_flops(graphopt.capture(m, x))


def test_resnet50_has_the_real_networks_compute():
    # ResNet-50 at 224x224 is about 4.1 G multiply-adds: 8.2 GFLOPs, 53 convs, 53 BNs
    m = models.ResNet50(width=64).eval()
    gm = graphopt.capture(m, torch.randn(1, 3, 224, 224))
    assert 8.0e9 < total_flops(gm) < 8.4e9
    counts = op_counts(gm)
    assert counts["conv2d"] == 53 and counts["batch_norm"] == 53
    assert list(flops_by_op(gm))[0] == "conv2d"


def test_ignores_inputs_weights_output_and_guard():
    m, (x,) = models.example("tensor_constants")
    gm = graphopt.capture(m, x)  # a, b (get_attr), x, _guards_fn, mul, add, output
    assert op_counts(gm) == {"add": 1, "mul": 1}
    assert total_flops(gm) == 1 + 16  # a scalar mul, then a 4x4 add
