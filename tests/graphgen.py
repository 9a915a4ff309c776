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
import torch.nn.functional as F
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
    """A digest of every parameter and buffer (names, dtypes, values)."""
    h = hashlib.sha256()
    items = list(module.named_parameters(remove_duplicate=False))
    items += list(module.named_buffers(remove_duplicate=False))
    for name, t in sorted(items, key=lambda kv: kv[0]):
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        # bytes, whatever the dtype (numpy has no bfloat16)
        h.update(t.detach().cpu().contiguous().flatten().view(torch.uint8).numpy())
    return h.hexdigest()


# --- generated nn.Modules: what a user's forward does ---------------------------------
#
# A program is a list of steps over a pool of (4, 6) float values. The model's forward
# runs it in plain PyTorch, so capture (torch.export) meets the real thing: in-place
# ops on intermediates and on the input, writes through views that alias another
# value, fresh constants later written in place (`acc = zeros(); acc += x`), a buffer
# updated every call, parameter-only subexpressions, dropout and rand_like, and an
# embedding of integer ids. Train or eval mode is drawn too.

ROWS, COLS = 4, 6


class Program(nn.Module):
    """Runs a generated program (see `programs`): a real forward, not an fx graph."""

    def __init__(self, steps: list[tuple], with_ids: bool, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.steps = steps
        self.p = nn.Parameter(torch.randn(COLS, generator=g))
        self.w = nn.Parameter(torch.randn(COLS, COLS, generator=g) / COLS ** 0.5)
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("scale", torch.rand(ROWS, COLS, generator=g) + 0.5)
        self.emb = nn.Embedding(10, COLS) if with_ids else None
        if with_ids:
            with torch.no_grad():
                self.emb.weight.copy_(torch.randn(10, COLS, generator=g))

    def extra_repr(self) -> str:  # what a failing example prints
        return f"steps={self.steps!r}, training={self.training}"

    def forward(self, x, ids=None):
        pool = [x] if ids is None else [x, self.emb(ids)]
        for kind, *args in self.steps:
            out = STEPS[kind](self, pool, *args)
            if out is not None:
                pool.append(out)
        return (pool[-1], pool[-3]) if len(pool) > 3 else pool[-1]


# Each step reads values by index (modulo the pool's size) and returns a new value, or
# None when it wrote an existing one in place.

def _unary(m, pool, i, op):
    return getattr(torch, op)(pool[i % len(pool)])


def _binary(m, pool, i, j, op):
    return getattr(torch, op)(pool[i % len(pool)], pool[j % len(pool)])


def _with_param(m, pool, i, op):  # broadcast a (6,) parameter
    return getattr(torch, op)(pool[i % len(pool)], m.p)


def _scalar(m, pool, i, c):
    return pool[i % len(pool)] * c + 1.0


def _inplace(m, pool, i, j, op):
    a, b = pool[i % len(pool)], pool[j % len(pool)]
    if op in ("relu_", "sigmoid_"):
        getattr(a, op)()
    elif op == "clamp_":
        a.clamp_(-1.0, 1.0)
    else:  # add_, mul_
        getattr(a, op)(b)


def _view(m, pool, i, how):  # a second name for the same memory
    a = pool[i % len(pool)]
    return a.view(ROWS, COLS) if how == 0 else a[:]


def _write_through_view(m, pool, i, how):
    """Write into a value through a view of it: every alias must see the change."""
    a = pool[i % len(pool)]
    if how == 0:
        a.t()[0].mul_(-2.0)        # a column, through a transpose
    elif how == 1:
        a.view(-1)[::5].add_(1.0)  # a strided slice of the flat view
    else:
        a[1:3].zero_()             # two rows


def _dropout(m, pool, i, inplace):
    return F.dropout(pool[i % len(pool)], 0.4, m.training, inplace=inplace)


def _rand(m, pool, i):
    return pool[i % len(pool)] + torch.rand_like(pool[i % len(pool)])


def _const(m, pool, how):  # a constant subgraph, maybe written in place later
    if how == 0:
        return torch.zeros(ROWS, COLS)
    if how == 1:
        return torch.ones(ROWS, COLS) * 0.5
    return torch.arange(24.0).view(ROWS, COLS) / 24


def _param_expr(m, pool):  # parameters and buffers only: foldable in eval mode only
    return (m.p.sigmoid() * 2).expand(ROWS, COLS) + m.scale


def _matmul(m, pool, i):
    return pool[i % len(pool)] @ m.w


def _counter(m, pool, i):  # a buffer updated on every call
    m.count.add_(1)
    return pool[i % len(pool)] * m.count


def _norm(m, pool, i):  # a reduction, broadcast back
    a = pool[i % len(pool)]
    return a - a.mean(-1, keepdim=True)


_PURE = ("unary", "binary", "param", "scalar", "rand", "matmul")


def _dup(m, pool, k):
    """Run an earlier step again: a common subexpression (a random one stays two)."""
    earlier = [s for s in m.steps if s[0] in _PURE]
    if earlier:
        kind, *args = earlier[k % len(earlier)]
        return STEPS[kind](m, pool, *args)


STEPS = {"unary": _unary, "binary": _binary, "param": _with_param, "scalar": _scalar,
         "inplace": _inplace, "view": _view, "view_inplace": _write_through_view,
         "dropout": _dropout, "rand": _rand, "const": _const, "param_expr": _param_expr,
         "matmul": _matmul, "counter": _counter, "norm": _norm, "dup": _dup}


@st.composite
def _step(draw):
    kind = draw(st.sampled_from(sorted(STEPS)))
    i, j = draw(st.integers(0, 30)), draw(st.integers(0, 30))
    one_of = lambda *xs: draw(st.sampled_from(xs))  # noqa: E731
    return {
        "unary": (kind, i, one_of("relu", "neg", "sigmoid", "tanh", "abs")),
        "binary": (kind, i, j, one_of("add", "mul", "sub")),
        "param": (kind, i, one_of("add", "mul", "sub")),
        "scalar": (kind, i, one_of(0.5, -1.5, 2.0)),
        "inplace": (kind, i, j, one_of("relu_", "mul_", "add_", "sigmoid_", "clamp_")),
        "view": (kind, i, one_of(0, 1)),
        "view_inplace": (kind, i, one_of(0, 1, 2)),
        "dropout": (kind, i, one_of(False, True)),
        "const": (kind, one_of(0, 1, 2)),
        "param_expr": (kind,),
    }.get(kind, (kind, i))


@st.composite
def programs(draw, max_steps: int = 10):
    """(model, inputs): a generated Program in train or eval mode, and its inputs."""
    seed = draw(st.integers(0, 2**16))
    steps = draw(st.lists(_step(), min_size=1, max_size=max_steps))
    model = Program(steps, draw(st.booleans()), seed).train(draw(st.booleans()))
    return model, program_inputs(model, seed)


def program_inputs(model: Program, seed: int) -> tuple[torch.Tensor, ...]:
    """Inputs for `model`: a float (4, 6) and, if it embeds, valid integer ids."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, COLS, generator=g)
    if model.emb is None:
        return (x,)
    return x, torch.randint(0, 10, (ROWS,), generator=g)


class Counter(nn.Module):
    """A buffer updated on every call, as BatchNorm's num_batches_tracked is (#11)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count.add_(1)
        return x * self.count
