"""Conv+BN folding (卷积-BN 折叠): bake an eval-mode batch norm into the conv before it.

Introduced in chapter 4; the algebra is `conv_bn_math.fold_conv_bn_weights`.

Note
----
    x ──► conv(W, b) ──► bn(mean, var, gamma, beta) ──► y
    x ──► conv(W', b') ─────────────────────────────► y      (one op fewer)

Legal only when
- BN is in eval mode (`is_eval_mode`): in training BN normalises with the batch's own
  statistics, which are not known ahead of time;
- the conv's output has BN as its single consumer (`single_consumer`): another reader
  of the conv's output needs the unfolded values;
- the weights are constants (parameters or buffers).

Works on aten-level graphs (`aten.conv2d` / `aten.convolution` followed by
`aten.batch_norm` or `_native_batch_norm_legit_no_training`, weights as `get_attr`)
and on module-level graphs (`nn.Conv2d` then `nn.BatchNorm2d`). The folded weights
are new tensors (`<conv>_folded_weight`, `<conv>_folded_bias`); the caller's weights
are never written, and the old ones are dropped from the optimised module.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx import GraphModule, Node

from ..aliasing import written_values
from ..i18n import note
from ..ops import _submodule
from .conv_bn_math import fold_conv_bn_weights
from .legality import is_constant_tensor, is_eval_mode, not_mutated, single_consumer
from .matching import BNParts, ConvParts, bn_output_users, bn_parts, conv_parts, value
from .result import (
    PassResult,
    add_constant,
    drop_unused_weights,
    finish,
    label,
    set_value_meta,
    working_copy,
)

aten = torch.ops.aten


def fold_conv_bn(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Fold every eval-mode BN into the convolution that feeds only it (chapter 4)."""
    gm = working_copy(gm, inplace)
    removed, added, rewritten, old_weights, modules = [], [], [], [], []
    notes, written = [], written_values(gm.graph)
    for bn in list(gm.graph.nodes):
        conv = foldable_pair(gm, bn, written)
        if conv is None:
            if _after_conv(bn) and not is_eval_mode(bn):
                notes.append(note(
                    "fold_conv_bn: kept {node} (training mode: batch norm "
                    "normalises with each batch's own statistics)", node=label(bn)))
            continue
        weight, bias = folded_weights(gm, conv, bn)
        old_weights += conv.all_input_nodes + bn.all_input_nodes
        added += _install(gm, conv, weight, bias)
        readers = bn_output_users(bn)
        for r in readers:
            rewritten += list(r.users)
            r.replace_all_uses_with(conv)
        for r in readers + ([bn] if bn not in readers else []):
            gm.graph.erase_node(r)
            removed.append(r)
        rewritten.append(conv)
        modules += [bn.target] if bn.op == "call_module" else []
    removed += drop_unused_weights(gm, old_weights, modules)
    res = finish(gm, removed, added, [r for r in rewritten if r not in removed])
    res.notes.extend(notes)
    return res


def _after_conv(bn: Node) -> bool:
    parts = batch_norm_parts(bn)
    return parts is not None and isinstance(parts.input, Node) and \
        convolution_parts(parts.input) is not None


def convolution_parts(n: Node) -> ConvParts | None:
    """`matching.conv_parts`, widened to 1-d and 3-d convolutions (Conv1d, Conv3d).

    Introduced in chapter 4.
    """
    parts = conv_parts(n)
    if parts is not None or n.op not in ("call_module", "call_function"):
        return parts
    if n.op == "call_module":
        m = _submodule(n)
        if type(m) not in (nn.Conv1d, nn.Conv3d) or m.padding_mode != "zeros" \
                or len(n.args) != 1:
            return None
        return ConvParts(n.args[0], m.weight, m.bias, m.stride, m.padding, m.dilation,
                         m.groups)
    conv_nd = (aten.conv1d.default, aten.conv3d.default, F.conv1d, F.conv3d)
    plain = n.target is aten.convolution.default and not _arg(n, 6, "transposed")
    if n.target not in conv_nd and not plain:
        return None
    return ConvParts(n.args[0], n.args[1], _arg(n, 2, "bias"), None, None, None, 1)


