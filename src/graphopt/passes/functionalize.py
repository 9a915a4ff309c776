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

from torch.fx import GraphModule

from ..functionalization import functional_form, functionalize_graph, refusal
from .result import PassResult, finish, working_copy

__all__ = ["functional_form", "functionalize", "refusal"]


def functionalize(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Replace every soundly replaceable in-place aten op by its functional form.

    Introduced in chapter 3. The rewrite is `functionalization.functionalize_graph`
    (capture applies it too); this pass runs it on a copy.
    """
    gm = working_copy(gm, inplace)
    removed, added, notes = functionalize_graph(gm.graph)
    res = finish(gm, removed, added)
    res.notes.extend(notes)
    return res
