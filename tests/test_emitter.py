"""The one emitter for straight-line code and its two users (eager_ops, the wrapper).

Both write a graph as one function, a statement per node, each value freed right
after its last use (as fx's code does); they differ only in what they name and keep:
`eager_ops` names values v0, v1, ... and keeps the inputs its caller still holds, the
wrapper keeps fx's names and frees its inputs too.
"""

from __future__ import annotations

import torch
from torch import fx, nn

from graphopt.backend.straight_line import CallEmitter
from graphopt.eager_ops import EagerOps, eager_ops
from graphopt.emitter import Emitter, last_uses

aten = torch.ops.aten


def _graph() -> fx.GraphModule:
    """x * y + x; a value nothing reads (neg); relu of the sum."""
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")

    def op(target, *args):
        return g.create_node("call_function", target, args, name=target.__name__
                             .split(".")[0])

    total = op(aten.add.Tensor, op(aten.mul.Tensor, x, y), x)
    op(aten.neg.default, total)
    g.output(op(aten.relu.default, total))
    return fx.GraphModule(nn.Module(), g)


def test_last_uses_are_the_reads_fx_frees_after():
    gm = _graph()
    last = {n.name: sorted(v.name for v in vs) for n, vs in last_uses(gm.graph).items()}
    assert last == {"mul": ["y"], "add": ["mul", "x"], "relu": ["add"],
                    "output": ["relu"]}


def test_both_users_free_each_value_after_its_last_use():
    gm = _graph()
    assert issubclass(EagerOps, Emitter) and issubclass(CallEmitter, Emitter)
    run = eager_ops(gm)
    assert run.source == (
        "def run(inputs):\n"
        "    v0, v1, = inputs\n"
        "    v2 = mul_Tensor(v0, v1)\n"
        "    v3 = add_Tensor(v2, v0)\n"
        "    del v2\n"               # the inputs stay: the caller holds them
        "    v4 = neg(v3)\n"
        "    del v4\n"               # read by nothing
        "    v5 = relu(v3)\n"
        "    del v3\n"
        "    return v5\n")
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    emit = CallEmitter(gm)
    source = emit.function(places)
    assert source == (
        "def call(x, y):\n"
        "    mul = torch_mul(x, y)\n"  # torch's binding: the same overload
        "    del y\n"                # the wrapper frees its inputs too
        "    add = torch_add(mul, x)\n"
        "    del mul, x\n"
        "    neg = aten_neg(add)\n"   # no binding listed: the overload's entry
        "    del neg\n"
        "    relu = torch_relu(add)\n"
        "    del add\n"
        "    return relu\n")
    call = emit.compile(source, "<test>", "call")
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(run((x, y)), gm(x, y), rtol=0, atol=0)
    torch.testing.assert_close(call(x, y), gm(x, y), rtol=0, atol=0)


def test_a_long_call_is_wrapped_under_88_characters():
    g = fx.Graph()
    xs = [g.placeholder(f"an_input_with_a_rather_long_name_{i}") for i in range(3)]
    g.output(g.create_node("call_function", aten.cat.default, (list(xs),), name="cat"))
    gm = fx.GraphModule(nn.Module(), g)
    head, *body = CallEmitter(gm).function(xs).splitlines()
    assert head.startswith("def call(an_input_with_a_rather_long_name_0, ")
    assert body[0] == "    cat = aten_cat("  # the call, wrapped: its lines fit
    assert max(len(line) for line in body[:3]) <= 88 and body[2].endswith("])")
    assert body[1].startswith("        [an_input_with_a_rather_long_name_0,")
    assert eager_ops(gm) is None  # a list of values: fx binds it, not eager_ops
