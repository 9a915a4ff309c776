"""fuse_patterns: each table row, before and after, and the cases it must leave alone."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphopt
from graphopt import OpKind, models
from graphopt.passes import PATTERNS, fold_conv_bn, fuse_patterns
from graphopt.passes import fused_modules
from graphopt.verify import equivalent, random_like
from graphgen import state_hash


def _fused(gm):
    return {n.name: type(gm.get_submodule(n.target)).__name__
            for n in gm.graph.nodes if n.op == "call_module" and n.target.startswith("fused")}


def _check(gm, res, x):
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)
    assert equivalent(gm, res.module, x, raise_on_mismatch=True)


def test_table_has_one_named_row_per_pattern():
    assert [p.name for p in PATTERNS] == ["Conv+BN+ReLU", "Conv+ReLU", "Conv+Add+ReLU",
                                          "MatMul+Add+ReLU", "LayerNorm+Add"]


@pytest.mark.parametrize("level", ["aten", "module"])
def test_conv_bn_relu(level):
    model, x = models.example("basic_block")
    gm = graphopt.capture(model, *x, level=level)
    before = state_hash(model), state_hash(gm)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["ConvReLU"]
    _check(gm, res, x)
    # conv + bn + relu (3 kernels) became conv + relu_ (2 kernels)
    assert graphopt.run(res.module, *x).kernels == graphopt.run(gm, *x).kernels - 1
    assert (state_hash(model), state_hash(gm)) == before


@pytest.mark.parametrize("level", ["aten", "module"])
def test_conv_relu_and_conv_add_relu_after_bn_folding(level):
    model, x = models.example("basic_block")
    gm = fold_conv_bn(graphopt.capture(model, *x, level=level)).module
    res = fuse_patterns(gm)
    assert sorted(_fused(res.module).values()) == ["ConvAddReLU", "ConvReLU"]
    _check(gm, res, x)
    report = graphopt.run(res.module, *x)
    assert [n.kind for n in report.nodes] == [OpKind.COMPUTE] * 2  # guards are not ops
    # nothing is claimed: conv, relu_ and conv, add_, relu_ are 5 real kernels
    assert report.kernels == 5


@pytest.mark.parametrize("level", ["aten", "module"])
def test_linear_relu(level):
    model, x = models.example("mlp")
    gm = graphopt.capture(model, *x, level=level)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["LinearReLU", "LinearReLU"]
    _check(gm, res, x)


def test_matmul_add_relu_on_activations():
    class M(nn.Module):
        def forward(self, a, b, c):
            return torch.relu(a @ b + c)

    x = (torch.randn(4, 5), torch.randn(5, 3), torch.randn(4, 3))
    gm = graphopt.capture(M(), *x)
    res = fuse_patterns(gm)
    assert list(_fused(res.module).values()) == ["MatMulAddReLU"]
    _check(gm, res, x)


@pytest.mark.parametrize("level", ["aten", "module"])
def test_layer_norm_add(level):
    model, x = models.example("transformer_block")
    gm = graphopt.capture(model, *x, level=level)
    res = fuse_patterns(gm)
    kinds = sorted(_fused(res.module).values())
    assert kinds == ["AddLayerNorm", "AddLayerNorm", "LinearReLU"]
    _check(gm, res, x)
    norms = [n for n in res.module.graph.nodes if n.op == "call_module"
             and isinstance(res.module.get_submodule(n.target), fused_modules.AddLayerNorm)]
    assert all(graphopt.kind(n) is OpKind.REDUCTION for n in norms)


def test_fused_modules_never_claim_fewer_kernels():
    for cls in (fused_modules.ConvReLU, fused_modules.ConvAddReLU,
                fused_modules.LinearReLU, fused_modules.MatMulAddReLU,
                fused_modules.AddLayerNorm):
        assert not hasattr(cls, "graphopt_kernels")
        assert cls.graphopt_kind in (OpKind.COMPUTE, OpKind.REDUCTION)


class ConvTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return F.relu(y) + y  # the conv's output has two readers


class ConvBroadcastAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x, bias):
        return F.relu(self.conv(x) + bias)  # bias broadcasts: the add cannot run in place


@pytest.mark.parametrize("level", ["aten", "module"])
def test_must_not_change(level):
    gm = graphopt.capture(ConvTwice().eval(), torch.randn(1, 4, 6, 6), level=level)
    assert not fuse_patterns(gm).changed
    x = (torch.randn(1, 4, 1, 1), torch.randn(1, 4, 6, 6))
    gm = graphopt.capture(ConvBroadcastAdd().eval(), *x, level=level)
    assert not fuse_patterns(gm).changed


@pytest.mark.parametrize("level", ["aten", "module"])
def test_training_mode_bn_blocks_conv_bn_relu(level):
    model, x = models.example("seed_conv_block")  # conv -> relu -> bn: only Conv+ReLU
    gm = graphopt.capture(model, *x, level=level)
    assert list(_fused(fuse_patterns(gm).module).values()) == ["ConvReLU"]

    class ConvBNReLU(nn.Sequential):
        pass

    block = ConvBNReLU(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train()
    gm = graphopt.capture(block, torch.randn(2, 3, 8, 8), level=level)
    assert not fuse_patterns(gm).changed
