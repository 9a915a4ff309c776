"""The blocked-layout stage: oneDNN keeps activations in its own layout (chapter 7).

Note
----
oneDNN's fastest direct convolutions read and write a *blocked* layout: nChw16c on
AVX-512 (nChw8c on AVX2), the channels cut into blocks of 16 and, within a block,
each pixel's 16 values side by side. ONNX Runtime calls it NCHWc and keeps it
between its convolutions. torch exposes it as an "mkldnn" tensor (`x.to_mkldnn()`,
`y.to_dense()`): opaque, taken by only a few ops (`passes/blocked_regions.py`).
This stage converts ONCE at the entry of a region of such ops and once where the
region ends, and runs each conv of the region on the blocked tensors:

    x ─► conv ─► relu ─► conv ─► add ─► max_pool ─► conv ─► flatten ─► linear
    x ─► [to blocked] ─► BlockedConv ─► relu ─► BlockedConv ─► add ─► max_pool
      ─► BlockedConv ─► [to dense] ─► flatten ─► linear

Every conversion is a real node (`ToBlocked`, a layout op) that the interpreter
counts (one reorder kernel, its bytes) and the drawing shows. It runs after the
fusion passes and before `convert_layout`, which runs the regions left (too small,
or cut short by an op oneDNN cannot run blocked) channels-last as before, and
`backend`, which binds the kernels of everything outside the blocked regions;
`optimize(model, x, layout="blocked")` puts it there.
Eval mode only: oneDNN's fused ops have no backward (training graphs are left
alone, with a note).

What torch 2.13 does NOT let us do, and what it costs (tried, see
`benchmarks/results/blocked_layout.md`):
- the weight cannot be prepacked for a blocked input: `_convolution_pointwise`
  refuses an mkldnn weight when its input is mkldnn (it calls `resize_` on an mkldnn
  output), and both reorder entry points (`mkldnn._reorder_convolution_weight`,
  `mkldnn_reorder_conv2d_weight`) give the weight format of the channels-last
  brgemm kernel (Acdb64a), which `mkldnn_convolution` then reorders to ABcd16b16a
  on every call. So a `BlockedConv` keeps the plain weight, and oneDNN reorders it
  inside every call: a cost the interpreter cannot see.
- the binary post-op (conv + add) refuses mkldnn tensors, so ConvAddReLU runs as
  three oneDNN kernels on blocked tensors (conv, sum, relu) instead of one.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.fx import GraphModule, Node

from ..errors import UnsupportedOpError
from ..i18n import _, note
from ..ops import OpKind, _submodule, shape
from ..passes.activations import ACTIVATIONS, Activation
from ..passes.blocked_regions import describe, keeps_blocked
from ..passes.convert_layout import MIN_CONVS, count_conversions, insert_conversion
from ..passes.fused_modules import ConvAddReLU, ConvReLU
from ..passes.layout_regions import activations, find_regions, is_conv
from ..passes.legality import is_training
from ..passes.matching import conv_parts, value
from ..passes.result import (
    PassResult,
    copy_meta,
    drop_unused_weights,
    finish,
    free_name,
    working_copy,
)
from ..torch_internals import pair
from . import onednn

LAYOUTS = ("blocked", "dense")


class ToBlocked(nn.Module):
    """Convert a 4-d tensor into oneDNN's blocked layout ("blocked", an mkldnn
    tensor) or back to NCHW ("dense"): a layout op, one reorder kernel (ch. 7)."""

    graphopt_kind = OpKind.LAYOUT

    def __init__(self, layout: str):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(_("ToBlocked takes one of {layouts}, not {value}").format(
                layouts=LAYOUTS, value=repr(layout)))
        self.layout = layout

    def forward(self, x):
        if self.layout == "dense":
            return x.to_dense()
        if torch.is_grad_enabled() and x.requires_grad:
            # oneDNN's blocked ops record no backward: the gradient would be lost
            raise UnsupportedOpError(_(
                "the blocked layout runs inference only (oneDNN's blocked ops have no "
                "backward): call the module under torch.no_grad(), or optimize it "
                "without layout='blocked' to train through it"))
        return x.to_mkldnn()

    def extra_repr(self) -> str:
        return self.layout


class BlockedConv(nn.Module):
    """A conv (+ activation, + add then ReLU) on blocked tensors: oneDNN's
    `_convolution_pointwise` with the activation as a post-op; with `other` (a
    ConvAddReLU), then oneDNN's sum and relu on the blocked output (ch. 7)."""

    graphopt_kind = OpKind.COMPUTE

    def __init__(self, weight, bias, stride, padding, dilation, groups,
                 act: Activation, adds: bool = False):
        super().__init__()
        self.register_buffer("weight", weight.detach().contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach())
        self.stride, self.padding = list(pair(stride)), list(pair(padding))
        self.dilation, self.groups = list(pair(dilation)), groups
        self.act, self.adds = act, adds

    def forward(self, x, other=None):
        act = ACTIVATIONS["none"] if self.adds else self.act
        y = onednn.conv_act(x, self.weight, self.bias, self.padding, self.stride,
                            self.dilation, self.groups, act)
        if self.adds:  # the binary post-op refuses mkldnn tensors: sum, then act
            y = self.act.eager(torch.add(y, other))
        return y

    def graphopt_flops(self, node: Node) -> int | None:
        """2 x output elements x the inputs each one reads (ch. 7)."""
        out = shape(node)
        if out is None:
            return None
        reads = math.prod(self.weight.shape[1:])
        return 2 * math.prod(out) * reads + (math.prod(out) if self.adds else 0)

    def extra_repr(self) -> str:
        return (f"act={self.act.name}, adds={self.adds}, stride={self.stride}, "
                f"padding={self.padding}, groups={self.groups}")


