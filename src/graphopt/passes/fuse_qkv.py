"""Q/K/V fusion (QKV 融合): linears that share an input become one wider linear.

    x ─► linear(Wq, bq) ─► q        x ─► linear([Wq; Wk; Wv], [bq; bk; bv])
    x ─► linear(Wk, bk) ─► k   ==►        ├─► slice 0:256   ─► q
    x ─► linear(Wv, bv) ─► v              ├─► slice 256:512 ─► k
                                          └─► slice 512:768 ─► v

Why it pays (chapter 7): an attention layer multiplies the same activations by three
weight matrices. One matrix product with three times the output columns reads x
once instead of three times and keeps the matrix unit busy with a wider tile; on the
BERT encoder of chapter 7 (128 tokens, 256 wide) one 256x768 product ran faster
than three 256x256 ones on this machine (`benchmarks/results/cpu_bert_*.txt`).
ONNX Runtime's attention fusion and inductor's `batch_linear` fusion make the same
rewrite. The concatenated weight is a new constant, built once here: a small
constant folding (常量折叠) step.

Legality, checked before anything is rewritten:
- two or more linears read the same input node, each with a constant 2-d weight
  (`is_constant_tensor`) of one dtype and device and the same input width, and all
  with a bias or all without;
- not in training mode (`is_training`): an optimiser step changes the separate
  weights, and the concatenated copy would not follow them;
- no in-place op writes the input, a weight, a bias or an output (`not_mutated`):
  an output becomes a view of the wide result, so a write to it is refused;
- every `view` that reads an output still works on the strided slice (tried on a
  fake tensor), so no later call fails on a layout the pass created.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx import GraphModule, Node

from ..aliasing import written_values
from ..i18n import note
from ..ops import _submodule, dtype, shape
from ..torch_internals import tensor_metadata
from .legality import is_constant_tensor, is_training, not_mutated
from .matching import _arg, value
from .result import (
    PassResult,
    add_constant,
    drop_unused_weights,
    finish,
    set_value_meta,
    working_copy,
)

_ATEN_LINEAR = torch.ops.aten.linear.default
_VIEWS = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default}


def _linear_parts(gm: GraphModule, n: Node) -> tuple | None:
    """(x, weight, bias) of an aten/functional linear or an nn.Linear, else None."""
    if n.op == "call_function" and n.target in (_ATEN_LINEAR, F.linear):
        if len(n.args) + len(n.kwargs) > 3:
            return None
        x, w, b = n.args[0], _arg(n, 1, "weight"), _arg(n, 2, "bias")
        if not (is_constant_tensor(w, gm) and is_constant_tensor(b, gm)):
            return None
        return x, value(gm, w), value(gm, b), [w, b]
    if n.op == "call_module" and type(_submodule(n)) is nn.Linear and not n.kwargs:
        m = _submodule(n)
        return n.args[0], m.weight, m.bias, []
    return None


def _groups(gm: GraphModule) -> list[list[tuple]]:
    """Linears grouped by the input they read, in graph order (2 or more each)."""
    by_input: dict[Node, list[tuple]] = {}
    for n in gm.graph.nodes:
        parts = _linear_parts(gm, n)
        if parts is not None and isinstance(parts[0], Node) and \
                isinstance(parts[1], torch.Tensor) and parts[1].dim() == 2:
            by_input.setdefault(parts[0], []).append((n, *parts))
    return [g for g in by_input.values() if len(g) > 1]


def _compatible(group: list[tuple]) -> list[tuple]:
    """The linears of `group` that match its first one (width, dtype, device, bias)."""
    _, _, w0, b0, _ = group[0]
    return [m for m in group
            if m[2].shape[1] == w0.shape[1] and m[2].dtype == w0.dtype
            and m[2].device == w0.device and (m[3] is None) == (b0 is None)]


def _views_still_work(n: Node, start: int, width: int, total: int) -> bool:
    """Every view reading `n` also accepts the strided slice that will replace it."""
    out = shape(n)
    if out is None:
        return False
    strided = torch.empty(*out[:-1], total, device="meta")[..., start:start + width]
    for u in n.users:
        is_view = (u.op == "call_function" and u.target in _VIEWS) or (
            u.op == "call_method" and u.target == "view")
        if not is_view:
            continue
        if shape(u) is None:
            return False
        try:  # the view's recorded output shape, on the slice's strides
            strided.view(shape(u))
        except RuntimeError:
            return False
    return True


def why_not(gm: GraphModule, members: list[tuple], written: set) -> str | None:
    """Why these linears cannot become one, or None when the rewrite is legal.

    Introduced in chapter 7.
    """
    if is_training(gm):
        return note("training mode: the weights change, a concatenated copy would not")
    x = members[0][1]
    nodes = [x] + [m[0] for m in members] + [r for m in members for r in m[4]
                                             if isinstance(r, Node)]
    if not all(not_mutated(n, written) for n in nodes):
        return note("an in-place op writes the input, a weight or an output")
    start, total = 0, sum(m[2].shape[0] for m in members)
    for m in members:
        if not _views_still_work(m[0], start, m[2].shape[0], total):
            return note("a view of {node} needs a contiguous tensor", node=m[0].name)
        start += m[2].shape[0]
    return None


def fuse_qkv(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Merge every group of linears that read one input into one linear (chapter 7)."""
    gm = working_copy(gm, inplace)
    written = written_values(gm.graph)
    removed, added, rewritten, notes, weights = [], [], [], [], []
    for group in _groups(gm):
        members = _compatible(group)
        if len(members) < 2:
            continue
        why = why_not(gm, members, written)
        names = ", ".join(m[0].name for m in members)
        if why:
            notes.append(note("fuse_qkv: kept {nodes} apart ({reason})", nodes=names,
                               reason=why))
            continue
        wide, slices = _rewrite(gm, members)
        notes.append(note("fuse_qkv: {nodes} -> {node} ({n} outputs)", nodes=names,
                          node=wide.name, n=sum(m[2].shape[0] for m in members)))
        removed += [m[0] for m in members]
        added += [wide, *slices]
        rewritten += [u for s in slices for u in s.users]
        weights += [r for m in members for r in m[4] if isinstance(r, Node)]
    modules = [str(m.target) for m in removed if m.op == "call_module"]
    drop_unused_weights(gm, weights, modules)
    res = finish(gm, removed, added, rewritten)
    res.notes.extend(notes)
    return res


