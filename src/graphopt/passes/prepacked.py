"""Base classes of the fused pattern modules (chapter 4).

`FusedPattern` is what `fuse_patterns` puts in the graph: a module that runs its
pattern's ops by reference (`reference`, the eager ops one after another) until the
backend stage (`graphopt.backend`, chapter 7) binds a library kernel to it. The
interpreter counts what really ran: the reference's kernels, or the one library
kernel. `Prepacked` marks a module whose weight the backend may fold into a
library's layout once, at optimize time (a constant-folding step), and reads that
pack back; the slot itself (how it is stored, copied and pickled) is the backend's
(`backend.prepacked`): the passes only create the module.
"""

from __future__ import annotations

from torch import nn

from ..torch_internals import version


class FusedPattern(nn.Module):
    """A fused pattern node: its reference ops, or the plan the backend bound.

    `kernel` names what a call runs: "reference" until the backend stage sets it
    ("onednn", "mkl", "numba", "eager" with `why_eager`). `plan` is the backend's
    `Plan` (its guard, its call, its kernel count), None until it binds one (ch. 4).
    """

    kernel = "reference"
    plan = None
    why_eager = ""

    def forward(self, *inputs):
        plan = self.plan
        if plan is not None and plan.guard(self, *inputs):
            return plan.call(self, *inputs)
        return self.reference(*inputs)

    def reference(self, *inputs):
        raise NotImplementedError(
            f"{type(self).__name__} must define reference(*inputs): the pattern's "
            "ops run by torch, which forward falls back to when no plan applies")


class Prepacked(FusedPattern):
    """A pattern module whose one weight the backend may hold prepacked (ch. 4).

    `_pack` is None, or the backend's `Pack` (source weight, its version, packed
    tensor, key, ...). The packed tensor is a folded constant: `packed` returns it
    only while the source weight is the same tensor with the same version (its
    counter, which an in-place write such as `load_state_dict` bumps, and its
    address, which `p.data = w` moves: `torch_internals.version`), so a changed
    weight is never run stale.
    """

    _pack = None

    def packed(self, weight, key):
        """The packed tensor made from `weight` for `key`, or None (ch. 4)."""
        p = self._pack
        if p is not None and p[0] is weight and p[1] == version(weight) and p[3] == key:
            return p[2]
        return None

    @property
    def is_prepacked(self) -> bool:
        return self._pack is not None
