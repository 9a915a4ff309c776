"""run(): outputs, per-node bytes and kernels, exact peak memory (chapter 1)."""

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import graphopt
from graphopt import OpKind, models
from graphopt.interpret import NodeStats, Report, fmt_bytes
from graphopt.ops import op_name

# the fused kernels on small shapes: the policy's small-work rules are off here
pytestmark = pytest.mark.usefixtures("small_work_fused")

F32 = 4


def _run(fn, *inputs, level="aten"):
    gm = graphopt.capture(fn, *inputs, level=level)
    return gm, graphopt.run(gm, *inputs)


# ---------------------------------------------------------------- the report

@pytest.fixture(scope="module")
def seed_report():
    model, (x,) = models.example("seed_conv_block")
    gm = graphopt.capture(model, x)
    return model, x, graphopt.run(gm, x)


def test_report_outputs_equal_eager(seed_report):
    model, x, report = seed_report
    assert isinstance(report, Report)
    torch.testing.assert_close(report.outputs, model(x))


def test_report_rows_for_the_seed_block(seed_report):
    _, x, r = seed_report
    act = x.numel() * F32                         # 8 KiB: every activation is 1×8×16×16
    conv_w, bn_params = 8 * 8 * 3 * 3 * F32, 4 * 8 * F32
    assert [(n.name, n.kind) for n in r.nodes] == [
        ("conv2d", OpKind.COMPUTE), ("relu", OpKind.ELEMENTWISE),
        ("batch_norm", OpKind.ELEMENTWISE), ("add", OpKind.ELEMENTWISE)]
    assert [n.bytes_read for n in r.nodes] == [act + conv_w, act, act + bn_params,
                                               2 * act]
    assert [n.bytes_written for n in r.nodes] == [act] * 4
    assert [n.kernels for n in r.nodes] == [1, 1, 1, 1]
    assert all(n.shape == (1, 8, 16, 16) for n in r.nodes)
    assert all(isinstance(n, NodeStats) and n.time_s >= 0 for n in r.nodes)


def test_report_totals_add_up(seed_report):
    _, _, r = seed_report
    assert r.bytes_read == sum(n.bytes_read for n in r.nodes) == 43392
    assert r.bytes_written == 32768
    assert r.bytes_moved == r.bytes_read + r.bytes_written
    assert r.kernels == 4
    assert r.time_s == pytest.approx(sum(n.time_s for n in r.nodes))
    # x, the conv result and the ReLU result are alive together (x waits for the add)
    assert r.peak_bytes == 3 * 8192
    # conv weight, BN's 4 vectors, BN's step counter
    assert r.param_bytes == 2304 + 4 * 32 + 8


def test_report_renders_as_text_and_html(seed_report):
    _, _, r = seed_report
    text = repr(r)
    assert text.splitlines()[0].split() == ["node", "op", "kind", "read", "written",
                                             "kernels"]
    assert "conv2d" in text
    assert text.splitlines()[-1].startswith("total: 4 ops, 4 kernels")
    assert r.summary() == ("4 ops, 4 kernels, 42.4 KiB read, 32.0 KiB written, "
                           "peak 24.0 KiB")
    html = r._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == 1 + len(r.nodes)


def test_both_levels_count_the_same_traffic():
    model, (x,) = models.example("seed_conv_block")
    a = graphopt.run(graphopt.capture(model, x, level="aten"), x)
    m = graphopt.run(graphopt.capture(model, x, level="module"), x)
    assert (a.bytes_read, a.bytes_written, a.kernels, a.peak_bytes) == (
        m.bytes_read, m.bytes_written, m.kernels, m.peak_bytes)


def test_fmt_bytes():
    assert [fmt_bytes(n) for n in (0, 1023, 1536, 3 * 2**20, 5 * 2**30)] == [
        "0 B", "1023 B", "1.5 KiB", "3.0 MiB", "5.0 GiB"]


# ---------------------------------------------------------------- exact peak memory

X = 4 * 4 * F32  # one 4×4 float32 tensor: 64 bytes


@pytest.mark.parametrize("level", ["aten", "module"])
@pytest.mark.parametrize("fn, peak", [
    (lambda x: x.relu().neg().abs(), 2 * X),        # a chain holds two values at a time
    (lambda x: x + x.relu(), 3 * X),                # x waits for the add: x, r, out
    (lambda x: x.relu() * x.neg() + x, 4 * X),      # x, a, b and a*b
    (lambda x: x.view(16).relu(), 2 * X),           # a view shares x's memory
])
def test_peak_memory_is_exact_on_hand_counted_graphs(fn, peak, level):
    _, r = _run(fn, torch.randn(4, 4), level=level)
    assert r.peak_bytes == peak


def test_live_bytes_fall_when_values_die():
    _, r = _run(lambda x: x.relu().neg().abs(), torch.randn(4, 4))
    assert [n.live_bytes for n in r.nodes] == [2 * X, 2 * X, 2 * X]
    _, r = _run(lambda x: x.relu() * x.neg() + x, torch.randn(4, 4))
    assert [n.live_bytes for n in r.nodes] == [2 * X, 3 * X, 4 * X, 3 * X]


