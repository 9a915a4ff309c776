"""MobileNetV3-Small, written the way torchvision writes it (chapter 7).

A faithful copy of `torchvision.models.mobilenetv3` (and of the two helpers it takes
from `torchvision.ops.misc`): the same configuration table, the same module names
(`features.1.block.0.fc1`, `classifier.3`), so state-dict keys and the parameter
count (2,542,856) match torchvision's. What it gives an optimizer: depthwise convs,
Hardswish and ReLU activations created with `inplace=True`, squeeze-and-excitation
(global pool, two 1x1 convs, hardsigmoid, a multiply by the input), residuals written
`result += input`, and an in-place Dropout in the classifier.

We do not import torchvision itself: its PyPI wheel fails to load with the CPU torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from torch import nn


def _make_divisible(v: float, divisor: int = 8) -> int:
    """Round channels to a multiple of 8 (as the MobileNet papers do), losing <10%."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class Conv2dNormActivation(nn.Sequential):
    """torchvision.ops.Conv2dNormActivation: conv, BN, activation as `0`, `1`, `2`."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3,
                 stride: int = 1, groups: int = 1,
                 norm_layer: Callable[..., nn.Module] | None = nn.BatchNorm2d,
                 activation_layer: Callable[..., nn.Module] | None = nn.ReLU,
                 dilation: int = 1, inplace: bool | None = True):
        padding = (kernel_size - 1) // 2 * dilation
        layers: list[nn.Module] = [nn.Conv2d(
            in_channels, out_channels, kernel_size, stride, padding, dilation=dilation,
            groups=groups, bias=norm_layer is None)]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            params = {} if inplace is None else {"inplace": inplace}
            layers.append(activation_layer(**params))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: scale each channel by a gate from its mean."""

    def __init__(self, input_channels: int, squeeze_channels: int,
                 activation: Callable[..., nn.Module] = nn.ReLU,
                 scale_activation: Callable[..., nn.Module] = nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def _scale(self, input: torch.Tensor) -> torch.Tensor:
        scale = self.avgpool(input)
        scale = self.fc1(scale)
        scale = self.activation(scale)
        scale = self.fc2(scale)
        return self.scale_activation(scale)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        scale = self._scale(input)
        return scale * input


@dataclass
class InvertedResidualConfig:
    """One row of the MobileNetV3 table (channels rounded by `_make_divisible`)."""

    input_channels: int
    kernel: int
    expanded_channels: int
    out_channels: int
    use_se: bool
    use_hs: bool  # Hardswish ("HS") rather than ReLU ("RE")
    stride: int
    dilation: int = 1


def _bneck(cin, kernel, expanded, cout, use_se, activation, stride, dilation=1):
    return InvertedResidualConfig(
        _make_divisible(cin), kernel, _make_divisible(expanded), _make_divisible(cout),
        use_se, activation == "HS", stride, dilation)


class InvertedResidual(nn.Module):
    """Expand (1x1), depthwise (kxk), squeeze-excite, project (1x1), maybe `+=`."""

    def __init__(
        self,
        cnf: InvertedResidualConfig,
        norm_layer: Callable[..., nn.Module],
        se_layer: Callable[..., nn.Module] = partial(
            SqueezeExcitation, scale_activation=nn.Hardsigmoid
        ),
    ):
        super().__init__()
        if not (1 <= cnf.stride <= 2):
            raise ValueError("illegal stride value")
        self.use_res_connect = (
            cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        )
        layers: list[nn.Module] = []
        activation_layer = nn.Hardswish if cnf.use_hs else nn.ReLU
        if cnf.expanded_channels != cnf.input_channels:  # expand
            layers.append(Conv2dNormActivation(
                cnf.input_channels, cnf.expanded_channels, kernel_size=1,
                norm_layer=norm_layer, activation_layer=activation_layer))
        stride = 1 if cnf.dilation > 1 else cnf.stride  # depthwise
        layers.append(Conv2dNormActivation(
            cnf.expanded_channels, cnf.expanded_channels, kernel_size=cnf.kernel,
            stride=stride, dilation=cnf.dilation, groups=cnf.expanded_channels,
            norm_layer=norm_layer, activation_layer=activation_layer))
        if cnf.use_se:
            squeeze_channels = _make_divisible(cnf.expanded_channels // 4, 8)
            layers.append(se_layer(cnf.expanded_channels, squeeze_channels))
        layers.append(Conv2dNormActivation(  # project
            cnf.expanded_channels, cnf.out_channels, kernel_size=1,
            norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels
        self._is_cn = cnf.stride > 1

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        result = self.block(input)
        if self.use_res_connect:
            result += input
        return result


# torchvision's table for mobilenet_v3_small (width_mult=1, no reduced tail):
#       in  k  expanded out  SE     act   stride
SMALL_SETTING = [
    (16, 3, 16, 16, True, "RE", 2),    # C1
    (16, 3, 72, 24, False, "RE", 2),   # C2
    (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2),    # C3
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1),
    (48, 5, 144, 48, True, "HS", 1),
    (48, 5, 288, 96, True, "HS", 2),   # C4
    (96, 5, 576, 96, True, "HS", 1),
    (96, 5, 576, 96, True, "HS", 1),
]
SMALL_LAST_CHANNEL = 1024  # C5


class MobileNetV3(nn.Module):
    """torchvision's MobileNetV3: features, global pool, a two-layer classifier."""

    def __init__(self, inverted_residual_setting: list[InvertedResidualConfig],
                 last_channel: int, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        first = inverted_residual_setting[0].input_channels
        layers: list[nn.Module] = [Conv2dNormActivation(
            3, first, kernel_size=3, stride=2, norm_layer=norm_layer,
            activation_layer=nn.Hardswish)]
        layers += [
            InvertedResidual(cnf, norm_layer) for cnf in inverted_residual_setting
        ]
        last_in = inverted_residual_setting[-1].out_channels
        last_out = 6 * last_in
        layers.append(Conv2dNormActivation(last_in, last_out, kernel_size=1,
                                           norm_layer=norm_layer,
                                           activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(last_out, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(p=dropout, inplace=True),
            nn.Linear(last_channel, num_classes),
        )
        self._init_weights()

    def _init_weights(self) -> None:  # torchvision's initialisation
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


def mobilenet_v3_small(num_classes: int = 1000, dropout: float = 0.2) -> MobileNetV3:
    """MobileNetV3-Small with torchvision's configuration and random initialisation."""
    setting = [_bneck(*row) for row in SMALL_SETTING]
    return MobileNetV3(setting, _make_divisible(SMALL_LAST_CHANNEL), num_classes,
                       dropout)
