"""draw(): fx graphs, fused clusters, autograd graphs; same DOT every time (ch. 1)."""

import re

import graphviz
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import fx, nn

import graphopt
from graphopt import OpKind, models
from graphopt.viz import COLOURS, Drawing


@pytest.fixture(scope="module")
def seed_gm():
    model, (x,) = models.example("seed_conv_block")
    return graphopt.capture(model, x, level="module")


def test_draw_returns_a_digraph_with_every_node(seed_gm):
    d = graphopt.draw(seed_gm)
    assert isinstance(d, Drawing) and isinstance(d, graphviz.Digraph)
    for name in ("x", "conv", "relu", "bn", "add", "output"):
        assert re.search(rf"^\s*{name} \[", d.source, re.M), name


def test_colour_per_kind_and_a_legend(seed_gm):
    src = graphopt.draw(seed_gm).source
    red = COLOURS[OpKind.COMPUTE]
    assert re.search(r'conv \[label="conv\\nConv2d" fillcolor="%s"' % red, src)
    assert f'relu [label=relu fillcolor="{COLOURS[OpKind.ELEMENTWISE]}"' in src
    assert "subgraph cluster_legend" in src
    legend = re.findall(r"legend_(\w+) \[label", src)
    # only kinds drawn in colour, in enum order
    assert legend == ["elementwise", "compute"]


def test_edges_carry_shape_dtype_and_bytes(seed_gm):
    src = graphopt.draw(seed_gm).source
    assert 'x -> conv [label="1×8×16×16 f32\\n8.0 KiB" weight=4]' in src
    assert 'bn -> add [label="1×8×16×16 f32\\n8.0 KiB" weight=4]' in src
    assert "x -> add" in src  # the residual edge


def test_drawn_narrow_enough_for_a_book_column():
    """Issue 23: a weight's size sits in its ellipse (no edge label), an op's weights
    stand in a column (invisible edges), unused inputs hang dashed under the output,
    and the BasicBlock drawing stays under 700 pt wide (it was 1352)."""
    model, (x,) = models.example("basic_block")
    d = graphopt.draw(graphopt.capture(model, x))
    src = d.source
    assert 'conv1_weight [label="conv1_weight\\n16×16×3×3, 9.0 KiB"' in src
    assert re.search(r"^\s*conv1_weight -> conv2d$", src, re.M)
    assert "bn1_weight -> bn1_bias [style=invis]" in src
    assert "output -> bn1_num_batches_tracked [style=invis]" in src
    assert re.search(r"bn1_num_batches_tracked \[[^]]*style=dashed", src)
    width = float(re.search(r'<svg width="([\d.]+)pt"', d.svg()).group(1))
    assert width < 700, width
    assert "21 nodes, 19 edges" in d.describe()  # invisible edges are not counted


def test_options(seed_gm):
    d = graphopt.draw(seed_gm, title="seed block", legend=False, edge_labels=False,
                      rankdir="LR")
    assert "cluster_legend" not in d.source
    assert "x -> conv [weight=4]" in d.source  # no label
    assert "rankdir=LR" in d.source and 'label="seed block"' in d.source


def test_aten_graph_hides_the_export_guard():
    model, (x,) = models.example("seed_conv_block")
    src = graphopt.draw(graphopt.capture(model, x)).source
    assert "_guards_fn" not in src
    assert "conv_weight -> conv2d" in src


def test_svg_renders(seed_gm):
    svg = graphopt.draw(seed_gm).svg()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "conv" in svg
    bundle = graphopt.draw(seed_gm)._repr_mimebundle_()
    assert list(bundle) == ["image/svg+xml", "text/plain"]


def test_svg_title_and_text_fallback_say_what_the_figure_shows(seed_gm):
    d = graphopt.draw(seed_gm, title="seed block")
    assert "<title>seed block</title>" in d.svg() and "%3" not in d.svg()
    text = d._repr_mimebundle_()["text/plain"]
    # 6 nodes (x, conv, relu, bn, add, output), 6 edges; the legend is not counted
    assert text.startswith('Graph drawing "seed block": 6 nodes, 6 edges')
    assert "0x" not in text and "Drawing at" not in text
    assert "<title>computation graph</title>" in graphopt.draw(seed_gm).svg()


