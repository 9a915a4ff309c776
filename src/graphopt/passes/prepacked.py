"""Base classes of the fused pattern modules (chapter 4).

`FusedPattern` is what `fuse_patterns` puts in the graph: a module that runs its
pattern's ops by reference (`reference`, the eager ops one after another) until the
backend stage (`graphopt.backend`, chapter 7) binds a library kernel to it. The
interpreter counts what really ran: the reference's kernels, or the one library
kernel. `Prepacked` adds a weight folded into a library's layout once, at optimize
time (a constant-folding step), and never run stale.
"""

from __future__ import annotations

import copy

from torch import nn


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
        raise NotImplementedError


class Prepacked(FusedPattern):
    """Holds one weight prepacked into a library's layout, tied to its source tensor.

    The packed tensor is a folded constant: valid only while the source weight is the
    same tensor with the same version counter (an in-place write such as
    `load_state_dict` bumps it), so a changed weight is never run stale (ch. 4).
    """

    def _init_pack(self):
        self._pack = None  # (source weight, its _version, packed tensor, key)

    def packed(self, weight, key):
        p = self._pack
        if p is not None and p[0] is weight and p[1] == weight._version and p[3] == key:
            return p[2]
        return None

    def store_pack(self, weight, key, packed):
        """Keep `packed`, made from `weight` for `key` (the backend calls this)."""
        self._pack = (weight, weight._version, packed, key)

    @property
    def is_prepacked(self) -> bool:
        return self._pack is not None

    def __deepcopy__(self, memo):
        # oneDNN's opaque tensors cannot be copied; they are never written, so the
        # copy shares the packed tensor and points at the copy of its source weight
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        pack = self.__dict__.get("_pack")
        for k, v in self.__dict__.items():
            if k != "_pack":
                new.__dict__[k] = copy.deepcopy(v, memo)
        new._pack = None
        if pack is not None and pack[0]._version == pack[1]:
            src = copy.deepcopy(pack[0], memo)
            new._pack = (src, src._version, pack[2], pack[3])
        return new

    def __getstate__(self):  # pickling (torch.save): repacked on first use instead
        state = dict(self.__dict__)
        state["_pack"] = None
        return state
