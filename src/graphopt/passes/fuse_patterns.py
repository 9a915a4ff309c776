"""Pattern fusion (模式融合): known op sequences become one fused module (chapter 4).

Note
----
The rules are data: `PATTERNS` (in `patterns.py`) is a table, one row per pattern,
each with a matcher anchored at the pattern's LAST node that checks the legality
guards by name and returns a `Match`: the nodes to remove, the fused module, and
its inputs. One rewrite, here, serves every row:

    conv ─► bn ─► relu      ──►   ConvReLU(x, W', b')      (call_module)

Rows are tried in order on each node, in graph order, so Conv+BN+ReLU wins over
Conv+ReLU. Weights stay parameters of the model and are passed in as `get_attr`
inputs, except folded Conv+BN weights, which are new buffers.

This pass only rewrites the graph: each fused module (`fused_modules`) runs its
pattern's ops by reference, so the kernel count is unchanged until the backend
stage (`graphopt.backend`, chapter 7) binds one library kernel to each module and
prepacks its weight; that stage's notes say which kernel each module got and why.
"""

from __future__ import annotations

from torch.fx import GraphModule, Node

from .patterns import (
    PATTERNS,
    Match,
    Pattern,
    is_param,
    match_add_layer_norm,
    match_conv_add,
    match_conv_add_relu,
    match_conv_bn_relu,
    match_conv_relu,
    match_matmul_add_relu,
)
from .result import (
    PassResult,
    add_constant,
    copy_meta,
    drop_unused_weights,
    finish,
    free_name,
    set_value_meta,
    working_copy,
)

# The table and its matchers live in patterns.py; they are re-exported so that
# `from graphopt.passes.fuse_patterns import PATTERNS` keeps working.
__all__ = ["Match", "PATTERNS", "Pattern", "fuse_patterns", "match_add_layer_norm",
           "match_conv_add", "match_conv_add_relu", "match_conv_bn_relu",
           "match_conv_relu", "match_matmul_add_relu", "rewrite", "rewrite_matches"]


def fuse_patterns(gm: GraphModule, inplace: bool = False,
                  table=None) -> PassResult:
    """Replace every match of a row of `table` (default `PATTERNS`) by one fused
    module (chapter 4). A table without a row measures what that row is worth.

    The modules run their ops by reference until the backend stage binds kernels.
    """
    gm = working_copy(gm, inplace)
    return rewrite_matches(gm, PATTERNS if table is None else table)


def rewrite_matches(gm: GraphModule, table) -> PassResult:
    """Rewrite, in place, each node where a row of `table` matches (ch. 4).

    Nodes are visited in graph order and each tries the rows in order; a node
    already taken by an earlier match is skipped. Weights nothing reads any more
    are dropped.
    """
    removed, added, rewritten, weights, modules = [], [], [], [], []
    erased: set[Node] = set()
    for anchor in list(gm.graph.nodes):
        if anchor in erased:
            continue
        for pattern in table:
            match = pattern.match(gm, anchor)
            if match is None or erased.intersection(match.nodes):
                continue
            weights += [a for n in match.nodes for a in n.all_input_nodes
                        if a.op == "get_attr"]
            modules += [n.target for n in match.nodes if n.op == "call_module"]
            node, readers = rewrite(gm, match, pattern.name)
            erased.update(match.nodes)
            removed += match.nodes
            added.append(node)
            rewritten += readers
            break
    drop_unused_weights(gm, weights, modules)
    return finish(gm, removed, added, [r for r in rewritten if r not in erased])


def rewrite(gm: GraphModule, match: Match, name: str) -> tuple[Node, list[Node]]:
    """Put one call_module node to `match.module` in place of the matched nodes.

    Introduced in chapter 4.
    """
    anchor = match.nodes[-1]
    stem = name.lower().replace("+", "_")
    target = free_name(gm, "fused_" + stem + "_" + anchor.name)
    gm.add_submodule(target, match.module)
    with gm.graph.inserting_before(match.nodes[0]):
        args = [_input_node(gm, x, f"{match.nodes[0].name}_folded_{_ROLE[i]}")
                for i, x in enumerate(match.inputs)]
    with gm.graph.inserting_before(anchor):
        node = gm.graph.call_module(target, tuple(args))
    copy_meta(anchor, node)
    readers = list(anchor.users)
    anchor.replace_all_uses_with(node)
    for n in reversed(match.nodes):
        gm.graph.erase_node(n)
    return node, readers


_ROLE = ("input", "weight", "bias", "other", "extra")  # names for new folded tensors


def _input_node(gm: GraphModule, x, name: str):
    if x is None or isinstance(x, Node):
        return x
    if isinstance(x, str):  # an existing weight of the model
        node = gm.graph.get_attr(x)
        set_value_meta(node, gm.get_parameter(x) if is_param(gm, x)
                       else gm.get_buffer(x))
        return node
    node = gm.graph.get_attr(add_constant(gm, name, x))
    set_value_meta(node, x)
    return node

