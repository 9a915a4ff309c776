"""Functionalization (函数化): rewrite in-place ops as functional ones where sound.

Introduced in chapter 3. torchvision writes `nn.ReLU(inplace=True)` and
`out += identity`; torch.export keeps them as `relu_` and `add_`. An in-place op is
a side effect, so every pass must leave it alone, and the patterns behind it
(Conv+ReLU, Conv+Add+ReLU) hide. When the written tensor is an intermediate value
that nothing else can see, writing it in place or into a new tensor is the same:

    y = conv(x); relu_(y); return y      ─►      y = conv(x); r = relu(y); return r

Legal only when
- the written value is made inside the graph (not an input, not a weight or buffer:
  those must really be written, the caller sees them);
- it is not a view of another value, and no view of it exists (a view would see the
  write: `v = y[0]; relu_(y); return v`);
- the functional op gives the same dtype (`int_tensor += 0.5` stays int in place).

Every later reader of the written value then reads the new one. An in-place op
that fails a rule stays, with a note saying why, and passes after this one treat it
as a side effect (`legality.not_mutated`, `has_no_side_effects`). torch.export's
`run_decompositions({})` functionalizes everything, buffers included, but it also
turns `batch_norm` into `_native_batch_norm_legit_no_training` + `getitem`; this
pass keeps the graph as the book draws it.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from ..ops import op_name
from ..torch_internals import OpOverload
from .aliasing import alias_source, written_by
from .result import PassResult, copy_meta, finish, topo_index, working_copy


def functionalize(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Replace every soundly replaceable in-place aten op by its functional form.

    Introduced in chapter 3.
    """
    gm = working_copy(gm, inplace)
    index = topo_index(gm)
    removed, added, notes = [], [], []
    for m in list(gm.graph.nodes):
        functional = functional_form(m)
        if functional is None:
            continue
        why = refusal(m, functional)
        if why is not None:
            notes.append(f"functionalize: kept {m.name} ({why})")
            continue
        target = m.args[0]
        with gm.graph.inserting_before(m):
            new = gm.graph.call_function(functional, m.args, dict(m.kwargs))
        copy_meta(m, new)
        index[new] = index[m]
        m.replace_all_uses_with(new)
        for u in list(target.users):
            if u is not m and index[u] > index[m]:  # read after the write
                u.replace_input_with(target, new)
        gm.graph.erase_node(m)
        removed.append(m)
        added.append(new)
    res = finish(gm, removed, added)
    res.notes.extend(notes)
    return res


def functional_form(m: Node):
    """`aten.add.Tensor` for `aten.add_.Tensor`: the out-of-place twin, or None.

    Introduced in chapter 3.
    """
    t = m.target
    if m.op != "call_function" or not isinstance(t, OpOverload):
        return None
    args = t._schema.arguments
    if not args or args[0].alias_info is None or not args[0].alias_info.is_write:
        return None
    name = op_name(m)
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = getattr(packet, t._overloadname, None) if packet is not None else None
    if overload is None or overload._schema.is_mutable:
        return None
    # same arguments in the same places (dropout_ calls its first one self, dropout
    # input): compare their types, not their names
    if [str(a.type) for a in overload._schema.arguments] != [str(a.type) for a in args]:
        return None
    return overload


def refusal(m: Node, functional) -> str | None:
    """Why `m` may not become `functional`, or None when it may (ch. 3)."""
    target = m.args[0] if m.args else None
    if not isinstance(target, Node):
        return "writes a value that is not a node"
    if target.op in ("placeholder", "get_attr"):
        what = "an input" if target.op == "placeholder" else "a weight or buffer"
        return f"writes {what} the caller sees"
    if alias_source(target) is not None:
        return f"writes {target.name}, a view of {alias_source(target).name}"
    views = [u.name for u in target.users if u is not m and alias_source(u) is target]
    if views:
        return f"{', '.join(views)} shares {target.name}'s memory"
    others = [w for w in written_by(m) if w is not target]
    if others:
        return "writes more than its first argument"
    if not _same_dtype(m, target, functional):
        return "the functional op would change the dtype"
    return None


def _same_dtype(m: Node, target: Node, functional) -> bool:
    """Type promotion with every other operand keeps the written tensor's dtype."""
    want = _val(target)
    if want is None:
        return False
    for a in list(m.args[1:]) + list(m.kwargs.values()):
        other = _val(a) if isinstance(a, Node) else a
        if isinstance(a, Node) and other is None:
            return False
        if isinstance(other, (torch.Tensor, bool, int, float, complex)):
            try:
                if torch.result_type(want, other) != want.dtype:
                    return False
            except Exception:
                return False
    return True


def _val(n: Node):
    v = n.meta.get("val")
    return v if isinstance(v, torch.Tensor) else None