def test_views_move_no_bytes_and_launch_no_kernel():
    _, r = _run(lambda x: x.transpose(0, 1).reshape(16).relu(), torch.randn(4, 4))
    view_rows = [n for n in r.nodes if n.kind is OpKind.LAYOUT]
    assert [n.op for n in view_rows] == ["transpose", "reshape"]
    # transpose is a view; reshape of a transposed tensor must copy: one kernel
    assert [(n.bytes_read, n.bytes_written, n.kernels) for n in view_rows] == [
        (0, 0, 0), (X, X, 1)]


@pytest.mark.parametrize("level", ["aten", "module"])
def test_in_place_ops_move_their_bytes(level):
    # relu_ returns its own input, like a view, but its kernel reads and writes it
    model = nn.Sequential(nn.Conv2d(1, 1, 1, bias=False), nn.ReLU(inplace=True)).eval()
    _, r = _run(model, torch.randn(1, 1, 4, 4), level=level)
    assert [(n.kind, n.bytes_read, n.bytes_written, n.kernels) for n in r.nodes][1] == (
        OpKind.ELEMENTWISE, X, X, 1)


def test_reading_part_of_a_buffer_counts_only_that_part():
    # q and k are thirds of one buffer; reading them moves two thirds of it, not all
    def attention_scores(x):
        q, k, _ = x.chunk(3, dim=-1)
        return q @ k.transpose(-2, -1)

    _, r = _run(attention_scores, torch.randn(8, 12))
    matmul = next(n for n in r.nodes if n.op == "matmul")
    assert matmul.bytes_read == 2 * 8 * 4 * F32


def test_declared_kernel_count_of_a_fused_module_wins():
    class Fused(nn.Module):
        graphopt_kind = OpKind.ELEMENTWISE
        graphopt_kernels = 1

        def forward(self, x):
            return (x.relu() * 2).neg()  # three aten kernels when run eagerly

    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_module("fused", (x,)))
    root = nn.Module()
    root.fused = Fused()
    gm = graphopt.annotate(torch.fx.GraphModule(root, g), torch.randn(4, 4))
    r = graphopt.run(gm, torch.randn(4, 4))
    assert [(n.kernels, n.kind, n.bytes_read, n.bytes_written) for n in r.nodes] == [
        (1, OpKind.ELEMENTWISE, X, X)]


@pytest.mark.parametrize("sign", [1, -1])
def test_torch_cond_graphs_run_the_branch_the_data_picks(sign):
    model, (x,) = models.example("cond_branch")
    x = sign * x  # x is |randn|: +x takes the true branch, -x the false one
    r = graphopt.run(graphopt.capture(model, x), x)
    torch.testing.assert_close(r.outputs, model(x))
    assert [(n.op, n.kernels) for n in r.nodes] == [
        ("sum", 1), ("gt", 1), ("cond", 1), ("getitem", 0)]


def test_run_wants_a_graph_module():
    with pytest.raises(TypeError, match="capture the model first"):
        graphopt.run(models.MLP(), torch.randn(2, 16))


# ---------------------------------------------------------------- properties

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
               "relu_inplace": functools.partial(nn.ReLU, inplace=True), "none": None}


def _mlp(sizes, act):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers.append(nn.Linear(a, b))
        if ACTIVATIONS[act] is not None:
            layers.append(ACTIVATIONS[act]())
    return nn.Sequential(*layers).eval()


