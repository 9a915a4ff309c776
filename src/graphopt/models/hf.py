"""A BERT encoder from Hugging Face `transformers`, built from a config (chapter 7).

Random weights from a seed, nothing downloaded. `transformers` is imported only when
a model is built, so `import graphopt` stays quick and works without it.

The model is `transformers.BertModel` itself, not a wrapper: it takes `input_ids` and
`attention_mask` (by keyword or in that order) and returns Hugging Face's output
object, whose tensors torch.export and graphopt read through torch's pytree (the
`transformers` package registers its output classes there). So what the tests and
chapter 7 optimize is exactly what a reader's own code would pass in.
"""

from __future__ import annotations

from importlib import import_module

import torch

from ..errors import GraphoptError


class MissingPackageError(GraphoptError, ImportError):
    """An optional package that a model or peer needs is not installed."""


def require(package: str, why: str):
    """Import `package`, or say how to install it (one line, no traceback)."""
    try:
        return import_module(package)
    except ImportError:
        raise MissingPackageError(
            f"{why} needs the {package!r} package, which is not installed. Install the "
            f"project's dev extras (pip install -e '.[dev]') or pip install {package}."
        ) from None


def bert_encoder(num_hidden_layers: int = 4, hidden_size: int = 256,
                 num_attention_heads: int = 4, intermediate_size: int = 1024,
                 attn_implementation: str = "eager"):
    """`transformers.BertModel` from a small config, random weights, in eval mode.

    Every other setting is BertConfig's default (30522-token vocabulary, GELU, dropout
    0.1 in training mode, 512 positions). `attn_implementation="eager"` writes the
    attention out op by op (matmul, scale, mask, softmax, matmul), the chain an
    attention-fusion pass looks for; "sdpa" is transformers' own fused default.
    """
    transformers = require("transformers", "graphopt.models.bert_encoder")
    config = transformers.BertConfig(
        num_hidden_layers=num_hidden_layers, hidden_size=hidden_size,
        num_attention_heads=num_attention_heads, intermediate_size=intermediate_size,
        attn_implementation=attn_implementation)
    return transformers.BertModel(config).eval()


def token_inputs(vocab_size: int, batch: int = 1, seq_len: int = 128,
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask): valid token ids, and a mask that pads the last row.

    The last sequence of the batch is padded over its final quarter (mask 0), so the
    mask really changes the result and a pass that dropped it would be caught.
    """
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (batch, seq_len), generator=g)
    attention_mask = torch.ones(batch, seq_len, dtype=torch.long)
    attention_mask[-1, seq_len - seq_len // 4:] = 0
    return input_ids, attention_mask
