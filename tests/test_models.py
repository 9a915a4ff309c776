"""The reference models: every example builds, runs, captures, and is reproducible."""

import pytest
import torch
from torch import nn

import graphopt
from graphopt import models

OUTPUT_SHAPES = {
    "linear_regression": (10, 1), "mlp": (4, 8), "basic_block": (1, 16, 16, 16),
    "small_resnet": (2, 10), "resnet50": (1, 1000), "transformer_block": (2, 16, 64),
    "seed_conv_block": (1, 8, 16, 16), "add_mul": (4, 4), "scalar_constants": (4, 4),
    "tensor_constants": (4, 4), "data_dependent_branch": (4, 4), "cond_branch": (4, 4),
    "shape_loop": (4,), "printing_add_mul": (4, 4),
}
# chapter 2's control-flow examples: what each capture level cannot take
CANNOT_CAPTURE = {("data_dependent_branch", "aten"),
                  ("data_dependent_branch", "module"),
                  ("cond_branch", "module"), ("shape_loop", "module")}


def test_names_are_the_documented_examples():
    assert set(models.NAMES) == set(OUTPUT_SHAPES)


@pytest.mark.parametrize("name", models.NAMES)
def test_example_runs_in_eval_mode(name):
    model, inputs = models.example(name)
    assert isinstance(model, nn.Module) and not model.training
    assert all(isinstance(x, torch.Tensor) for x in inputs)
    with torch.no_grad():
        out = model(*inputs)
    assert tuple(out.shape) == OUTPUT_SHAPES[name]
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", models.NAMES)
def test_example_is_reproducible(name):
    (m1, x1), (m2, x2) = models.example(name), models.example(name)
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert all(torch.equal(a, b) for a, b in zip(x1, x2))
    if any(True for _ in m1.parameters()):  # weights come from the seed
        m3, _ = models.example(name, seed=1)
        assert not all(torch.equal(s1[k], m3.state_dict()[k]) for k in s1
                       if s1[k].is_floating_point())


@pytest.mark.parametrize("name", [n for n in models.NAMES if n != "resnet50"])
@pytest.mark.parametrize("level", ["aten", "module"])
def test_example_captures_and_runs_like_eager(name, level, capsys):
    model, inputs = models.example(name)
    if (name, level) in CANNOT_CAPTURE:
        with pytest.raises(graphopt.CaptureError):
            graphopt.capture(model, *inputs, level=level)
        return
    gm = graphopt.capture(model, *inputs, level=level)
    torch.testing.assert_close(graphopt.run(gm, *inputs).outputs, model(*inputs))


def test_resnet50_has_resnet50s_structure():
    model, inputs = models.example("resnet50")
    gm = graphopt.capture(model, *inputs, level="module")
    convs = [n for n in gm.graph.nodes if n.op == "call_module"
             and isinstance(gm.get_submodule(n.target), nn.Conv2d)]
    assert len(convs) == 53  # 1 stem + 16 blocks × 3 + 4 downsample shortcuts
    assert sum(isinstance(m, models.Bottleneck) for m in model.modules()) == 16
    params = sum(p.numel() for p in model.parameters())
    assert params == 25_557_032  # torchvision's resnet50 has the same count


def test_batch_norm_statistics_are_not_trivial():
    model, _ = models.example("basic_block")
    bn = model.bn1
    assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))


def test_seed_conv_block_is_conv_relu_bn_add():
    model, (x,) = models.example("seed_conv_block")
    expected = model.bn(torch.relu(model.conv(x))) + x
    torch.testing.assert_close(model(x), expected)


def test_basic_block_with_downsampling_shortcut():
    block = models.BasicBlock(16, stride=2, in_channels=8).eval()
    out = block(torch.randn(1, 8, 16, 16))
    assert out.shape == (1, 16, 8, 8) and len(block.shortcut) == 2


def test_unknown_example_names_the_choices():
    with pytest.raises(KeyError, match="seed_conv_block"):
        models.example("vgg")
