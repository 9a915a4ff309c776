"""Topological levels, seed-style access counts and fused-kernel traffic (chapter 1)."""

import pytest
import torch

import graphopt
from graphopt import models
from graphopt.dataflow import Traffic, accesses, draw_levels, fused_traffic, levels


def _names(gm):
    return [[n.name for n in level] for level in levels(gm)]


@pytest.fixture(scope="module")
def downsample_block():
    torch.manual_seed(0)
    block = models.BasicBlock(16, stride=2, in_channels=8).eval()
    return block, torch.randn(1, 8, 16, 16)


def test_residual_branch_runs_beside_the_main_path(downsample_block):
    block, x = downsample_block
    gm = graphopt.capture(block, x, level="module")
    assert _names(gm) == [["conv1", "shortcut_0"], ["bn1", "shortcut_1"], ["relu"],
                          ["conv2"], ["bn2"], ["add"], ["relu_1"]]


def test_levels_agree_across_capture_levels(downsample_block):
    block, x = downsample_block
    aten = [len(level) for level in levels(graphopt.capture(block, x))]
    gm = graphopt.capture(block, x, level="module")
    module = [len(level) for level in levels(gm)]
    assert aten == module == [2, 2, 1, 1, 1, 1, 1]


def test_a_chain_has_one_op_per_level():
    model, (x,) = models.example("seed_conv_block")
    assert _names(graphopt.capture(model, x)) == [["conv2d"], ["relu"], ["batch_norm"],
                                                   ["add"]]


@pytest.mark.parametrize("name", ["basic_block", "transformer_block", "small_resnet"])
def test_every_op_sits_below_everything_it_reads(name):
    model, inputs = models.example(name)
    gm = graphopt.capture(model, *inputs)
    where = {n: i for i, level in enumerate(levels(gm)) for n in level}
    ops = [n for n in gm.graph.nodes if n.name != "_guards_fn"
           and n.op not in ("placeholder", "get_attr", "output")]
    assert set(where) == set(ops)
    for n in ops:
        deps = [where[a] for a in n.all_input_nodes if a in where]
        assert where[n] == 1 + max(deps, default=-1)


def test_empty_graph_has_no_levels():
    gm = graphopt.capture(lambda x: x, torch.randn(2), level="module")
    assert levels(gm) == []


def test_draw_levels_puts_each_level_on_one_row(downsample_block):
    block, x = downsample_block
    d = draw_levels(graphopt.capture(block, x, level="module"))
    src = d.source
    assert src.count("rank=same") == 7
    assert "subgraph level_0 {\n\t\trank=same\n\t\tconv1 [xlabel=L0]\n" \
           "\t\tshortcut_0 [xlabel=L0]" in src
    assert src == draw_levels(graphopt.capture(block, x, level="module")).source
    assert "<svg" in d.svg()


@pytest.mark.parametrize("level", ["aten", "module"])
def test_seed_access_count(level):
    model, (x,) = models.example("seed_conv_block")
    gm = graphopt.capture(model, x, level=level)
    # conv reads x, relu A, bn B, add C and the residual x: 5 reads; 4 writes
    assert accesses(gm) == Traffic(5, 4) and accesses(gm).total == 9
    assert accesses(gm, fused=True) == Traffic(1, 1)


@pytest.mark.parametrize("level", ["aten", "module"])
def test_fused_traffic_of_the_seed_block(level):
    model, (x,) = models.example("seed_conv_block")
    gm = graphopt.capture(model, x, level=level)
    act, weights = 8 * 16 * 16 * 4, 8 * 8 * 3 * 3 * 4 + 4 * 8 * 4
    assert fused_traffic(gm) == Traffic(act + weights, act)
    report = graphopt.run(gm, x)
    assert report.bytes_moved == 4 * act + 5 * act + weights  # 4 writes, 5 reads
    assert fused_traffic(gm).total < report.bytes_moved


@pytest.mark.parametrize("name", ["mlp", "basic_block", "transformer_block"])
def test_fused_traffic_is_a_floor(name):
    model, inputs = models.example(name)
    for level in ("aten", "module"):
        gm = graphopt.capture(model, *inputs, level=level)
        r = graphopt.run(gm, *inputs)
        ideal = fused_traffic(gm)
        assert ideal.writes <= r.bytes_written and ideal.total <= r.bytes_moved
