"""fold_conv_bn and its weight math: algebra, both graph levels, must-not-change cases."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphopt
from graph_match import assert_unchanged, same_graph
from graphgen import state_hash
from graphopt import models
from graphopt.passes import fold_conv_bn
from graphopt.passes.conv_bn_math import fold_conv_bn_weights
from graphopt.verify import equivalent, random_like


def _bn_stats(c, gen):
    return (torch.randn(c, generator=gen) * 0.1, torch.rand(c, generator=gen) + 0.5,
            torch.rand(c, generator=gen) + 0.5, torch.randn(c, generator=gen) * 0.1)


@pytest.mark.parametrize("conv_bias", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_weight_math_matches_torch(conv_bias, affine):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(8, 4, 3, 3, generator=gen)
    b = torch.randn(8, generator=gen) if conv_bias else None
    mean, var, gamma, beta = _bn_stats(8, gen)
    if not affine:
        gamma = beta = None
    ours = fold_conv_bn_weights(w, b, mean, var, 1e-5, gamma, beta)
    ref = torch.nn.utils.fusion.fuse_conv_bn_weights(w, b, mean, var, 1e-5, gamma, beta)
    for a, r in zip(ours, ref):
        torch.testing.assert_close(a, r.detach())


def test_weight_math_is_pure_and_computes_conv_then_bn():
    gen = torch.Generator().manual_seed(1)
    w, x = torch.randn(6, 3, 3, 3, generator=gen), torch.randn(2, 3, 8, 8, generator=gen)
    mean, var, gamma, beta = _bn_stats(6, gen)
    args = (w, None, mean, var, 1e-3, gamma, beta)
    saved = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    fw, fb = fold_conv_bn_weights(*args)
    for a, s in zip(args, saved):
        assert a is None or not isinstance(a, torch.Tensor) or torch.equal(a, s)
    expected = F.batch_norm(F.conv2d(x, w), mean, var, gamma, beta, False, 0.0, 1e-3)
    torch.testing.assert_close(F.conv2d(x, fw, fb), expected, rtol=1e-4, atol=1e-5)


def _calls(gm):
    return [graphopt.ops.op_name(n) for n in gm.graph.nodes if n.op.startswith("call")]


def test_aten_graph_matches_torch_fx_fuse():
    from torch.fx.experimental.optimization import fuse

    model, x = models.example("basic_block")
    gm = graphopt.capture(model, *x)
    before = state_hash(model), state_hash(gm)
    res = fold_conv_bn(gm)
    assert _calls(res.module) == ["ShapeGuard", "conv2d", "relu", "conv2d", "add", "relu"]
    assert res.added == ["conv2d_folded_weight", "conv2d_folded_bias",
                         "conv2d_1_folded_weight", "conv2d_1_folded_bias"]
    assert {"batch_norm", "batch_norm_1", "bn1_running_mean"} <= set(res.removed)
    reference = fuse(copy.deepcopy(model))
    torch.testing.assert_close(res.module(*x), reference(*x), rtol=1e-5, atol=1e-5)
    assert (state_hash(model), state_hash(gm)) == before
    assert graphopt.run(res.module, *x).kernels == graphopt.run(gm, *x).kernels - 2


def test_module_graph_replaces_conv_and_drops_bn():
    model, x = models.example("basic_block")
    gm = graphopt.capture(model, *x, level="module")
    before = state_hash(model)
    res = fold_conv_bn(gm)
    assert res.removed == ["bn1", "bn2"]
    assert not hasattr(res.module, "bn1")
    assert not torch.equal(res.module.conv1.weight, model.conv1.weight)
    assert state_hash(model) == before and hasattr(gm, "bn1")
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)


def test_decomposed_aten_batch_norm_is_folded():
    model, x = models.example("basic_block")
    ep = torch.export.export(model, x, strict=False).run_decompositions()
    gm = graphopt.annotate(ep.module(), *x)
    res = fold_conv_bn(gm)
    assert "_native_batch_norm_legit_no_training" not in _calls(res.module)
    assert "getitem" not in _calls(res.module)
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)


@pytest.mark.parametrize("level", ["aten", "module"])
def test_training_mode_bn_is_not_folded(level):
    model, x = models.example("basic_block")
    gm = graphopt.capture(model.train(), *x, level=level)
    assert_unchanged(fold_conv_bn, gm)


class TwoReaders(nn.Module):
    """The conv's output feeds BN and the residual add: BN cannot be folded into it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


@pytest.mark.parametrize("level", ["aten", "module"])
def test_conv_with_two_consumers_is_not_folded(level):
    gm = graphopt.capture(TwoReaders().eval(), torch.randn(1, 4, 8, 8), level=level)
    assert_unchanged(fold_conv_bn, gm)


def test_conv_module_called_twice_is_not_rewritten():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 1)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(x)) + self.conv(x)

    gm = graphopt.capture(Shared().eval(), torch.randn(1, 4, 4, 4), level="module")
    assert_unchanged(fold_conv_bn, gm)


def test_small_resnet_folds_every_bn():
    model, x = models.example("small_resnet")
    gm = graphopt.capture(model, *x)
    res = fold_conv_bn(gm)
    assert "batch_norm" not in _calls(res.module)
    assert _calls(gm).count("batch_norm") == len(res.added) // 2 == 8
    assert equivalent(gm, res.module, random_like(x), raise_on_mismatch=True)


# ------------------------------------------------ issue 11: dtypes, 1-d/3-d, meta, training

def _pair(conv, bn):
    model = nn.Sequential(conv, bn).eval()
    models.randomize_bn(model, 0)
    return model


