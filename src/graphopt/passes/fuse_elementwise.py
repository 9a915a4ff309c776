"""Elementwise fusion (逐元素算子融合): one node per chain or tree of elementwise ops.

Introduced in chapter 4. The pass rewrites the graph only: each group becomes one
node that runs its ops by reference; the `lower` stage (chapter 6) turns each group
into one generated kernel.

Note
----
Elementwise ops (add, mul, relu, ...) read and write every element once, so a chain
of them is limited by memory traffic: fusing them means each element is loaded once,
pushed through all the ops, and stored once.

    x ─► mul ─► add ─► relu ─► out          x ─► [mul ─► add ─► relu] ─► out
    b ────────┘                             b ──┘   one FusedElementwise node

Groups are grown backwards from a root, visiting candidates in reverse topological
order: an elementwise input joins when *all* its users are already in the group. So a
group has exactly one output (its root), and a value also read outside the group
(a multi-consumer node) ends the group there: it stays a node of its own, because the
outside reader needs it in memory anyway. The legality rule behind this is
`creates_cycle`: a path that leaves the group and comes back would make the fused
node depend on itself; single-output groups never have one, and the pass checks it.
Singletons are left alone (nothing to fuse). Scalar operands are baked into the
group's graph as constants; tensor operands of smaller (broadcast) shape are inputs.

Profitability (收益): fusion pays by keeping a full-size intermediate out of
memory. An elementwise producer *smaller* than the group's output (a broadcast side:
`hardsigmoid` of a squeeze-and-excitation gate of shape [1, C, 1, 1] that then
scales a [1, C, H, W] map) saves only its own few values, and inside the kernel it
would be recomputed for every output element; so outside row-reduction groups such
a producer stays a node of its own and its output becomes an input of the group.
In row groups the per-row values (mean, variance + eps, rsqrt) are the point of the
kernel and stay in.

Row reductions (chapter 6) join groups too: sum / mean / amax / amin over the last
dim with keepdim=True, softmax and log_softmax over the last dim, layer norm and
RMSNorm over the last dim (`row_reductions.describe`). A group holding one
is legal when (`grouping._rows_legal`): every reduction reduces the innermost dim
of a value with the group's full row shape [..., D], and the group's output is that
full shape or one value per row [..., 1]; with the single-output rule above, the
producers are elementwise, consumers broadcast the reduced value back over the row,
and no intermediate is read outside the group. Softmax, layer norm, RMSNorm and
GELU-then-norm then run as ONE generated kernel. Otherwise the group is grown again
without its reductions. The grouping itself is in `grouping.py`.
"""

from __future__ import annotations

import copy

from torch import Tensor, nn
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import map_arg

from ..eager_ops import eager_ops
from ..i18n import note
from ..ops import OpKind, op_name
from ..torch_internals import child_table
from .grouping import find_groups, is_row_reduction
from .legality import creates_cycle, moves_past_a_write
from .result import PassResult, copy_meta, finish, free_name, topo_index, working_copy


class FusedElementwise(nn.Module):
    """A fused group of elementwise ops, run by its reference executor (chapter 4).

    `.gm` is a GraphModule of the member ops (placeholders are the group's external
    tensor inputs, in order; scalars are constants in the graph), `.ops` the member op
    names in order. `forward` runs the member ops one after another (`eager_ops`:
    the group's graph written as one Python function, or fx's forward of `self.gm`):
    correct, and counted honestly (the interpreter sees every member's kernel and the
    intermediates they pass), no slower than the unfused graph but not faster. The
    `lower` stage (`codegen.lower`, chapter 6) replaces each group by a
    `GeneratedKernel` that runs it as ONE generated kernel.
    """

    graphopt_kind = OpKind.ELEMENTWISE

    def __init__(self, graph: Graph, ops: list[str], parts: dict | None = None):
        super().__init__()
        self.graph = graph
        self.ops = list(ops)
        self.parts = nn.Module()  # member modules (nn.LayerNorm), weights included
        for name, module in (parts or {}).items():
            self.parts.add_module(name, module)

    @property
    def gm(self) -> GraphModule:
        # Built on first use: generating Python code for thousands of groups in a
        # large graph would dominate the pass's run time.
        if "group" not in child_table(self):
            self.group = GraphModule(self.parts, self.graph, class_name="FusedGroup")
        return child_table(self)["group"]

    def forward(self, *inputs):
        run = self.__dict__.get("_eager_ops", _UNSET)
        if run is _UNSET:  # written on the first call (see `eager_ops`)
            run = self.__dict__["_eager_ops"] = eager_ops(self.gm)
        if run is not None and type(inputs[0]) is Tensor:
            return run(inputs)
        return self.gm.forward(*inputs)  # fx's code: also for tracers' proxies

    def extra_repr(self) -> str:
        return " -> ".join(self.ops)


_UNSET = object()


def fuse_elementwise(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Replace every maximal single-output elementwise group by one node (chapter 4).

    Each node runs its members by reference until `lower` makes it one kernel.
    """
    gm = working_copy(gm, inplace)
    index = topo_index(gm)
    removed, added, rewritten, notes = [], [], [], []
    for members in find_groups(gm, index):
        assert not creates_cycle(members, index), "single-output groups are acyclic"
        if why := moves_past_a_write(members, index):
            names = ", ".join(m.name for m in sorted(members, key=index.__getitem__))
            notes.append(note("fuse_elementwise: kept {nodes} apart ({reason})",
                              nodes=names, reason=why))
            continue
        node, readers = _replace(gm, sorted(members, key=index.__getitem__))
        removed += sorted(members, key=index.__getitem__)
        added.append(node)
        rewritten += readers
    gone = set(removed)
    res = finish(gm, [n.name for n in removed], added,
                 [r for r in rewritten if r not in gone])
    res.notes.extend(notes)
    return res


def _replace(gm: GraphModule, members: list[Node]) -> tuple[Node, list[Node]]:
    """Swap a group for one call_module node; returns it and its new readers."""
    root = members[-1]
    inside = set(members)
    inputs: list[Node] = []
    for m in members:
        map_arg((m.args, m.kwargs),
                lambda a: inputs.append(a)
                if a not in inside and a not in inputs else None)
    graph = Graph()
    env = {a: graph.placeholder(a.name) for a in inputs}
    for a in inputs:
        copy_meta(a, env[a])
    parts = {}
    for m in members:
        env[m] = graph.node_copy(m, env.__getitem__)
        if m.op == "call_module":  # a LayerNorm module: the group keeps its own copy
            name = str(m.target).replace(".", "_")
            parts[name] = copy.deepcopy(gm.get_submodule(str(m.target)))
            env[m].target = name
    graph.output(env[root])
    target = free_name(gm, f"fused_{root.name}")
    fused = FusedElementwise(graph, [op_name(m) for m in members], parts)
    if any(is_row_reduction(m) for m in members):
        fused.graphopt_kind = OpKind.REDUCTION
    gm.add_submodule(target, fused)
    with gm.graph.inserting_before(root):
        node = gm.graph.call_module(target, tuple(inputs))
    copy_meta(root, node)
    readers = list(root.users)
    root.replace_all_uses_with(node)
    for m in reversed(members):
        gm.graph.erase_node(m)
    return node, readers

