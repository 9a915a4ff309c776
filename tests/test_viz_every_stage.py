"""Every stage of every reference model draws (issue #21, chapter 3's drawings).

A pass that re-traces with symbolic shapes (fuse_qkv on BERT) leaves nodes whose
byte size is a `torch.SymInt`; the drawing shows it as its expression.
"""

import pytest
import torch

import graphopt
from graphopt import models
from graphopt.errors import GraphoptError
from graphopt.interpret import fmt_bytes

SIZES = {"resnet18": {"size": 32}, "mobilenet_v3_small": {"size": 32},
         "bert": {"seq_len": 8}}
SLOW = {"bert", "resnet50", "resnet18", "mobilenet_v3_small"}  # over 10 s here


def _params():
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
            for n in models.NAMES]


@pytest.mark.parametrize("name", _params())
def test_every_stage_draws(name):
    model, inputs = models.example(name, **SIZES.get(name, {}))
    if name == "resnet50":  # its example is 224x224; the same graph at 64x64
        inputs = (torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)),)
    try:
        # the real models' stages are run and counted by test_real_models (eval and
        # train, larger inputs): here only their drawings, which read no stats
        res = graphopt.optimize(model, *inputs, stats=name not in models.REAL)
    except GraphoptError as e:  # a model chapter 2 shows cannot be captured
        pytest.skip(f"{name} is not capturable: {str(e).splitlines()[0]}")
    for stage in res.stages:
        source = graphopt.draw(stage.module).source
        assert "output" in source, stage.name


def test_symbolic_size_is_shown_as_its_expression():
    from torch.fx.experimental.sym_node import SymNode  # noqa: F401
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    env = ShapeEnv()
    s = env.create_unbacked_symint()
    assert fmt_bytes(32 * s).endswith(" B") and "32" in fmt_bytes(32 * s)
    assert fmt_bytes(1536) == "1.5 KiB"
