"""Attention fusion (注意力融合): the attention chain becomes one SDPA call (chapter 4).

    q @ kᵀ ─► × scale ─► (+ mask) ─► softmax ─► (dropout, off) ─► @ v
        ──►  scaled_dot_product_attention(q, k, v, attn_mask, scale=scale)

This is the rewrite ONNX Runtime (its Attention fusion) and inductor (its
`fuse_attention` pattern) both make: the fused kernel computes each block of scores,
its softmax and its product with v without writing the L×S score matrix to memory
(on the CPU torch runs a flash-attention kernel).

Legality, checked on the recorded shapes before anything is rewritten:
- every intermediate has one reader and no side effects (`single_consumer`,
  `has_no_side_effects`);
- the scale is a Python number (a multiply, or a divide: scale = 1/d);
- the mask is added after scaling, is a floating tensor of the scores' dtype, and
  broadcasts to the scores' shape, with at least 2 dimensions (`mask_broadcasts`);
- softmax is over the last dimension, with no dtype change;
- dropout, if present, is off (p = 0 or eval);
- q, k, v have the same rank (≥ 3), equal leading dimensions and one float dtype.
A constant mask that is 0 on and below the diagonal and -inf (or below -1e30) above
it is a *causal* mask: the call gets `is_causal=True` and no mask tensor.
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx import GraphModule, Node

from ..i18n import note
from ..ops import _submodule, dtype, shape
from ..torch_internals import OpOverload
from .legality import has_no_side_effects, single_consumer
from .matching import _arg, value
from .result import (
    PassResult,
    copy_meta,
    drop_unused_weights,
    finish,
    working_copy,
)

_MATMUL = {torch.ops.aten.matmul.default, torch.matmul, operator.matmul}
_MUL = {torch.ops.aten.mul.Tensor, operator.mul, torch.mul}
_DIV = {torch.ops.aten.div.Tensor, operator.truediv, torch.div}
_ADD = {torch.ops.aten.add.Tensor, operator.add, torch.add}
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _is(n, targets) -> bool:
    return isinstance(n, Node) and n.op == "call_function" and n.target in targets


def _dropout_off(n: Node) -> Node | None:
    """The input of a dropout that does nothing (p = 0 or not training), else None."""
    if n.op == "call_module" and isinstance(_submodule(n), nn.Dropout):
        m = _submodule(n)
        return n.args[0] if (not m.training or m.p == 0) else None
    if n.op == "call_function" and n.target in (torch.ops.aten.dropout.default,
                                                F.dropout):
        p = _arg(n, 1, "p", 0.5)
        train = _arg(n, 2, "train" if n.target is not F.dropout else "training", True)
        return n.args[0] if (p == 0 or train is False) else None
    return None


def _softmax_input(n: Node) -> Node | None:
    """The input of a softmax over the last dimension with no dtype change."""
    if n.op == "call_module" and isinstance(_submodule(n), nn.Softmax):
        dim, x = _submodule(n).dim, n.args[0]
    elif n.op == "call_function" and n.target in (
            torch.ops.aten.softmax.int, torch.ops.aten._softmax.default,
            torch.softmax, F.softmax):
        x, dim = n.args[0], _arg(n, 1, "dim")
        if n.target is torch.ops.aten._softmax.default:
            out_dtype = torch.float32 if _arg(n, 2, "half_to_float") else None
        else:
            out_dtype = _arg(n, 2, "dtype")
        if out_dtype is not None and out_dtype != dtype(x):
            return None
    else:
        return None
    rank = len(shape(x) or ())
    return x if isinstance(x, Node) and rank and dim in (-1, rank - 1) else None


def mask_broadcasts(mask: Node, scores: Node) -> bool:
    """The mask is a floating tensor of the scores' dtype that broadcasts to them.

    SDPA also wants at least two mask dimensions (a 1-d mask is left alone) (ch. 4)."""
    ms, ss = shape(mask), shape(scores)
    if ms is None or ss is None or dtype(mask) != dtype(scores) or len(ms) < 2:
        return False
    try:
        return tuple(torch.broadcast_shapes(ms, ss)) == tuple(ss)
    except RuntimeError:
        return False


def is_causal_mask(gm: GraphModule, mask: Node) -> bool:
    """A constant mask: 0 on and below the diagonal, -inf (or < -1e30) above it.

    Introduced in chapter 4.
    """
    t = value(gm, mask) if mask.op == "get_attr" else None
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.shape[-1] != t.shape[-2]:
        return False
    t = t.reshape(-1, *t.shape[-2:])
    upper = torch.ones(t.shape[-2:], dtype=torch.bool).triu(1)
    return bool((t[:, ~upper] == 0).all() and (t[:, upper] < -1e30).all())


def _transposed_last(n: Node) -> Node | None:
    """x when n is x transposed in its last two dimensions, else None."""
    rank = len(shape(n) or ())
    if n.op == "call_function" and n.target in (torch.ops.aten.transpose.int,
                                                torch.transpose):
        dims = {d % rank for d in n.args[1:3]} if rank else set()
        return n.args[0] if dims == {rank - 2, rank - 1} else None
    if n.op == "call_method" and n.target == "transpose":
        dims = {d % rank for d in n.args[1:3]} if rank else set()
        return n.args[0] if dims == {rank - 2, rank - 1} else None
    return None


def match_attention(gm: GraphModule, out: Node) -> dict | None:
    """The attention chain ending at `out` (the second matmul), checked; else None.

    Introduced in chapter 4.
    """
    if not _is(out, _MATMUL):
        return None
    probs, v = out.args
    chain = [out]
    x = _dropout_off(probs) if isinstance(probs, Node) else None
    dropout = None
    if x is not None:
        chain.append(probs)
        dropout, probs = probs, x
    x = _softmax_input(probs) if isinstance(probs, Node) else None
    if x is None:
        return None
    chain.append(probs)
    mask = None
    if _is(x, _ADD) and len(x.args) == 2 and not x.kwargs:
        chain.append(x)
        x, mask = x.args
        if not (isinstance(mask, Node) and isinstance(x, Node)):
            return None
    scale = 1.0
    if (_is(x, _MUL) or _is(x, _DIV)) and isinstance(x.args[1], (int, float)):
        chain.append(x)
        scale = float(x.args[1]) if x.target in _MUL else 1.0 / float(x.args[1])
        x = x.args[0]
    if not _is(x, _MATMUL):
        return None
    chain.append(x)
    q, kt = x.args
    found = dict(nodes=chain[::-1], q=q, kt=kt, v=v, mask=mask, scale=scale,
                 dropout=dropout)
    return found if _legal(gm, found) else None


def _legal(gm: GraphModule, m: dict) -> bool:
    nodes = m["nodes"]
    # a dropout that is off draws no random numbers (_dropout_off checked it)
    pure = [n for n in nodes if n is not m["dropout"]]
    if not has_no_side_effects(*pure) \
            or not all(single_consumer(n) for n in nodes[:-1]):
        return False
    q, kt, v = m["q"], m["kt"], m["v"]
    shapes = [shape(t) if isinstance(t, Node) else None for t in (q, kt, v)]
    if any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:
        return False
    (qs, ks, vs) = shapes
    if len(qs) < 3 or not (qs[:-2] == ks[:-2] == vs[:-2]) or ks[-1] != vs[-2]:
        return False
    if len({dtype(t) for t in (q, kt, v)}) != 1 or dtype(q) not in _FLOATS:
        return False
    scores = nodes[0]
    return m["mask"] is None or mask_broadcasts(m["mask"], scores)


def fuse_attention(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Replace every legal attention chain by one `scaled_dot_product_attention`.

    Introduced in chapter 4.
    """
    gm = working_copy(gm, inplace)
    removed, added, rewritten = [], [], []
    notes: list[str] = []
    for node in list(gm.graph.nodes):
        m = match_attention(gm, node) if node.graph is gm.graph else None
        if m is None:
            continue
        new = _rewrite(gm, m)
        scale = format(m["scale"], "g")
        notes.append(note("fuse_attention: {node} -> {new} (scale {scale}, mask: "
                          "{mask})", node=node.name, new=new.name, scale=scale,
                          mask=_mask_kind(new)))
        removed += m["nodes"]
        added.append(new)
        rewritten += list(new.users)
    res = finish(gm, removed, added, rewritten)
    if hasattr(res, "notes"):
        res.notes.extend(notes)
    return res


