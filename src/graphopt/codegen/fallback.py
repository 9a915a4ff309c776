"""Why a group runs its reference executor instead of a generated kernel (ch. 6).

`backend="auto"` falls back, with a KernelFallbackWarning saying why, when these
inputs have no generated kernel (`input_problem`: mixed or uncovered dtypes, mixed
devices, inputs that need autograd) or when Triton cannot run here (`triton_for`).
An explicitly requested backend raises instead: asking for numba or Triton and
silently getting eager would hide the very thing the reader asked to see.
"""

from __future__ import annotations

import torch

from ..errors import GraphoptError, NoGPUError
from ..i18n import _
from . import triton as triton_gen

DTYPES = (torch.float32, torch.float64)


class KernelFallbackWarning(UserWarning):
    """A fused group ran its reference executor instead of a generated kernel
    (ch. 6)."""


def triton_for(device: str, requested: str) -> tuple[str | None, str]:
    """("triton", "") where Triton can run on `device`, else (None, why); an error
    where "triton" was `requested` and cannot run (chapter 6)."""
    ok, why = triton_gen.available()
    if not ok:
        if requested == "triton":
            raise GraphoptError(why)
        return None, why
    if device != "cuda" and not triton_gen.interpreting():
        if device == "meta":
            return "triton", ""  # source only: nothing will be launched
        raise NoGPUError(_(
            "backend='triton' needs CUDA tensors; on a CPU-only machine set "
            "TRITON_INTERPRET=1 before the kernel is first compiled to use Triton's "
            "interpreter (slow; tiny inputs only), or use backend='numba'."))
    return "triton", ""


def input_problem(tensors) -> str:
    """Why a generated kernel cannot take these input tensors, or "" (chapter 6)."""
    if not tensors:
        return _("the group has no tensor inputs")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        return _("its inputs mix dtypes {dtypes}; cast them to one").format(
            dtypes=sorted(map(str, dtypes)))
    (dtype,) = dtypes
    if dtype not in DTYPES:
        return _("dtype {dtype} has no generated kernel (float32 and float64 "
                 "do)").format(dtype=dtype)
    if len({t.device for t in tensors}) != 1:
        return _("its inputs live on different devices")
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _("an input requires grad and generated kernels have no backward; "
                 "run under torch.no_grad() for inference")
    return ""