def batch_norm_parts(n: Node) -> BNParts | None:
    """`matching.bn_parts`, widened to BatchNorm1d and BatchNorm3d modules (ch. 4)."""
    parts = bn_parts(n)
    if parts is not None or n.op != "call_module":
        return parts
    m = _submodule(n)
    if not isinstance(m, nn.modules.batchnorm._BatchNorm):
        return None
    return BNParts(n.args[0], m.weight, m.bias, m.running_mean, m.running_var, m.eps)


def _arg(n: Node, i: int, name: str, default=None):
    return n.args[i] if len(n.args) > i else n.kwargs.get(name, default)


def foldable_pair(gm: GraphModule, bn: Node, written: set | None = None) -> Node | None:
    """The conv feeding `bn` when the pair may be folded, else None (ch. 4)."""
    parts = batch_norm_parts(bn)
    if parts is None or not isinstance(parts.input, Node) or not is_eval_mode(bn):
        return None
    conv = parts.input
    cparts = convolution_parts(conv)
    if cparts is None or not single_consumer(conv) or bn_output_users(bn) is None:
        return None
    operands = (
        cparts.weight,
        cparts.bias,
        parts.weight,
        parts.bias,
        parts.mean,
        parts.var,
    )
    if not all(is_constant_tensor(x, gm) for x in operands) or parts.mean is None:
        return None
    written = written_values(gm.graph) if written is None else written
    if not all(not_mutated(x, written) for x in operands if isinstance(x, Node)):
        return None  # a weight written in place is not a constant
    if conv.op == "call_module" and _calls_of(gm, conv.target) != 1:
        return None  # the same nn.Conv2d is called elsewhere, with no BN after it
    return conv


def folded_weights(gm: GraphModule, conv: Node, bn: Node):
    """The folded (weight, bias) of a foldable conv/BN pair (ch. 4)."""
    c, b = convolution_parts(conv), batch_norm_parts(bn)
    return fold_conv_bn_weights(
        value(gm, c.weight),
        value(gm, c.bias),
        value(gm, b.mean),
        value(gm, b.var),
        b.eps,
        value(gm, b.weight),
        value(gm, b.bias),
    )


def _install(gm: GraphModule, conv: Node, weight, bias) -> list[Node]:
    """Point `conv` at the folded weights; return the new get_attr nodes (aten)."""
    if conv.op == "call_module":
        module = copy.deepcopy(_submodule(conv))  # never write the caller's conv
        module.weight = nn.Parameter(weight, requires_grad=False)
        module.bias = nn.Parameter(bias, requires_grad=False)
        _set_submodule(gm, str(conv.target), module)
        return []
    new = []
    with gm.graph.inserting_before(conv):
        for tensor, what in ((weight, "weight"), (bias, "bias")):
            target = add_constant(gm, f"{conv.name}_folded_{what}", tensor)
            node = gm.graph.get_attr(target)
            set_value_meta(node, tensor)
            new.append(node)
    args = list(conv.args)
    while len(args) < 3:
        args.append(None)
    args[1], args[2] = new
    conv.args = tuple(args)
    conv.kwargs = {k: v for k, v in conv.kwargs.items() if k != "bias"}
    return new


def _calls_of(gm: GraphModule, target) -> int:
    return sum(
        1 for n in gm.graph.nodes if n.op == "call_module" and n.target == target
    )


def _set_submodule(gm: GraphModule, target: str, module: nn.Module) -> None:
    parent_name, _, attr = target.rpartition(".")
    parent = gm.get_submodule(parent_name) if parent_name else gm
    setattr(parent, attr, module)
