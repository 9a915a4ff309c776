"""Pattern fusion (模式融合): known op sequences become one fused module (chapter 4).

Note
----
The rules are data: `PATTERNS` (in `patterns.py`) is a table, one row per pattern,
each with a matcher anchored at the pattern's LAST node that checks the legality
guards by name and returns a `Match`: the nodes to remove, the fused module, and
its inputs. One rewrite, here, serves every row:

    conv ─► bn ─► relu      ──►   ConvReLU(x, W', b')      (call_module)

Rows are tried in order on each node, in graph order, so Conv+BN+ReLU wins over
Conv+ReLU; then `SINGLE_OPS` takes the lone convs and linears. Weights stay
parameters of the model and are passed in as `get_attr` inputs, except folded
Conv+BN weights, which are new buffers.

Each fused module runs one library kernel (`fused_modules`). After the rewrite the
pass prepacks every constant conv and linear weight into oneDNN's blocked layout,
once: constant folding of a layout change the kernel would otherwise redo per call.
Where a kernel cannot run (not float32, no oneDNN) the module keeps the eager ops and
`PassResult.notes` says so; where the kernel policy (`graphopt.policy`) picks other
than the one fused kernel (eager conv2d on a 1x1 map, MKL's GEMM then the
activation), the note says which rule decided.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ..codegen import onednn
from ..ops import dtype, shape
from ..policy import resolve
from .fused_modules import AddLayerNorm, MatMulAddReLU
from .matching import value
from .patterns import (
    PATTERNS,
    SINGLE_OPS,
    Match,
    Pattern,
    is_param,
    match_add_layer_norm,
    match_conv,
    match_conv_add_relu,
    match_conv_bn_relu,
    match_conv_relu,
    match_linear,
    match_matmul_add_relu,
)
from .result import (
    PassResult,
    add_constant,
    copy_meta,
    drop_unused_weights,
    finish,
    set_value_meta,
    working_copy,
)

# The table and its matchers live in patterns.py; they are re-exported so that
# `from graphopt.passes.fuse_patterns import PATTERNS` (or SINGLE_OPS) keeps working.
__all__ = ["Match", "PATTERNS", "Pattern", "SINGLE_OPS", "fuse_patterns",
           "match_add_layer_norm", "match_conv", "match_conv_add_relu",
           "match_conv_bn_relu", "match_conv_relu", "match_linear",
           "match_matmul_add_relu", "prepare_kernel", "rewrite"]


def fuse_patterns(gm: GraphModule, inplace: bool = False,
                  policy=None) -> PassResult:
    """Replace every match of a row of `PATTERNS` by one fused module (chapter 4).

    `policy` (`graphopt.policy`; default: the one in force, fixed rules on shapes)
    picks each module's kernel; every choice other than the one fused library
    kernel is a line of `notes`.
    """
    gm = working_copy(gm, inplace)
    policy = resolve(policy)
    removed, added, rewritten, weights, modules = [], [], [], [], []
    notes: list[str] = []
    erased: set[Node] = set()
    for table in (PATTERNS, SINGLE_OPS):
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
                notes += prepare_kernel(gm, node, pattern.name, policy)
                erased.update(match.nodes)
                removed += match.nodes
                added.append(node)
                rewritten += readers
                break
    drop_unused_weights(gm, weights, modules)
    res = finish(gm, removed, added, [r for r in rewritten if r not in erased])
    if hasattr(res, "notes"):
        res.notes.extend(notes)
    return res


def prepare_kernel(gm: GraphModule, node: Node, name: str,
                   policy=None) -> list[str]:
    """Pick the fused node's kernel for its recorded dtype and prepack its weight.

    Returns the notes: one line per node that keeps the eager ops, and why (ch. 4).
    """
    module = gm.get_submodule(str(node.target))
    x, w = node.args[0], node.args[1]
    if isinstance(module, MatMulAddReLU):
        return [f"fuse_patterns: {node.name} ({name}) runs addmm then relu, 2 kernels: "
                "no CPU library fuses an activation into a product of two activations"]
    kind = "numba" if isinstance(module, AddLayerNorm) else "onednn"
    dtypes = {dtype(a) for a in node.args if isinstance(a, Node) and dtype(a)}
    problem = None if dtypes <= {torch.float32} else \
        f"dtype {', '.join(sorted(str(d) for d in dtypes))}, " \
        f"the {kind} kernel takes float32"
    if kind == "onednn" and not onednn.available():
        problem = "this torch build has no oneDNN"
    if problem is not None:
        module.kernel = "eager"
        return [f"fuse_patterns: {node.name} ({name}) runs the eager ops: {problem}"]
    tensor = value(gm, w) if isinstance(w, Node) and w.op == "get_attr" else None
    if hasattr(module, "prepack") and isinstance(tensor, torch.Tensor) and shape(x):
        module.prepack(tensor, shape(x), resolve(policy))
    return _choice_note(module, node, name)


def _choice_note(module, node: Node, name: str) -> list[str]:
    """A note where prepacking chose other than the one fused library kernel: eager
    conv2d on a 1x1 map, MKL's GEMM (then the activation), or oneDNN where MKL could
    have run it (measured faster, or MKL could not pack)."""
    act = getattr(getattr(module, "act", None), "attr", "none")
    if module.kernel == "eager" and getattr(module, "why_eager", ""):
        return [f"fuse_patterns: {node.name} ({name}) runs eager: {module.why_eager}"]
    if module.kernel == "mkl":
        count = "2 kernels" if act != "none" else "1 kernel"
        return [f"fuse_patterns: {node.name} ({name}) runs {count}: {module.why}"]
    if getattr(module, "why", "") and module.kernel == "onednn":  # measured: oneDNN
        return [f"fuse_patterns: {node.name} ({name}) runs oneDNN: {module.why}"]
    return []


def rewrite(gm: GraphModule, match: Match, name: str) -> tuple[Node, list[Node]]:
    """Put one call_module node to `match.module` in place of the matched nodes.

    Introduced in chapter 4.
    """
    anchor = match.nodes[-1]
    stem = name.lower().replace("+", "_")
    target = _free_name(gm, "fused_" + stem + "_" + anchor.name)
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


def _free_name(gm: GraphModule, base: str) -> str:
    name, i = base, 1
    while hasattr(gm, name):
        name, i = f"{base}_{i}", i + 1
    return name