def _rewrite(gm: GraphModule, members: list[tuple]) -> tuple[Node, list[Node]]:
    g, first = gm.graph, members[0][0]
    aten = first.op == "call_function" and first.target is _ATEN_LINEAR
    with torch.no_grad():
        w = torch.cat([m[2].detach() for m in members])
        b = None if members[0][3] is None else torch.cat(
            [m[3].detach() for m in members])
    base = first.name + "_qkv"
    with g.inserting_before(first):
        w_node = g.get_attr(add_constant(gm, base + "_weight", w))
        b_node = None if b is None else g.get_attr(add_constant(gm, base + "_bias", b))
        wide = g.call_function(_ATEN_LINEAR if aten else F.linear,
                               (members[0][1], w_node, b_node))
    _set_meta(gm, [w_node, b_node], [w, b])
    _fake_out(wide, members[0][1], w_node, b_node)
    slices, start, prev = [], 0, wide
    for m in members:
        n, width = m[0], m[2].shape[0]
        with g.inserting_after(prev):
            s = g.call_function(torch.ops.aten.slice.Tensor if aten else torch.narrow,
                                (wide, -1, start, start + width) if aten
                                else (wide, -1, start, width))
        _fake_slice(s, wide, start, width)
        n.replace_all_uses_with(s)
        g.erase_node(n)
        slices.append(s)
        start, prev = start + width, s
    return wide, slices


def _set_meta(gm, nodes, values) -> None:
    for n, v in zip(nodes, values):
        if n is not None:
            set_value_meta(n, v)


def _fake_out(wide: Node, x: Node, w: Node, b: Node | None) -> None:
    """The wide linear's shape record, computed on fake or meta tensors (no data)."""
    xv = x.meta.get("val")
    if isinstance(xv, torch.Tensor):
        args = (xv, w.meta["val"], None if b is None else b.meta["val"])
    else:  # a module-level graph records only ShapeProp's tensor_meta
        args = (_meta(x), _meta(w), None if b is None else _meta(b))
    _record(wide, F.linear(*args), fake=isinstance(xv, torch.Tensor))


def _fake_slice(s: Node, wide: Node, start: int, width: int) -> None:
    wv = wide.meta.get("val")
    base = wv if isinstance(wv, torch.Tensor) else _meta(wide)
    _record(s, base.narrow(-1, start, width), fake=isinstance(wv, torch.Tensor))


def _meta(n: Node) -> torch.Tensor:
    return torch.empty(shape(n), dtype=dtype(n), device="meta")


def _record(n: Node, v: torch.Tensor, fake: bool) -> None:
    n.meta["tensor_meta"] = tensor_metadata(v)
    if fake:
        n.meta["val"] = v


__all__ = ["fuse_qkv", "why_not"]
