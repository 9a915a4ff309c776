"""Small reference models that run in milliseconds, and the lecture notes' examples.

Chapters 1-6 use these: each is small enough to draw whole. `graphopt.models.example`
builds them with seeded random weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class LinearRegression(nn.Module):
    """y = x @ w + b, the lecture notes' first example."""

    def __init__(self, in_features: int = 5):
        super().__init__()
        self.linear = nn.Linear(in_features, 1)

    def forward(self, x):
        return self.linear(x)


class MLP(nn.Module):
    def __init__(self, sizes=(16, 32, 32, 8)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3×3 conv+BN, a residual add, ReLU."""

    def __init__(self, channels: int = 16, stride: int = 1,
                 in_channels: int | None = None):
        super().__init__()
        cin = in_channels or channels
        self.conv1 = nn.Conv2d(cin, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != channels:
            conv = nn.Conv2d(cin, channels, 1, stride, bias=False)
            self.shortcut = nn.Sequential(conv, nn.BatchNorm2d(channels))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """A stem, three basic blocks and a classifier: 32×32 images in milliseconds."""

    def __init__(self, width: int = 16, num_classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.block1 = BasicBlock(width)
        self.block2 = BasicBlock(2 * width, stride=2, in_channels=width)
        self.block3 = BasicBlock(2 * width)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = self.block3(self.block2(self.block1(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class Bottleneck(nn.Module):
    """ResNet-50's block: 1×1 reduce, 3×3, 1×1 expand (4×), each with BN."""

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet50(nn.Module):
    """ResNet-50's shape ([3, 4, 6, 3] bottlenecks, 64..2048 channels), random weights.

    `width` scales every layer (64 is the real network); the layer structure, and so
    the node counts, stay the same at any width.
    """

    def __init__(self, width: int = 64, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        blocks, cin = [], width
        for stage, (n, w) in enumerate(zip((3, 4, 6, 3), (1, 2, 4, 8))):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(Bottleneck(cin, w * width, stride))
                cin = 4 * w * width
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class TransformerBlock(nn.Module):
    """A post-norm Transformer encoder block, attention written out op by op."""

    def __init__(self, d_model: int = 64, heads: int = 4, d_ff: int = 128):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for y in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        attn = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.norm1(x + self.proj(attn))                   # Add + LayerNorm
        # MatMul+Add+ReLU, then Add + LayerNorm
        return self.norm2(x + self.ff2(F.relu(self.ff1(x))))


class SeedConvBlock(nn.Module):
    """The lecture notes' data-flow example: D = BN(ReLU(Conv(x))) + x."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        a = self.conv(x)
        b = F.relu(a)
        c = self.bn(b)
        return c + x


class AddMul(nn.Module):
    """The lecture notes' z = (x + y) * w."""

    def forward(self, x, y, w):
        return (x + y) * w


class ScalarConstants(nn.Module):
    """The lecture notes' folding example: c = a * b is known before any data."""

    def forward(self, x):
        a = 3.14
        b = 2.0
        c = a * b
        return c + x


class TensorConstants(nn.Module):
    """The same example with tensor constants, which tracing keeps as graph nodes."""

    def __init__(self):
        super().__init__()
        self.register_buffer("a", torch.tensor(3.14))
        self.register_buffer("b", torch.tensor(2.0))

    def forward(self, x):
        c = self.a * self.b
        return c + x



# Chapter 2: control flow, which each capture method handles differently.

class DataDependentBranch(nn.Module):
    """An `if` on a tensor's value: the branch taken depends on the data."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def _double(x):
    return x * 2


def _minus_one(x):
    return x - 1


class CondBranch(nn.Module):
    """The same branch written with torch.cond, so both sides go into the graph."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, _double, _minus_one, (x,))


class ShapeLoop(nn.Module):
    """A loop over the rows of x, as an RNN steps through time: x.shape[0] steps."""

    def forward(self, x):
        h = torch.zeros_like(x[0])
        for i in range(x.shape[0]):
            h = torch.relu(h * 0.5 + x[i])
        return h


class PrintingAddMul(nn.Module):
    """z = (x + y) * w with a `print` inside forward: when does Python run?"""

    def forward(self, x, y, w):
        print("forward ran")
        return (x + y) * w