def test_same_dot_twice_and_for_two_captures():
    for level in ("aten", "module"):
        model, (x,) = models.example("basic_block")
        first = graphopt.draw(graphopt.capture(model, x, level=level)).source
        again = graphopt.draw(graphopt.capture(model, x, level=level))
        model2, (x2,) = models.example("basic_block")
        other = graphopt.draw(graphopt.capture(model2, x2, level=level))
        assert first == again.source == other.source


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 16), min_size=2, max_size=5),
       batch=st.integers(1, 4), level=st.sampled_from(["aten", "module"]))
def test_drawing_is_deterministic_for_generated_mlps(sizes, batch, level):
    def source():
        torch.manual_seed(0)
        model = models.MLP(tuple(sizes)).eval()
        gm = graphopt.capture(model, torch.randn(batch, sizes[0]), level=level)
        return graphopt.draw(gm).source

    assert source() == source()


def test_fused_group_is_drawn_as_a_cluster():
    class Fused(nn.Module):
        graphopt_kind = OpKind.ELEMENTWISE
        graphopt_kernels = 1

        def __init__(self):
            super().__init__()
            self.gm = fx.symbolic_trace(lambda a, b: (a + b).relu())

        def forward(self, a, b):
            return self.gm(a, b)

    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    g.output(g.call_module("fused_0", (x, y)))
    root = nn.Module()
    root.fused_0 = Fused()
    gm = fx.GraphModule(root, g)
    src = graphopt.draw(gm).source
    assert "subgraph cluster_fused_0" in src and "fused: 1 kernel" in src
    assert 'x -> "fused_0.in0"' in src and 'y -> "fused_0.in1"' in src
    assert '"fused_0.add" -> "fused_0.relu" [style=dashed]' in src
    assert '"fused_0.out" -> output' in src


def test_draw_rejects_other_things():
    with pytest.raises(TypeError, match="capture the model first"):
        graphopt.draw(models.MLP())


# ---------------------------------------------------------------- autograd graphs

def _loss():
    torch.manual_seed(0)
    x, target = torch.randn(10, 5), torch.randn(10, 1)
    w = torch.randn(5, 1, requires_grad=True)
    b = torch.randn(1, requires_grad=True)
    return ((x @ w + b) - target).pow(2).mean(), w, b


def test_draw_autograd_graph():
    loss, w, b = _loss()
    d = graphopt.draw(graphopt.autograd_graph(loss, names={"w": w, "b": b}))
    src = d.source
    assert "autograd graph" in src
    assert 'label="w\\n5×1"' in src and 'label="b\\n1"' in src
    assert "MmBackward0" in src and "MeanBackward0" in src
    # edges point the way gradients flow: from the output back to the leaves
    assert "out -> n0" in src
    assert "<svg" in d.svg()


def test_autograd_drawing_is_deterministic():
    a = graphopt.draw(graphopt.autograd_graph(_loss()[0])).source
    b = graphopt.draw(graphopt.autograd_graph(_loss()[0])).source
    assert a == b


def test_memory_hierarchy_figure_is_deterministic_and_titled():
    from graphopt import viz

    first, again = viz.memory_hierarchy(), viz.memory_hierarchy()
    assert first.source == again.source
    assert "<title>the memory hierarchy</title>" in first.svg()
    for level in ("registers", "L1 / shared memory", "main memory"):
        assert level in first.source


def test_launch_timeline_shows_each_launch_and_the_busy_share():
    import matplotlib

    matplotlib.use("Agg")
    from graphopt import viz

    fig = viz.launch_timeline(4, 2, host_us=5.0, kernel_us=3.0)
    eager, fused = (ax.get_title(loc="left") for ax in fig.axes)
    # 4 launches of 5 µs host work feed 3 µs kernels: the GPU waits between them
    assert eager == "eager: 4 launches, GPU busy 52% of the time"
    # (done at 5+3, 10+3, 15+3, 20+3: 12 µs of work in 23 µs). The same 12 µs in
    # 2 kernels of 6 µs start at 5 and 11 and end at 17: busy 12 / 17
    assert fused == "fused graph: 2 launches, GPU busy 71% of the time"
    assert sum(len(ax.collections) for ax in fig.axes) == 2 * (4 + 2)
