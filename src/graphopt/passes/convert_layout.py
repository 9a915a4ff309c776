"""Layout conversion (布局转换): run the convolutions in channels-last (chapter 7).

Note
----
A 4-d activation can sit in memory as NCHW (each channel a contiguous HxW plane) or
as NHWC, "channels-last" (the C values of one pixel side by side). oneDNN's conv
kernels compute in NHWC or a blocked layout; given NCHW they copy the input into
their layout and the output back, at every convolution. This pass converts ONCE
at the entry of a region of convolutions and the ops between them, keeps every
value in the region channels-last, and converts back where the region ends:

    x ─► conv ─► hardswish ─► conv ─► add ─► conv ─► flatten ─► linear
    x ─► [to NHWC] ─► conv ─► hardswish ─► conv ─► add ─► conv ─► [to NCHW] ─► flatten

A memory format never changes a value, only where it lives, so the rewrite is exact;
what it changes is cost: each conversion is a real copy (the interpreter counts its
kernel and bytes) that no elementwise fusion can remove, because every output
element reads an input element far away. It pays only when several convolutions in
a row share it: a region with fewer than `MIN_CONVS` is left in NCHW.

Legality (`keeps_layout`, in `layout_regions.py`): a node joins a region when it is
a convolution, a pool or a non-mutating pointwise op on 4-d floating tensors (torch's
TensorIterator and oneDNN give a channels-last output for channels-last inputs; the
tests check the ops CNNs use), or a fused elementwise group whose tensor inputs are
all 4-d (its kernel walks memory in order: it is given NHWC *views* (permutes, no
copy) and its output viewed back). Everything else (view, reshape, flatten, linear,
the graph's output, ops of other ranks, in-place ops) is outside: it gets an
NCHW-contiguous value, as before the pass. A tensor with H*W == 1 or C == 1 is the
same bytes in both layouts and needs no conversion. Training-mode graphs are left
alone (notes say so).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.fx import GraphModule, Node

from ..i18n import note
from ..ops import OpKind, _submodule, shape
from ..torch_internals import fake_mode_of, tensor_metadata
from .fuse_elementwise import FusedElementwise
from .layout_regions import POOLS as POOLS  # re-exported: the tests read them here
from .layout_regions import UNTAGGED as UNTAGGED
from .layout_regions import (
    activations,
    find_regions,
    is_4d_float,
    is_conv,
    same_in_both,
)
from .legality import is_training
from .result import PassResult, copy_meta, finish, free_name, label, working_copy

aten = torch.ops.aten
# A region of fewer convolutions stays NCHW: its two conversions cost what they save.
# Measured on ResNet's BasicBlock, the only two-conv region of graphopt.models
# (1x64x32x32, 1x16x16x16, ...; 2-core EPYC, torch 2.13, 15 interleaved rounds, 1 and
# 2 threads):
# the backend stage ran 0.92-1.07x its time without the pass, the convert_layout stage
# 1.02-1.11x the stage before it (torch's reference convs on the converted values);
# regions of 8 to 52 convs (small_resnet, ResNet-18, MobileNetV3) ran 0.78-0.93x.
MIN_CONVS = 3
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)

FORMATS = {"channels_last": torch.channels_last, "nchw": torch.contiguous_format}


class ToLayout(nn.Module):
    """Copy a 4-d tensor into `layout` ("channels_last" or "nchw"): a layout op (ch. 7).

    `contiguous` copies only when the tensor is not already in that layout; the
    interpreter counts the copy's kernel and bytes when it runs. The backend stage
    may give it a faster copy kernel, `copy(module, x)` (a oneDNN reorder made
    once: `backend.onednn_reorder`), which does the same.
    """

    graphopt_kind = OpKind.LAYOUT
    copy = None  # the backend's copy kernel, where it bound one

    def __init__(self, layout: str):
        super().__init__()
        self.layout = layout

    def forward(self, x):
        if self.copy is not None:
            return self.copy(self, x)
        return x.contiguous(memory_format=FORMATS[self.layout])

    def extra_repr(self) -> str:
        return self.layout


def convert_layout(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Run each region of >= MIN_CONVS convolutions channels-last (chapter 7)."""
    gm = working_copy(gm, inplace)
    if is_training(gm):
        res = finish(gm)
        res.notes.append(note("convert_layout: left the graph in NCHW (training "
                              "mode: a backward pass would see the layout too; not "
                              "verified)"))
        return res
    added, rewritten, notes = [], [], []
    for region in find_regions(gm):
        convs = [n for n in region if is_conv(gm, n)]
        if len(convs) >= MIN_CONVS:
            a, r = _rewrite(gm, region)
            rewritten += r
        else:
            n = len(convs)
            names = ", ".join(map(label, convs))
            notes.append(note("convert_layout: kept {nodes} in NCHW (a region of {n} "
                              "convs; two conversions cost what it saves)",
                              nodes=names, n=n) if n > 1 else
                         note("convert_layout: kept {nodes} in NCHW (a region of {n} "
                              "conv; two conversions cost what it saves)",
                              nodes=names, n=n))
            a = _returned_as_nchw(gm, region, gm.graph.find_nodes(op="output")[0])
        added += a
    res = finish(gm, added=added, rewritten=rewritten)
    res.notes += notes
    return res


