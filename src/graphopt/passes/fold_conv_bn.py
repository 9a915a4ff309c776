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

from torch import nn
from torch.fx import GraphModule, Node

from ..ops import _submodule
from .conv_bn_math import fold_conv_bn_weights
from .legality import is_constant_tensor, is_eval_mode, single_consumer
from .matching import bn_output_users, bn_parts, conv_parts, value
from .result import PassResult, add_constant, drop_unused_weights, finish, working_copy


def fold_conv_bn(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Fold every eval-mode BN into the convolution that feeds only it (chapter 4)."""
    gm = working_copy(gm, inplace)
    removed, added, rewritten, old_weights, modules = [], [], [], [], []
    for bn in list(gm.graph.nodes):
        conv = foldable_pair(gm, bn)
        if conv is None:
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
    return finish(gm, removed, added, [r for r in rewritten if r not in removed])


def foldable_pair(gm: GraphModule, bn: Node) -> Node | None:
    """The conv feeding `bn` when the pair may be folded, else None."""
    parts = bn_parts(bn)
    if parts is None or not isinstance(parts.input, Node) or not is_eval_mode(bn):
        return None
    conv = parts.input
    cparts = conv_parts(conv)
    if cparts is None or not single_consumer(conv) or bn_output_users(bn) is None:
        return None
    operands = (cparts.weight, cparts.bias, parts.weight, parts.bias, parts.mean, parts.var)
    if not all(is_constant_tensor(x, gm) for x in operands) or parts.mean is None:
        return None
    if conv.op == "call_module" and _calls_of(gm, conv.target) != 1:
        return None  # the same nn.Conv2d is called elsewhere, with no BN after it
    return conv


def folded_weights(gm: GraphModule, conv: Node, bn: Node):
    """The folded (weight, bias) of a foldable conv/BN pair."""
    c, b = conv_parts(conv), bn_parts(bn)
    return fold_conv_bn_weights(value(gm, c.weight), value(gm, c.bias), value(gm, b.mean),
                                value(gm, b.var), b.eps, value(gm, b.weight),
                                value(gm, b.bias))


def _install(gm: GraphModule, conv: Node, weight, bias) -> list[Node]:
    """Point `conv` at the folded weights; returns the new get_attr nodes (aten level)."""
    if conv.op == "call_module":
        module = copy.deepcopy(_submodule(conv))  # never write the caller's conv
        module.weight = nn.Parameter(weight, requires_grad=False)
        module.bias = nn.Parameter(bias, requires_grad=False)
        _set_submodule(gm, str(conv.target), module)
        return []
    new = []
    with gm.graph.inserting_before(conv):
        for i, (tensor, what) in enumerate(((weight, "weight"), (bias, "bias")), start=1):
            target = add_constant(gm, f"{conv.name}_folded_{what}", tensor)
            node = gm.graph.get_attr(target)
            node.meta["tensor_meta"] = _meta(tensor)
            new.append(node)
    args = list(conv.args)
    while len(args) < 3:
        args.append(None)
    args[1], args[2] = new
    conv.args = tuple(args)
    conv.kwargs = {k: v for k, v in conv.kwargs.items() if k != "bias"}
    return new


def _meta(tensor):
    from torch.fx.passes.shape_prop import _extract_tensor_metadata
    return _extract_tensor_metadata(tensor)


def _calls_of(gm: GraphModule, target) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_module" and n.target == target)


def _set_submodule(gm: GraphModule, target: str, module: nn.Module) -> None:
    parent_name, _, attr = target.rpartition(".")
    parent = gm.get_submodule(parent_name) if parent_name else gm
    setattr(parent, attr, module)
