"""Grouping: which elementwise nodes fuse into one group (chapter 4).

The half of `fuse_elementwise` that decides, without rewriting anything: `fusible`
says whether a node may join a group, `find_groups` grows one group per root,
backwards, so each group has one output. The rules and the profitability rule are
explained in `fuse_elementwise`'s note; the rewrite stays there.
"""

from __future__ import annotations

import heapq
import math

import torch
from torch.fx import GraphModule, Node

from ..ops import OpKind, _aten_overload, dtype, is_impure, kind, shape
from .row_reductions import describe


def fusible(n: Node, rows: bool = True) -> bool:
    """A pure elementwise op on tensors, or (rows=True) a row reduction, that a
    kernel generator can translate (ch. 4)."""
    if rows and n.op in ("call_function", "call_method", "call_module") and \
            is_row_reduction(n):
        return _shapes_known(n)
    if n.op not in ("call_function", "call_method") or not _pure_pointwise(n):
        return False
    return _shapes_known(n)


def _shapes_known(n: Node) -> bool:
    return shape(n) is not None and all(shape(a) is not None for a in n.all_input_nodes)


def is_row_reduction(n: Node) -> bool:
    """A pure row reduction the generated kernels can fuse: softmax, norms (ch. 6)."""
    return not is_impure(n) and describe(n) is not None


def _rows_legal(members: set[Node], root: Node) -> bool:
    """Rule 1 of the row template: full-row reductions, output full or per row."""
    reds = [m for m in members if is_row_reduction(m)]
    if not reds:
        return True
    try:
        full = tuple(torch.broadcast_shapes(*[shape(m) for m in members]))
    except RuntimeError:
        return False
    per_row = full[:-1] + (1,)
    return bool(full) and full[-1] > 1 and \
        all(tuple(shape(r.args[0])) == full for r in reds) and \
        tuple(shape(root)) in (full, per_row)


_POINTWISE: dict = {}


def _pure_pointwise(n: Node) -> bool:
    """Elementwise, tagged pointwise by torch, and pure: a property of the op alone."""
    key = (n.op, n.target)
    if key not in _POINTWISE:
        overload = _aten_overload(n)
        # batch_norm and dropout are ELEMENTWISE but not pointwise ops
        _POINTWISE[key] = (kind(n) is OpKind.ELEMENTWISE and not is_impure(n)
                           and overload is not None
                           and torch.Tag.pointwise in overload.tags)
    return _POINTWISE[key]


def find_groups(gm: GraphModule, index: dict[Node, int]) -> list[set[Node]]:
    """Maximal groups of fusible nodes with one output each, in graph order (ch. 4)."""
    assigned: set[Node] = set()
    groups = []
    for root in reversed(list(gm.graph.nodes)):
        if root in assigned or not fusible(root):
            continue
        members = _grow(root, index, assigned, rows=True)
        if not (_rows_legal(members, root) and any(map(is_row_reduction, members))):
            # no legal row group: an elementwise one, without small producers
            members = _grow(root, index, assigned, rows=False, full_only=True)
        if len(members) > 1:
            assigned |= members
            groups.append(members)
    return groups[::-1]


def _grow(root: Node, index: dict[Node, int], assigned: set[Node],
          rows: bool, full_only: bool = False) -> set[Node]:
    """Absorb inputs whose every user is already in the group, latest first;
    `full_only`: only inputs as large as the root (see Profitability in
    fuse_elementwise's note)."""
    if not fusible(root, rows):
        return {root}
    members, full = {root}, _numel(root)
    heap = [(-index[a], a.name, a) for a in root.all_input_nodes]
    heapq.heapify(heap)
    while heap:
        _, _, p = heapq.heappop(heap)
        if p in members or p in assigned or not fusible(p, rows) or \
                dtype(p) != dtype(root) or (full_only and _numel(p) < full):
            continue
        if all(u in members for u in p.users):
            members.add(p)
            for a in p.all_input_nodes:
                heapq.heappush(heap, (-index[a], a.name, a))
    return members


def _numel(n: Node) -> int:
    return math.prod(shape(n))