def test_bias_free_bfloat16_conv_with_float32_bn_folds_to_bfloat16():
    conv = nn.Conv2d(3, 4, 3, bias=False).to(torch.bfloat16)
    model, x = _pair(conv, nn.BatchNorm2d(4)), torch.randn(1, 3, 8, 8, dtype=torch.bfloat16)
    gm = graphopt.capture(model, x)
    res = fold_conv_bn(gm)
    assert not same_graph(res.module, gm)
    folded = [n for n in res.module.graph.nodes if "folded" in n.name]
    assert [n.meta["val"].dtype for n in folded] == [torch.bfloat16] * 2
    assert res.module(x).dtype == torch.bfloat16  # used to crash: bias type float
    assert equivalent(model, res.module, (x,))


@pytest.mark.parametrize("level", ["aten", "module"])
@pytest.mark.parametrize("dims", [1, 3])
def test_conv1d_and_conv3d_fold_with_their_batch_norms(level, dims):
    conv = (nn.Conv1d if dims == 1 else nn.Conv3d)(3, 4, 3)
    bn = (nn.BatchNorm1d if dims == 1 else nn.BatchNorm3d)(4)
    model, x = _pair(conv, bn), torch.randn(2, 3, *([6] * dims))
    gm = graphopt.capture(model, x, level=level)
    res = fold_conv_bn(gm)
    assert not same_graph(res.module, gm) and len(res.removed) >= 1
    assert not any("batch_norm" in graphopt.ops.op_name(n).lower()
                   for n in res.module.graph.nodes)
    assert equivalent(model, res.module, (x,))


def test_folded_weights_carry_val_and_tensor_meta():
    model, x = models.example("basic_block")
    res = fold_conv_bn(graphopt.capture(model, *x))
    for n in res.module.graph.nodes:
        if "folded" in n.name:
            assert n.meta["val"].shape == n.meta["tensor_meta"].shape


def test_training_mode_bn_is_kept_with_a_note():
    model = _pair(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    res = assert_unchanged(fold_conv_bn, graphopt.capture(model, torch.randn(2, 3, 6, 6)))
    assert len(res.notes) == 1 and "training mode" in res.notes[0]
    assert "1" in res.notes[0]  # the BN's module path in the model


# ------------------------------ precision: beta cancels a large running mean (ch. 3)

def _cancelling(seed, *tail):
    """conv -> BN (-> tail): running mean 3000 std out, BN's beta cancelling it.

    The conv has no bias, so nothing but beta brings the output back near zero:
    eager float32 rounds at the scale of 3000 x gamma, and so did float32 folding.
    """
    gen = torch.Generator().manual_seed(seed)
    conv, bn = nn.Conv2d(4, 8, 3, bias=False), nn.BatchNorm2d(8)
    model, x = nn.Sequential(conv, bn, *tail).eval(), torch.randn(2, 4, 10, 10,
                                                                  generator=gen)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) * 0.2)
        std = conv(x).std(dim=(0, 2, 3)).double()
        gamma, mean = torch.rand(8, generator=gen).double() + 0.5, 3000 * std
        bn.running_mean.copy_(mean)
        bn.running_var.copy_(std ** 2)
        bn.weight.copy_(gamma)
        bn.bias.copy_(gamma * mean / torch.sqrt(std ** 2 + bn.eps))
    return model, x


def _off(out, model, x):
    """Largest distance of `out` from the float64 run of `model`."""
    with torch.no_grad():
        exact = copy.deepcopy(model).double()(x.double())
        return float((out.double() - exact).abs().max())


def test_weight_math_rounds_once_from_float64():
    model, _ = _cancelling(0)
    conv, bn = model[0], model[1]
    args = (conv.weight, None, bn.running_mean, bn.running_var, bn.eps, bn.weight,
            bn.bias)
    fw, fb = fold_conv_bn_weights(*args)
    wide = fold_conv_bn_weights(*[a.double() if isinstance(a, torch.Tensor) else a
                                  for a in args])
    assert (fw.dtype, fb.dtype) == (torch.float32, torch.float32)
    assert torch.equal(fw, wide[0].float()) and torch.equal(fb, wide[1].float())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_folding_is_as_close_to_float64_as_eager(seed):
    model, x = _cancelling(seed)
    folded = fold_conv_bn(graphopt.capture(model, x)).module
    eager, ours = _off(model(x), model, x), _off(folded(x), model, x)
    assert eager > 1e-5  # the case is the hard one: eager float32 itself is off
    # measured: ours ~1e-6 (0.003-0.009 x eager); folding in float32 was 1.1-1.3 x
    # eager. A tenth of eager's error is what rounding the bias once buys.
    assert ours <= eager / 10


def test_conv_bn_relu_pattern_folds_as_precisely():
    from graphopt.passes import fuse_patterns

    model, x = _cancelling(0, nn.ReLU())
    res = fuse_patterns(graphopt.capture(model, x))
    assert res.added == ["fused_conv_bn_relu_relu"]  # the pattern's own folding
    assert _off(res.module(x), model, x) <= _off(model(x), model, x) / 10


@pytest.mark.parametrize("tail", [(), (nn.ReLU(),)])
def test_optimize_check_passes_on_a_cancelling_mean(tail):
    model, x = _cancelling(0, *tail)
    result = graphopt.optimize(model, x, check=True)  # raises when a stage is off
    assert "batch_norm" not in _calls(result.module)
    assert _off(result.module(x), model, x) <= 2 * _off(model(x), model, x)
