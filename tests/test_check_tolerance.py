"""optimize(check=True): a correct fold is no alarm, a wrong one still is.

An EfficientNet-like network (a stem conv, then blocks of 1x1 expand, depthwise
3x3, batch norm, SiLU, squeeze-excite and a 1x1 projection) reads an image as a
camera gives it, pixels around 4096, through an edge filter (integer taps summing
to zero, as a Sobel filter does). Eager float32 computes that filter exactly
(integers), but a folded conv's weights are the taps times the batch norm's scale,
each rounded once to float32, and 4096 times one rounding of each tap is far more
than float32's tolerance on the filter's small output. The fold is right; the old
rule (KAPPA x eager's error, which is ~0 here) called it wrong. The rule now also
allows what one float32 rounding of every constant does (`verify.Float64Reference`),
and still catches a batch norm folded without its epsilon.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn
from torch.fx import Interpreter

import graphopt
from graphopt.errors import NotEquivalentError
from graphopt.passes.conv_bn_math import fold_conv_bn_weights
from graphopt.stages import run_stages
from graphopt.verify import KAPPA, Float64Reference, _error, mismatch

# the pass's module (graphopt.passes re-exports the function under the same name)
fold_pass = importlib.import_module("graphopt.passes.fold_conv_bn")


def _bn(c: int, gen: torch.Generator) -> nn.BatchNorm2d:
    """A batch norm with EfficientNet's eps and statistics away from (0, 1)."""
    bn = nn.BatchNorm2d(c, eps=1e-3)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(c, generator=gen) * 3)
        bn.running_var.copy_(torch.rand(c, generator=gen) * 9 + 0.5)
        bn.weight.copy_(torch.randn(c, generator=gen))
        bn.bias.copy_(torch.randn(c, generator=gen))
    return bn.eval()


class MBConv(nn.Module):
    """EfficientNet's block: expand, depthwise, squeeze-excite, project, residual."""

    def __init__(self, c: int, gen: torch.Generator):
        super().__init__()
        h = 4 * c
        self.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), _bn(h, gen),
                                    nn.SiLU())
        self.depthwise = nn.Sequential(
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), _bn(h, gen), nn.SiLU())
        self.excite = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(h, c // 4, 1),
                                    nn.SiLU(), nn.Conv2d(c // 4, h, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), _bn(c, gen))

    def forward(self, x):
        y = self.depthwise(self.expand(x))
        return x + self.project(y * self.excite(y))


def efficientnet_like(seed: int = 0, blocks: int = 3, c: int = 16):
    """The backbone and one camera image (pixels 4096-4099)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    stem = nn.Conv2d(3, c, 3, bias=False)
    with torch.no_grad():  # edge filters: integer taps (/64) that sum to zero
        taps = torch.randint(-8, 9, stem.weight.shape, generator=gen).float()
        taps[:, 0, 0, 0] -= taps.sum(dim=(1, 2, 3))
        stem.weight.copy_(taps / 64)
    # the backbone's feature map, as a detector or a segmenter reads it
    model = nn.Sequential(stem, _bn(c, gen), nn.SiLU(),
                          *[MBConv(c, gen) for _ in range(blocks)])
    image = torch.randint(4096, 4100, (1, 3, 10, 10), generator=gen).float()
    return model.eval(), image


def _folded(model, image):
    res = run_stages(model, image, passes=["fold_conv_bn"], stats=False)
    captured, folded = res.stages[0].module, res.module
    with torch.no_grad():
        return captured, Interpreter(captured).run(image), Interpreter(folded).run(image)


def test_a_correct_fold_that_the_old_rule_called_wrong_passes():
    model, image = efficientnet_like()
    captured, before, after = _folded(model, image)
    assert mismatch(before, after) is not None  # float32 vs float32: apart
    truth = Float64Reference(captured)
    assert truth.recheck(0, (image,), after, "apart", before_out=before) is None
    eager, exact, nudged = truth.answers[0]
    e, off = float(_error(eager, exact).max()), _error(after, exact)
    # the old rule: |stage - float64| <= KAPPA * E + rtol |float64| + atol * scale
    old = KAPPA * e + 1e-4 * exact.abs() + 1e-5 * max(1.0, float(exact.abs().max()))
    assert bool((off > old).any())  # it cried wolf here
    d = float(_error(nudged, exact).max())  # what one rounding per constant does
    assert float(off.max()) <= KAPPA * (e + d)
    graphopt.optimize(model, image, check=True, stats=False)  # no alarm end to end


def _fold_without_eps(conv_w, conv_b, mean, var, eps, gamma, beta):
    return fold_conv_bn_weights(conv_w, conv_b, mean, var, 0.0, gamma, beta)


def test_a_batch_norm_folded_without_its_epsilon_is_still_caught(monkeypatch):
    model, image = efficientnet_like()
    monkeypatch.setattr(fold_pass, "fold_conv_bn_weights", _fold_without_eps)
    with pytest.raises(NotEquivalentError, match="fold_conv_bn.*from float64"):
        graphopt.optimize(model, image, check=True, stats=False)


def test_an_error_past_every_rounding_is_caught():
    model, image = efficientnet_like()
    captured, before, _ = _folded(model, image)
    truth = Float64Reference(captured)
    wrong = before + 1e-3 * before.abs().max()  # an error well past any rounding
    verdict = truth.recheck(0, (image,), wrong, "apart", before_out=before)
    assert verdict is not None and "float32 constants move it" in verdict
