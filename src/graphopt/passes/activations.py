"""Activations as a fused pattern module applies them (chapter 4).

A pattern such as Conv+ReLU6 records WHICH activation it ends with; how a kernel
applies it is the backend's business. An `Activation` carries both names: the
reader's (`name`, "relu6") and the one oneDNN's post-ops take (`attr`, `scalars`,
`algorithm`, the strings inductor passes to `mkldnn._convolution_pointwise`), and
`eager` applies it with torch's own op, as the module's reference executor does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Activation:
    """An activation as oneDNN names it (`attr`, `scalars`, `algorithm`) and as eager.

    `name` is the reader's name ("relu6"); `eager` applies it out of place (ch. 4).
    """

    name: str
    attr: str
    scalars: tuple = ()
    algorithm: str = ""

    def eager(self, y: torch.Tensor) -> torch.Tensor:
        if self.attr == "relu":
            return torch.relu(y)
        if self.attr == "hardtanh":
            return F.hardtanh(y, *self.scalars)
        if self.attr == "hardswish":
            return F.hardswish(y)
        if self.attr == "swish":
            return F.silu(y)
        if self.attr == "gelu":
            return F.gelu(y, approximate=self.algorithm)
        return y  # "none"


# The activations real models use, by the reader's name.
RELU = Activation("relu", "relu")
ACTIVATIONS = {
    "relu": RELU,
    "relu6": Activation("relu6", "hardtanh", (0.0, 6.0)),
    "hardswish": Activation("hardswish", "hardswish"),
    "silu": Activation("silu", "swish"),
    "gelu": Activation("gelu", "gelu", (), "none"),
    "gelu_tanh": Activation("gelu_tanh", "gelu", (), "tanh"),
    "none": Activation("none", "none"),
}


def hardtanh(lo: float, hi: float) -> Activation:
    """Hardtanh with any bounds (ReLU6 is hardtanh(0, 6)) (ch. 4)."""
    name = "relu6" if (lo, hi) == (0.0, 6.0) else f"hardtanh({lo:g}, {hi:g})"
    return Activation(name, "hardtanh", (float(lo), float(hi)))
