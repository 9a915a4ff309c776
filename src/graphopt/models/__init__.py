"""Reference models, from the lecture notes' examples to real architectures.

- `small`: models that run in milliseconds and draw whole (chapters 1-6);
- `resnet`, `mobilenet`: torchvision's ResNet-18 and MobileNetV3-Small, written the
  way torchvision writes them (in-place ReLU, `out += identity`, squeeze-excite);
- `hf`: a Hugging Face BERT encoder from a small config (`transformers` needed).

Every model is built with random weights from a fixed seed; nothing is downloaded.
`example(name)` returns `(model, inputs)` in eval mode, ready for
`graphopt.capture(model, *inputs)` and `graphopt.optimize(model, *inputs)`.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import nn

from .hf import MissingPackageError, bert_encoder, token_inputs
from .mobilenet import MobileNetV3, mobilenet_v3_small
from .resnet import ResNet, resnet18, resnet34
from .small import (
    MLP,
    AddMul,
    BasicBlock,
    Bottleneck,
    CondBranch,
    DataDependentBranch,
    LinearRegression,
    PrintingAddMul,
    ResNet50,
    ScalarConstants,
    SeedConvBlock,
    ShapeLoop,
    SmallResNet,
    TensorConstants,
    TransformerBlock,
)


def _randn(*shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _three(n: int = 4):
    return tuple(_randn(n, n, seed=s) for s in range(3))


def _image(batch: int = 1, size: int = 224):
    return (_randn(batch, 3, size, size),)


def _tokens(batch: int = 1, seq_len: int = 128):
    return token_inputs(30522, batch, seq_len)  # BertConfig's default vocabulary


# name -> (builds the model, builds the inputs; its keyword arguments are the sizes
# `example(name, **sizes)` accepts)
_EXAMPLES: dict[str, tuple[Callable[[], nn.Module], Callable[..., tuple]]] = {
    "linear_regression": (LinearRegression, lambda: (_randn(10, 5),)),
    "mlp": (MLP, lambda: (_randn(4, 16),)),
    "basic_block": (BasicBlock, lambda: (_randn(1, 16, 16, 16),)),
    "small_resnet": (SmallResNet, lambda: (_randn(2, 3, 32, 32),)),
    "resnet50": (ResNet50, lambda: (_randn(1, 3, 224, 224),)),
    "transformer_block": (TransformerBlock, lambda: (_randn(2, 16, 64),)),
    "seed_conv_block": (SeedConvBlock, lambda: (_randn(1, 8, 16, 16),)),
    "add_mul": (AddMul, _three),
    "scalar_constants": (ScalarConstants, lambda: (_randn(4, 4),)),
    "tensor_constants": (TensorConstants, lambda: (_randn(4, 4),)),
    "data_dependent_branch": (DataDependentBranch, lambda: (_randn(4, 4).abs(),)),
    "cond_branch": (CondBranch, lambda: (_randn(4, 4).abs(),)),
    "shape_loop": (ShapeLoop, lambda: (_randn(5, 4),)),
    "printing_add_mul": (PrintingAddMul, _three),
    # real architectures (chapter 7); sizes default to the usual ones
    "resnet18": (resnet18, _image),
    "mobilenet_v3_small": (mobilenet_v3_small, _image),
    "bert": (bert_encoder, _tokens),
}

NAMES = tuple(_EXAMPLES)
REAL = ("resnet18", "mobilenet_v3_small", "bert")


def example(name: str, seed: int = 0, **sizes) -> tuple[nn.Module, tuple]:
    """A reference model in eval mode with seeded random weights, and example inputs.

    The real architectures take sizes: `example("resnet18", batch=8, size=64)`
    (images are `size` x `size`, default 224) and `example("bert", seq_len=32)`
    (default 1 x 128 tokens; inputs are `(input_ids, attention_mask)`).
    """
    if name not in _EXAMPLES:
        raise KeyError(f"unknown model {name!r}; choose one of {', '.join(NAMES)}")
    build, make_inputs = _EXAMPLES[name]
    accepted = set(inspect.signature(make_inputs).parameters)
    if set(sizes) - accepted:
        raise TypeError(
            f"example({name!r}) takes the sizes {sorted(accepted) or 'none'}, not "
            f"{sorted(set(sizes) - accepted)}.")
    torch.manual_seed(seed)
    model = build()
    randomize_bn(model, seed)
    return model.eval(), make_inputs(**sizes)


def randomize_bn(model: nn.Module, seed: int) -> None:
    """Give BN layers non-trivial statistics, as a trained network has (else BN is
    identity at initialisation and folding it would prove nothing)."""
    g = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)


__all__ = [
    "MLP", "AddMul", "BasicBlock", "Bottleneck", "CondBranch", "DataDependentBranch",
    "LinearRegression", "MissingPackageError", "MobileNetV3", "NAMES", "PrintingAddMul",
    "REAL", "ResNet", "ResNet50", "ScalarConstants", "SeedConvBlock", "ShapeLoop",
    "SmallResNet", "TensorConstants", "TransformerBlock", "bert_encoder", "example",
    "mobilenet_v3_small", "randomize_bn", "resnet18", "resnet34", "token_inputs",
]
