"""Elementwise fusion (逐元素算子融合): one node for each chain or tree of elementwise ops.

Introduced in chapter 4; chapter 6 turns each fused group into one generated kernel.

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
"""

from __future__ import annotations

import heapq

import torch
from torch import nn
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import map_arg

from ..ops import OpKind, _aten_overload, dtype, is_impure, kind, op_name, shape
from .legality import creates_cycle
from .result import PassResult, copy_meta, finish, topo_index, working_copy


class FusedElementwise(nn.Module):
    """A fused group of elementwise ops, run by a reference executor (chapter 4).

    `.gm` is a GraphModule of the member ops (placeholders are the group's external
    tensor inputs, in order; scalars are constants in the graph), `.ops` the member op
    names in order. Until kernel code generation (chapter 6) hooks in, `forward` runs
    the member ops one after another with `self.gm`: correct, but not faster than the
    unfused graph. The interpreter counts the node as ONE kernel
    (`graphopt_kernels = 1`), which is what the generated kernel launches.
    """

    graphopt_kind = OpKind.ELEMENTWISE
    graphopt_kernels = 1

    def __init__(self, graph: Graph, ops: list[str]):
        super().__init__()
        self.graph = graph
        self.ops = list(ops)

    @property
    def gm(self) -> GraphModule:
        # Built on first use: generating Python code for thousands of groups in a
        # large graph would dominate the pass's run time.
        if "group" not in self._modules:
            self.group = GraphModule(nn.Module(), self.graph, class_name="FusedGroup")
        return self._modules["group"]

    # Hooked in by chapter 6's codegen (graphopt.codegen.run_fused, codegen helper):
    # forward runs ONE generated kernel (numba on CPU, Triton on CUDA), compiled on
    # first call; "reference" (or tiny inputs, autograd, unsupported ops) runs self.gm.
    backend = "auto"

    def forward(self, *inputs):
        from ..codegen import run_fused  # lazy: numba and Triton load only when used
        return run_fused(self, inputs)

    def extra_repr(self) -> str:
        return " -> ".join(self.ops)


def fuse_elementwise(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Replace every maximal single-output elementwise group by one node (chapter 4)."""
    gm = working_copy(gm, inplace)
    index = topo_index(gm)
    removed, added, rewritten = [], [], []
    for members in find_groups(gm, index):
        assert not creates_cycle(members, index), "single-output groups are acyclic"
        node, readers = _replace(gm, sorted(members, key=index.__getitem__))
        removed += sorted(members, key=index.__getitem__)
        added.append(node)
        rewritten += readers
    gone = set(removed)
    return finish(gm, [n.name for n in removed], added, [r for r in rewritten if r not in gone])


def fusible(n: Node) -> bool:
    """A pure elementwise op on tensors that a kernel generator can translate."""
    if n.op not in ("call_function", "call_method") or not _pure_pointwise(n):
        return False
    return shape(n) is not None and all(shape(a) is not None for a in n.all_input_nodes)


_POINTWISE: dict = {}


def _pure_pointwise(n: Node) -> bool:
    """Elementwise, tagged pointwise by torch, and pure: a property of the op alone."""
    key = (n.op, n.target)
    if key not in _POINTWISE:
        overload = _aten_overload(n)
        # batch_norm and dropout are ELEMENTWISE but not pointwise ops
        _POINTWISE[key] = (kind(n) is OpKind.ELEMENTWISE and not is_impure(n)
                           and overload is not None and torch.Tag.pointwise in overload.tags)
    return _POINTWISE[key]


def find_groups(gm: GraphModule, index: dict[Node, int]) -> list[set[Node]]:
    """Maximal groups of fusible nodes with one output each, in graph order."""
    assigned: set[Node] = set()
    groups = []
    for root in reversed(list(gm.graph.nodes)):
        if root in assigned or not fusible(root):
            continue
        members = _grow(root, index, assigned)
        if len(members) > 1:
            assigned |= members
            groups.append(members)
    return groups[::-1]


def _grow(root: Node, index: dict[Node, int], assigned: set[Node]) -> set[Node]:
    """Absorb inputs whose every user is already in the group, latest first."""
    members = {root}
    heap = [(-index[a], a.name, a) for a in root.all_input_nodes]
    heapq.heapify(heap)
    while heap:
        _, _, p = heapq.heappop(heap)
        if p in members or p in assigned or not fusible(p) or dtype(p) != dtype(root):
            continue
        if all(u in members for u in p.users):
            members.add(p)
            for a in p.all_input_nodes:
                heapq.heappush(heap, (-index[a], a.name, a))
    return members


def _replace(gm: GraphModule, members: list[Node]) -> tuple[Node, list[Node]]:
    """Swap a group for one call_module node; returns it and the nodes now reading it."""
    root = members[-1]
    inside = set(members)
    inputs: list[Node] = []
    for m in members:
        map_arg((m.args, m.kwargs),
                lambda a: inputs.append(a) if a not in inside and a not in inputs else None)
    graph = Graph()
    env = {a: graph.placeholder(a.name) for a in inputs}
    for a in inputs:
        copy_meta(a, env[a])
    for m in members:
        env[m] = graph.node_copy(m, env.__getitem__)
    graph.output(env[root])
    target = _free_name(gm, f"fused_{root.name}")
    gm.add_submodule(target, FusedElementwise(graph, [op_name(m) for m in members]))
    with gm.graph.inserting_before(root):
        node = gm.graph.call_module(target, tuple(inputs))
    copy_meta(root, node)
    readers = list(root.users)
    root.replace_all_uses_with(node)
    for m in reversed(members):
        gm.graph.erase_node(m)
    return node, readers


def _free_name(gm: GraphModule, base: str) -> str:
    name, i = base, 1
    while hasattr(gm, name):
        name, i = f"{base}_{i}", i + 1
    return name
