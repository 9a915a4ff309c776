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
    "resnet18": (1, 1000), "mobilenet_v3_small": (1, 1000), "bert": (1, 128, 256),
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
    if name == "bert":  # Hugging Face's output object
        out = out.last_hidden_state
    assert tuple(out.shape) == OUTPUT_SHAPES[name]
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", models.NAMES)
def test_example_is_reproducible(name):
    (m1, x1), (m2, x2) = models.example(name), models.example(name)
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert len(x1) == len(x2) and all(torch.equal(a, b) for a, b in zip(x1, x2))
    if any(True for _ in m1.parameters()):  # weights come from the seed
        m3, _ = models.example(name, seed=1)
        assert not all(torch.equal(s1[k], m3.state_dict()[k]) for k in s1
                       if s1[k].is_floating_point())


# the real architectures are optimized end to end in test_real_models.py
@pytest.mark.parametrize("name", [n for n in models.NAMES
                                  if n != "resnet50" and n not in models.REAL])
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


# --- the real architectures: faithful to torchvision and Hugging Face -------------

def test_resnet18_matches_torchvisions_layout():
    model = models.resnet18()
    keys = list(model.state_dict())
    assert sum(p.numel() for p in model.parameters()) == 11_689_512  # torchvision's
    assert len(keys) == 122
    assert keys[:6] == ["conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                        "bn1.running_var", "bn1.num_batches_tracked"]
    assert {"layer2.0.downsample.0.weight", "layer2.0.downsample.1.running_var",
            "layer4.1.bn2.weight", "fc.weight", "fc.bias"} <= set(keys)
    assert "layer1.0.downsample.0.weight" not in keys  # stride 1, same width
    assert sum(p.numel() for p in models.resnet34().parameters()) == 21_797_672


def test_resnet18_is_written_with_torchvisions_in_place_idioms():
    import inspect

    from graphopt.models import resnet
    block = models.resnet18().layer1[0]
    assert isinstance(block.relu, nn.ReLU) and block.relu.inplace
    assert "out += identity" in inspect.getsource(resnet.BasicBlock.forward)
    assert inspect.getsource(resnet.BasicBlock.forward).count("self.relu(out)") == 2


def test_mobilenet_v3_small_matches_torchvisions_layout():
    from graphopt.models import mobilenet
    model = models.mobilenet_v3_small()
    keys = set(model.state_dict())
    assert sum(p.numel() for p in model.parameters()) == 2_542_856  # torchvision's
    assert len(model.state_dict()) == 244
    assert {"features.0.0.weight", "features.1.block.1.fc1.weight",
            "features.4.block.2.fc2.bias", "features.12.1.running_var",
            "classifier.0.weight", "classifier.3.bias"} <= keys
    blocks = [m for m in model.modules() if isinstance(m, mobilenet.InvertedResidual)]
    assert len(blocks) == 11 and sum(b.use_res_connect for b in blocks) == 6
    ses = [m for m in model.modules() if isinstance(m, mobilenet.SqueezeExcitation)]
    assert len(ses) == 9 and all(isinstance(s.scale_activation, nn.Hardsigmoid)
                                 for s in ses)
    acts = [m for m in model.modules() if isinstance(m, (nn.Hardswish, nn.ReLU))
            and m not in {s.activation for s in ses}]
    assert acts and all(a.inplace for a in acts)
    bn = model.features[0][1]
    assert (bn.eps, bn.momentum) == (0.001, 0.01)
    assert isinstance(model.classifier[2], nn.Dropout) and model.classifier[2].inplace


def test_bert_is_hugging_faces_bert_model():
    transformers = pytest.importorskip("transformers")
    model, (ids, mask) = models.example("bert", seq_len=16)
    assert type(model) is transformers.BertModel and not model.training
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
            cfg.intermediate_size) == (4, 256, 4, 1024)
    assert ids.dtype == torch.long and 0 <= ids.min() and ids.max() < cfg.vocab_size
    assert mask.dtype == torch.long and set(mask.unique().tolist()) == {0, 1}
    with torch.no_grad():  # keyword inputs, as users write them, give the same answer
        by_kw = model(input_ids=ids, attention_mask=mask).last_hidden_state
        by_position = model(ids, mask).last_hidden_state
        unmasked = model(ids).last_hidden_state
    assert torch.equal(by_kw, by_position)
    assert not torch.allclose(by_kw, unmasked)  # the mask really matters


def test_example_sizes():
    _, (x,) = models.example("resnet18", batch=2, size=64)
    assert x.shape == (2, 3, 64, 64)
    _, (ids, mask) = models.example("bert", batch=3, seq_len=8)
    assert ids.shape == mask.shape == (3, 8)
    assert mask[:2].all() and not mask[2].all()  # only the last row is padded
    with pytest.raises(TypeError, match="seq_len"):
        models.example("bert", size=64)
    with pytest.raises(TypeError, match="none"):
        models.example("mlp", batch=2)


def test_real_models_have_nontrivial_batch_norm():
    model, _ = models.example("resnet18", size=32)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            assert not torch.allclose(m.running_var, torch.ones_like(m.running_var))
            assert not torch.allclose(m.weight, torch.ones_like(m.weight))


def test_import_graphopt_does_not_import_transformers():
    import subprocess
    import sys
    code = "import sys, graphopt; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_missing_transformers_gets_a_graphopt_error(monkeypatch):
    from graphopt.models import hf
    real = hf.import_module

    def no_transformers(name):
        if name == "transformers":
            raise ImportError("No module named 'transformers'")
        return real(name)

    monkeypatch.setattr(hf, "import_module", no_transformers)
    with pytest.raises(graphopt.GraphoptError, match=r"pip install .*transformers"):
        models.bert_encoder()
    with pytest.raises(ImportError):  # also an ImportError, for code that expects one
        models.example("bert")