def _conv_net(channels, kernel, size, act, batch_norm, residual):
    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList(
                nn.Conv2d(a, b, kernel, padding=kernel // 2)
                for a, b in zip(channels, channels[1:]))
            self.bns = nn.ModuleList(nn.BatchNorm2d(b) if batch_norm else nn.Identity()
                                     for b in channels[1:])
            self.act = ACTIVATIONS[act]() if ACTIVATIONS[act] else nn.Identity()
            self.head = nn.Linear(channels[-1] * size * size, 3)
            # decided here, not from tensor shapes in forward, so tracing sees no branch
            self.skip = [residual and a == b for a, b in zip(channels, channels[1:])]

        def forward(self, x):
            for conv, bn, skip in zip(self.convs, self.bns, self.skip):
                y = self.act(bn(conv(x)))
                x = y + x if skip else y
            return self.head(x.flatten(1))

    model = ConvNet().eval()
    models.randomize_bn(model, 0)
    return model


mlp_configs = st.fixed_dictionaries({
    "sizes": st.lists(st.integers(1, 24), min_size=2, max_size=5),
    "batch": st.integers(1, 6),
    "act": st.sampled_from(sorted(ACTIVATIONS)),
    "level": st.sampled_from(["aten", "module"]),
})

conv_configs = st.fixed_dictionaries({
    "channels": st.lists(st.integers(1, 6), min_size=2, max_size=4),
    "kernel": st.sampled_from([1, 3]),
    "size": st.integers(2, 6),
    "batch": st.integers(1, 3),
    "act": st.sampled_from(sorted(ACTIVATIONS)),
    "batch_norm": st.booleans(),
    "residual": st.booleans(),
    "level": st.sampled_from(["aten", "module"]),
})


def _build(cfg, kind):
    torch.manual_seed(0)
    if kind == "mlp":
        x = torch.randn(cfg["batch"], cfg["sizes"][0])
        return _mlp(cfg["sizes"], cfg["act"]), x
    model = _conv_net(cfg["channels"], cfg["kernel"], cfg["size"], cfg["act"],
                      cfg["batch_norm"], cfg["residual"])
    size = cfg["size"]
    return model, torch.randn(cfg["batch"], cfg["channels"][0], size, size)


@settings(max_examples=50, deadline=None)
@given(cfg=mlp_configs)
def test_run_equals_eager_on_mlps(cfg):
    model, x = _build(cfg, "mlp")
    report = graphopt.run(graphopt.capture(model, x, level=cfg["level"]), x)
    torch.testing.assert_close(report.outputs, model(x))


@settings(max_examples=30, deadline=None)
@given(cfg=conv_configs)
def test_run_equals_eager_on_conv_nets(cfg):
    model, x = _build(cfg, "conv")
    report = graphopt.run(graphopt.capture(model, x, level=cfg["level"]), x)
    torch.testing.assert_close(report.outputs, model(x))


def _expected_bytes(gm, node):
    """What a node moves, from capture's shapes alone: inputs once each, plus output."""
    if op_name(node) in ("flatten", "Identity"):
        return 0, 0  # a view of a contiguous tensor, or the input itself: nothing moves
    read = sum(graphopt.nbytes(a) for a in dict.fromkeys(node.all_input_nodes))
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        read += sum(t.numel() * t.element_size() for name, t in
                    [*module.named_parameters(), *module.named_buffers()]
                    if not name.endswith("num_batches_tracked"))
    return read, graphopt.nbytes(node)


@settings(max_examples=30, deadline=None)
@given(cfg=st.one_of(mlp_configs.map(lambda c: (c, "mlp")),
                     conv_configs.map(lambda c: (c, "conv"))))
def test_bytes_per_node_are_the_sizes_of_its_inputs_and_outputs(cfg):
    model, x = _build(*cfg)
    gm = graphopt.capture(model, x, level=cfg[0]["level"])
    report = graphopt.run(gm, x)
    nodes = {n.name: n for n in gm.graph.nodes}
    for row in report.nodes:
        expected = _expected_bytes(gm, nodes[row.name])
        assert (row.bytes_read, row.bytes_written) == expected
    assert report.bytes_written == sum(
        graphopt.nbytes(nodes[row.name]) for row in report.nodes if row.bytes_written)
    assert report.peak_bytes >= max(math.prod(x.shape) * 4, *(
        row.bytes_written for row in report.nodes))


def test_a_fused_node_counts_the_one_kernel_it_launched():
    # fuse_patterns only rewrites the graph: the fused node runs its reference ops
    # and the interpreter counts each. The backend binds Conv+BN+ReLU to one oneDNN
    # kernel and LayerNorm+Add to one numba launch, which torch's dispatcher never
    # sees: the module says so in graphopt_kernels
    from graphopt.backend import bind_backend, onednn
    from graphopt.passes import fuse_patterns

    block = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    fused = fuse_patterns(graphopt.capture(block, x)).module
    (row,) = graphopt.run(fused, x).nodes
    assert row.kernels == 2  # conv2d, then relu
    bound = bind_backend(fused).module
    (row,) = graphopt.run(bound, x).nodes
    assert row.kernels == (1 if onednn.available() else 2)
    assert row.bytes_written == 8 * 6 * 6 * 4

    class AddNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(16)

        def forward(self, a, b):
            return self.norm(a + b)

    a, b = torch.randn(4, 16), torch.randn(4, 16)
    fused = fuse_patterns(graphopt.capture(AddNorm(), a, b)).module
    (row,) = graphopt.run(fused, a, b).nodes
    assert row.kernels == 2  # add, then layer_norm
    (row,) = graphopt.run(bind_backend(fused).module, a, b).nodes
    assert row.kernels == 1
    assert (row.bytes_read, row.bytes_written) == (2 * 4 * 16 * 4 + 2 * 16 * 4, 4 * 16 * 4)


def test_opaque_onednn_tensors_are_counted_at_their_size():
    from graphopt.backend import onednn

    if not onednn.available():
        pytest.skip("no oneDNN")

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            w = torch.randn(4, 3, 3, 3)
            self.register_buffer("w", onednn.pack_conv_weight(w, [0, 0], [1, 1],
                                                              [1, 1], 1, (1, 3, 5, 5)))

        def forward(self, x):
            return torch.ops.mkldnn._convolution_pointwise(
                x, self.w, None, [0, 0], [1, 1], [1, 1], 1, "none", [], "")

    g = torch.fx.symbolic_trace(Packed())
    report = graphopt.run(g, torch.randn(1, 3, 5, 5))
    conv = next(r for r in report.nodes if "convolution" in r.op)
    assert conv.kernels == 1 and conv.bytes_read == (3 * 25 + 4 * 27) * 4
    assert report.param_bytes == 4 * 27 * 4
