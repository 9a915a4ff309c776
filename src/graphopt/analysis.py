"""Whole-graph counts: FLOPs and ops summed over a captured graph.

Introduced in chapter 3, where they check the claim that constant folding saves "about
5% of ResNet-50's compute". `graphopt.flops(node)` counts one node; these functions add
them up so that a before/after comparison is one call per graph.
"""

from __future__ import annotations

from collections import Counter

from torch.fx import GraphModule

from .ops import flops, op_name

# Nodes that are not operators: inputs, weights, the result, export's shape guard.
_NOT_OPS = ("placeholder", "get_attr", "output")


def _ops(gm: GraphModule):
    for n in gm.graph.nodes:
        if n.op in _NOT_OPS:
            continue
        if n.op == "call_module" and str(n.target).startswith("_guards"):
            continue
        yield n


def total_flops(gm: GraphModule) -> int:
    """FLOPs of one run of `gm`: `graphopt.flops` summed over every op node (ch. 3)."""
    return sum(flops(n) for n in _ops(gm))


def flops_by_op(gm: GraphModule) -> dict[str, int]:
    """FLOPs per op name ('conv2d', 'batch_norm', ...), largest first, ties by name.

    Introduced in chapter 3.
    """
    counts: Counter[str] = Counter()
    for n in _ops(gm):
        counts[op_name(n)] += flops(n)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def op_counts(gm: GraphModule) -> dict[str, int]:
    """How many op nodes of each name the graph holds, most frequent first (ch. 3)."""
    counts = Counter(op_name(n) for n in _ops(gm))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def count_ops(gm: GraphModule) -> int:
    """Op nodes in `gm` (inputs, weights, the output and export's guard excluded).

    Introduced in chapter 3.
    """
    return sum(1 for _ in _ops(gm))
