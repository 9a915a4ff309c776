"""The backend's slot for a prepacked weight on a fused module (chapters 4, 7).

A `Pack` is what `prepack` stores as a pattern module's `_pack`: the source weight,
its version when packed (`torch_internals.version`: counter and address), the packed
tensor (a oneDNN blocked layout, an MKL packed GEMM), the key it was packed for (an
input shape, or rows) and the storage it was packed from, kept alive. It is a
folded constant, valid only while the source weight is the same tensor with the
same version (an in-place write such as `load_state_dict` bumps it, `p.data = w`
moves it), so a changed weight is never run stale
(`passes.prepacked.Prepacked.packed` checks that).

How the pack survives copies is the backend's business, so it lives here, not on
the module class the passes create: oneDNN's opaque tensors cannot be copied, and
they are never written, so a deep copy shares the packed tensor and points at the
copy of its source weight (or drops a pack already stale); pickling (`torch.save`)
drops it, and the kernel repacks on first use instead.
"""

from __future__ import annotations

import copy

import torch

from ..torch_internals import version


class Pack(tuple):
    """(source weight, its version, packed tensor, key, the source's storage),
    copied as described above (chapter 7)."""

    def __new__(cls, weight: torch.Tensor, key, packed) -> "Pack":
        return super().__new__(cls, (weight, version(weight), packed, key,
                                     weight.detach()))  # its storage, kept

    def __deepcopy__(self, memo):
        source, made, packed, key, _ = self
        if version(source) != made:
            return None  # stale: the copy repacks on first use
        return Pack(copy.deepcopy(source, memo), key, packed)

    def __reduce__(self):
        return _dropped, ()


def _dropped():
    return None


def store(module, weight: torch.Tensor, key, packed) -> None:
    """Keep `packed`, made from `weight` for `key`, on `module` (chapter 7)."""
    module._pack = Pack(weight, key, packed)