def _rewrite(gm: GraphModule, region: list[Node]) -> tuple[list[Node], list[Node]]:
    """Conversions at the region's entries and exits; NHWC views around fused groups."""
    inside = set(region)
    added, entries, exits = [], {}, {}
    for n in region:
        for a in activations(gm, n):
            if a not in inside and is_4d_float(a) and not same_in_both(a):
                if a not in entries:
                    entries[a] = _convert(gm, a, "channels_last", before=n)
                    added.append(entries[a])
                n.replace_input_with(a, entries[a])
    for n in region:
        outside = [u for u in n.users if u not in inside]
        if outside and not same_in_both(n):
            exits[n] = _convert(gm, n, "nchw", before=None)
            added.append(exits[n])
            for u in outside:
                u.replace_input_with(n, exits[n])
    for n in region:
        if n.op == "call_module" and isinstance(_submodule(n), FusedElementwise):
            added += _view_as_nhwc(gm, n)
        elif is_4d_float(n):  # its value is channels-last now: record it, so a
            _restride(n, torch.channels_last)  # plan's guard at bind time sees it
    return added, region


def conv_input_layouts(gm: GraphModule, *inputs) -> dict[str, int]:
    """How many convolutions read an NCHW, a channels-last or a same-in-both input
    when `gm` runs on `inputs` (chapter 7: each NCHW one is reordered inside oneDNN)."""
    counts = {"nchw": 0, "channels_last": 0, "both": 0, "strided": 0}
    env: dict[Node, torch.Tensor] = {}

    class Spy(torch.fx.Interpreter):
        def run_node(self, n):
            env[n] = out = super().run_node(n)
            if is_conv(gm, n):
                counts[layout_of(env[activations(gm, n)[0]])] += 1
            return out

    with torch.no_grad():
        Spy(gm).run(*inputs)
    return counts


def count_conversions(gm: GraphModule, op: type = ToLayout,
                      layouts=tuple(FORMATS)) -> dict[str, int]:
    """The `op` nodes (layout ops: `ToLayout`, the blocked stage's `ToBlocked`) of
    `gm` by target layout: {"channels_last": 1, "nchw": 0}.

    Introduced in chapter 7.
    """
    gm = getattr(gm, "graph_module", gm)  # the backend's wrapper: its graph module
    counts = dict.fromkeys(layouts, 0)
    for n in gm.graph.nodes:
        m = _submodule(n) if n.op == "call_module" else None
        if isinstance(m, op):
            counts[m.layout] += 1
    return counts


def layout_of(t: torch.Tensor) -> str:
    """"nchw", "channels_last", or "both" (the same bytes), for a 4-d tensor (ch. 7)."""
    nchw = t.is_contiguous()
    last = t.is_contiguous(memory_format=torch.channels_last)
    return "both" if nchw and last else "nchw" if nchw else \
        "channels_last" if last else "strided"


def _returned_as_nchw(gm: GraphModule, region: list[Node], out: Node) -> list[Node]:
    """Outside a region oneDNN may still pick channels-last for a conv's output (it
    does for prepacked weights): what the graph returns is made NCHW, as eager's is.
    `contiguous` copies only when it is not NCHW already."""
    added = []
    for n in region:
        if out in n.users and not same_in_both(n):
            node = _convert(gm, n, "nchw", before=None)
            out.replace_input_with(n, node)
            added.append(node)
    return added


def _convert(gm: GraphModule, src: Node, layout: str, before: Node | None) -> Node:
    """A ToLayout node reading `src`, its metadata restrided to `layout`."""
    node = insert_conversion(gm, src, ToLayout(layout), before)
    _restride(node, FORMATS[layout])
    return node


def insert_conversion(gm: GraphModule, src: Node, module: nn.Module,
                      before: Node | None) -> Node:
    """A node calling the layout op `module` (a `ToLayout`, the blocked stage's
    `ToBlocked`) on `src`: right before its first reader in a region (`before`, an
    entry), or right after `src` (an exit); named `to_<its layout>` (ch. 7)."""
    name = free_name(gm, f"to_{module.layout}")
    gm.add_module(name, module)
    where = gm.graph.inserting_before(before) if before is not None \
        else gm.graph.inserting_after(src)
    with where:
        node = gm.graph.call_module(name, (src,))
    copy_meta(src, node)
    return node


def _view_as_nhwc(gm: GraphModule, n: Node) -> list[Node]:
    """Give a fused group NHWC views of its 4-d inputs and view its output back:
    every operand permuted alike, so broadcasting pairs the same dimensions."""
    added = []
    for a in [a for a in n.all_input_nodes if len(shape(a) or ()) == 4]:
        with gm.graph.inserting_before(n):
            p = gm.graph.call_function(aten.permute.default, (a, list(TO_NHWC)))
        _permuted_meta(a, p, TO_NHWC)
        n.replace_input_with(a, p)
        added.append(p)
    with gm.graph.inserting_after(n):
        back = gm.graph.call_function(aten.permute.default, (n, list(TO_NCHW)))
    copy_meta(n, back)
    _restride(back, torch.channels_last)
    n.replace_all_uses_with(back, delete_user_cb=lambda u: u is not back)
    _permuted_meta(back, n, TO_NHWC)
    return added + [back]


def _restride(node: Node, fmt) -> None:
    """Record the new strides in the node's metadata (shapes are unchanged)."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        with _fake_mode(val):
            _set_val(node, val.contiguous(memory_format=fmt))


def _permuted_meta(src: Node, dst: Node, dims) -> None:
    val = src.meta.get("val")
    if isinstance(val, torch.Tensor):
        with _fake_mode(val):
            _set_val(dst, val.permute(*dims).contiguous())


def _set_val(node: Node, val) -> None:
    node.meta["val"] = val
    node.meta["tensor_meta"] = tensor_metadata(val)


def _fake_mode(val):
    from contextlib import nullcontext

    return fake_mode_of([val]) or nullcontext()