def blocked_layout(gm: GraphModule, inplace: bool = False,
                   min_convs: int = MIN_CONVS) -> PassResult:
    """Run each region of >= `min_convs` convolutions in oneDNN's blocked layout,
    converted once in and once out (chapter 7)."""
    gm = working_copy(gm, inplace)
    why = _why_not(gm)
    if why is not None:
        res = finish(gm)
        res.notes.append(note("blocked_layout: left the graph as it was ({why})",
                              why=why))
        return res
    added, rewritten, notes, weights = [], [], [], []
    for region in find_regions(gm, keeps=keeps_blocked):
        convs = [n for n in region if is_conv(gm, n)]
        if len(convs) < min_convs:
            names = ", ".join(describe(gm, n) for n in convs)
            notes.append(note("blocked_layout: kept {names} unblocked (a region of "
                              "{count} conv(s), fewer than {min_convs}: two "
                              "conversions cost what it saves)", names=names,
                              count=len(convs), min_convs=min_convs))
            continue
        added += _convert_edges(gm, region)
        # the replaced convs' get_attr nodes: their weights now live in the modules
        weights += [a for n in convs for a in n.all_input_nodes if a.op == "get_attr"]
        rewritten += [_bind_conv(gm, n) for n in convs]
    drop_unused_weights(gm, weights)
    res = finish(gm, added=added, rewritten=rewritten)
    res.notes += notes
    return res


def _why_not(gm: GraphModule) -> str | None:
    """Why no region may run blocked here, or None."""
    if is_training(gm):
        return note("training mode: oneDNN's blocked ops have no backward")
    if not onednn.available():
        return note("this torch build has no oneDNN")
    return None


def _convert_edges(gm: GraphModule, region: list[Node]) -> list[Node]:
    """A `ToBlocked("blocked")` before the region reads an outside value, a
    `ToBlocked("dense")` after each region value read outside (the output too)."""
    inside, entries, added = set(region), {}, []
    for n in region:
        for a in activations(gm, n):
            if a in inside:
                continue
            if a not in entries:
                entries[a] = insert_conversion(gm, a, ToBlocked("blocked"),
                                               before=n)
                added.append(entries[a])
            n.replace_input_with(a, entries[a])
    for n in region:
        outside = [u for u in n.users if u not in inside]
        if outside:
            back = insert_conversion(gm, n, ToBlocked("dense"), before=None)
            added.append(back)
            for u in outside:
                u.replace_input_with(n, back)
    return added


def _bind_conv(gm: GraphModule, n: Node) -> Node:
    """Replace a region's conv node by a `BlockedConv` holding its weight."""
    module = _blocked_conv(gm, n)
    name = free_name(gm, f"blocked_{n.name}")
    gm.add_module(name, module)
    args = (n.args[0],) + ((n.args[3],) if module.adds else ())
    with gm.graph.inserting_before(n):
        new = gm.graph.call_module(name, args)
    copy_meta(n, new)
    new.meta["graphopt_layout"] = "blocked"
    n.replace_all_uses_with(new)
    gm.graph.erase_node(n)
    return new


def _blocked_conv(gm: GraphModule, n: Node) -> BlockedConv:
    if n.op == "call_module":
        m = _submodule(n)
        assert isinstance(m, ConvReLU)
        w, b = value(gm, n.args[1]), value(gm, n.args[2])
        return BlockedConv(w, b, m.stride, m.padding, m.dilation, m.groups, m.act,
                           adds=isinstance(m, ConvAddReLU))
    p = conv_parts(n)
    return BlockedConv(value(gm, p.weight), value(gm, p.bias), p.stride, p.padding,
                       p.dilation, p.groups, ACTIVATIONS["none"])


def count_blocked_conversions(gm: GraphModule) -> dict[str, int]:
    """The ToBlocked nodes of `gm` by target layout: {"blocked": 2, "dense": 2}.

    Introduced in chapter 7.
    """
    return count_conversions(gm, ToBlocked, LAYOUTS)

