"""Hypothesis strategies that generate aten-level fx graphs for the pass tests.

A generated graph is a random DAG over small tensors: inputs (2×3), constant buffers
(2×3, 3 or 2×1: broadcast operands), unary, binary and scalar elementwise ops, a
keepdim reduction, a matmul with a constant weight, random ops (`rand_like`),
subgraphs of constants only, exact duplicates of earlier nodes (shared
subexpressions), outputs chosen among the nodes (the rest are dead branches), and
nodes read by several others (multi-consumer). Built with the fx Graph API directly.
"""

from __future__ import annotations

import hashlib

import torch
from hypothesis import strategies as st
from torch import fx, nn

import graphopt

aten = torch.ops.aten
UNARY = [aten.relu.default, aten.neg.default, aten.abs.default, aten.sigmoid.default,
         aten.tanh.default]
BINARY = [aten.add.Tensor, aten.mul.Tensor, aten.sub.Tensor, aten.maximum.default]
SCALAR = [(aten.add.Tensor, 2.0), (aten.mul.Tensor, 0.5), (aten.sub.Tensor, 1),
          (aten.mul.Tensor, -1.5)]
SHAPES = [(2, 3), (3,), (2, 1)]
KINDS = ["unary", "binary", "scalar", "reduce", "mm", "random", "dup", "const"]


@st.composite
def fx_graphs(draw, max_ops: int = 14):
    """(GraphModule, example_inputs): a random aten-level DAG with shapes annotated."""
    seed = draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    root, graph = nn.Module(), fx.Graph()
    values: list[tuple[fx.Node, tuple]] = []
    constants: list[tuple[fx.Node, tuple]] = []
    inputs = []
    for i in range(draw(st.integers(1, 3))):
        values.append((graph.placeholder(f"x{i}"), (2, 3)))
        inputs.append(torch.randn(2, 3, generator=gen))
    for i in range(draw(st.integers(0, 3))):
        shape = draw(st.sampled_from(SHAPES))
        root.register_buffer(f"c{i}", torch.randn(shape, generator=gen))
        constants.append((graph.get_attr(f"c{i}"), shape))
    root.register_buffer("w", torch.randn(3, 3, generator=gen))
    pool = values + constants
    for _ in range(draw(st.integers(1, max_ops))):
        made = _one_op(draw, graph, pool, constants)
        if made is not None:
            pool.append(made)
            if made[0].all_input_nodes and all(
                    a.op == "get_attr" or a in {c for c, _ in constants}
                    for a in made[0].all_input_nodes):
                constants.append(made)
    ops = [v for v in pool if v[0].op == "call_function"] or pool[:1]
    outs = [ops[-1][0]] + [n for n, _ in ops[:-1] if draw(st.booleans()) and
                           draw(st.booleans())]
    graph.output(tuple(dict.fromkeys(outs)))
    gm = fx.GraphModule(root, graph)
    torch.manual_seed(0)
    graphopt.annotate(gm, *inputs)
    return gm, tuple(inputs)


def _one_op(draw, graph, pool, constants):
    kind = draw(st.sampled_from(KINDS))
    pick = lambda src: src[draw(st.integers(0, len(src) - 1))]  # noqa: E731
    if kind == "unary":
        (a, s), op = pick(pool), draw(st.sampled_from(UNARY))
        return graph.call_function(op, (a,)), s
    if kind == "binary" or (kind == "const" and len(constants) >= 1):
        src = constants if kind == "const" else pool
        (a, sa), (b, sb) = pick(src), pick(pool if kind == "binary" else src)
        op = draw(st.sampled_from(BINARY))
        return graph.call_function(op, (a, b)), tuple(torch.broadcast_shapes(sa, sb))
    if kind == "scalar":
        (a, s), (op, c) = pick(pool), draw(st.sampled_from(SCALAR))
        return graph.call_function(op, (a, c)), s
    if kind == "reduce":
        a, s = pick(pool)
        if s != (2, 3):
            return None
        return graph.call_function(aten.sum.dim_IntList, (a, [-1], True)), (2, 1)
    if kind == "mm":
        a, s = pick(pool)
        if s != (2, 3):
            return None
        w = graph.get_attr("w")
        return graph.call_function(aten.mm.default, (a, w)), (2, 3)
    if kind == "random":
        a, s = pick(pool)
        return graph.call_function(aten.rand_like.default, (a,)), s
    if kind == "dup":
        calls = [v for v in pool if v[0].op == "call_function"]
        if not calls:
            return None
        n, s = pick(calls)
        return graph.call_function(n.target, n.args, dict(n.kwargs)), s
    return None


def run_seeded(module, inputs):
    """Run with a fixed random seed, so graphs holding rand_like compare exactly."""
    torch.manual_seed(1234)
    with torch.no_grad():
        return module(*inputs)


def state_hash(module: nn.Module) -> str:
    """A digest of every parameter and buffer (names, values), to prove nothing changed."""
    h = hashlib.sha256()
    items = list(module.named_parameters(remove_duplicate=False))
    items += list(module.named_buffers(remove_duplicate=False))
    for name, t in sorted(items, key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()