def _mask_kind(n: Node) -> str:
    if n.kwargs.get("is_causal"):
        return "causal"
    return "none" if n.kwargs.get("attn_mask") is None else "additive"


def _rewrite(gm: GraphModule, m: dict) -> Node:
    g, out = gm.graph, m["nodes"][-1]
    aten = isinstance(out.target, OpOverload)
    sdpa = torch.ops.aten.scaled_dot_product_attention.default if aten \
        else F.scaled_dot_product_attention
    with g.inserting_before(out):
        k = _transposed_last(m["kt"])
        if k is None:  # q @ b with b not a transpose: give SDPA bᵀ explicitly
            transpose = torch.ops.aten.transpose.int if aten else torch.transpose
            k = g.call_function(transpose, (m["kt"], -2, -1))
            val = m["kt"].meta.get("val")  # a weight may have no recorded value
            if isinstance(val, torch.Tensor):
                k.meta["val"] = val.transpose(-2, -1)
        mask, causal = m["mask"], False
        if mask is not None and is_causal_mask(gm, mask):
            mask, causal = None, True
        new = g.call_function(sdpa, (m["q"], k, m["v"]), {
            "attn_mask": mask, "dropout_p": 0.0, "is_causal": causal,
            "scale": m["scale"]})
    copy_meta(out, new)
    out.replace_all_uses_with(new)
    for n in reversed(m["nodes"]):
        g.erase_node(n)
    kt = m["kt"]
    if kt.graph is g and not kt.users:
        g.erase_node(kt)
    if causal:  # a constant causal mask nothing reads any more: erased, and its buffer
        drop_unused_weights(gm, [m["mask"]])
    return new
