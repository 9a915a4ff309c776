"""Numerical equivalence of two graphs (or models) on the same inputs.

Introduced in chapter 3 and used after every pass in chapters 3-5 and by every test:
a pass is only correct if the optimised graph computes what the original computed.
Tolerances depend on the dtype, because a rewrite such as Conv+BN folding changes the
order of floating-point operations and so the last bits of the result, while integer
and boolean results must match exactly.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten

from .errors import InputError, NotEquivalentError
from .state import copies, preserved

# (rtol, atol) per floating dtype; atol is scaled by the largest reference magnitude,
# so a folded conv whose outputs are around 100 is judged like one around 1.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-9),
}


def equivalent(a: Callable, b: Callable, inputs: Any, *, rtol: float | None = None,
               atol: float | None = None, raise_on_mismatch: bool = False) -> bool:
    """True when `a(*inputs)` and `b(*inputs)` agree within dtype-aware tolerances.

    `a` and `b` are GraphModules, models or functions; `inputs` is a tensor, a
    sequence of tensors, or a dict of keyword inputs (`{"input_ids": ids}`). Both run
    from the same state: copies of the inputs, the same random seed (dropout draws
    the same masks), and what a run writes (buffers) is undone, so checking changes
    neither model. With `raise_on_mismatch=True` a disagreement raises
    NotEquivalentError naming the output and the largest difference.
    """
    args, kwargs = (), inputs
    if not isinstance(inputs, dict):
        args, kwargs = _as_args(inputs), {}
    outs = []
    for f in (a, b):  # same state for both: input copies, same seed, writes undone
        with torch.no_grad(), preserved(f, seed=0):
            outs.append(f(*copies(args), **copies(kwargs)))
    out_a, out_b = outs
    problem = mismatch(out_a, out_b, rtol=rtol, atol=atol)
    if problem is not None and raise_on_mismatch:
        raise NotEquivalentError(problem + " Check the last pass that changed the graph.")
    return problem is None


def mismatch(out_a: Any, out_b: Any, *, rtol: float | None = None,
             atol: float | None = None) -> str | None:
    """Describe the first difference between two output structures, or None."""
    flat_a, spec_a = tree_flatten(out_a)
    flat_b, spec_b = tree_flatten(out_b)
    if len(flat_a) != len(flat_b):
        return f"the outputs differ in structure: {spec_a} vs {spec_b}."
    for i, (x, y) in enumerate(zip(flat_a, flat_b)):
        problem = _compare(x, y, rtol, atol)
        if problem is not None:
            return f"output {i}: {problem}"
    return None


def _compare(x: Any, y: Any, rtol: float | None, atol: float | None) -> str | None:
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        return None if x == y else f"{x!r} != {y!r}."
    if x.shape != y.shape:
        return f"shapes differ: {tuple(x.shape)} vs {tuple(y.shape)}."
    if x.dtype != y.dtype:
        return f"dtypes differ: {x.dtype} vs {y.dtype}."
    if not x.is_floating_point() and not x.is_complex():
        return None if torch.equal(x, y) else "integer/bool values differ."
    default_rtol, default_atol = TOLERANCES.get(x.dtype, (1e-4, 1e-5))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    finite = x[torch.isfinite(x)]
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    x64, y64 = x.double(), y.double()
    if torch.allclose(x64, y64, rtol=rtol, atol=atol * scale, equal_nan=True):
        return None
    diff = (x64 - y64).abs().nan_to_num(float("inf"))
    worst = int(diff.argmax())
    return (f"max abs difference {float(diff.max()):.3g} at flat index {worst} "
            f"({float(x64.flatten()[worst]):.6g} vs {float(y64.flatten()[worst]):.6g}; "
            f"rtol={rtol}, atol={atol * scale:.3g}).")


def _as_args(inputs: Any) -> tuple:
    if isinstance(inputs, torch.Tensor):
        return (inputs,)
    if isinstance(inputs, Sequence) and not isinstance(inputs, str):
        return tuple(inputs)
    raise InputError(f"inputs must be a tensor or a sequence of tensors, "
                     f"not a {type(inputs).__name__}.")


def random_like(inputs: Any, seed: int = 0) -> tuple | dict:
    """Fresh random inputs like `inputs`: same shapes, dtypes and ranges (seeded).

    A pass that is right only on the example inputs is wrong: check on new data too.
    New values stay valid for the model: integer inputs (token ids) are drawn from the
    example's own [min, max], so they remain valid ids; 0/1 masks (bool, integer or
    float) stay 0/1 masks; non-negative floats (images, scales) stay in the example's
    [min, max]; other floats are standard normal. Non-tensors are passed through.
    """
    gen = torch.Generator().manual_seed(seed)
    if isinstance(inputs, dict):
        return {k: _fresh(v, gen) for k, v in inputs.items()}
    return tuple(_fresh(x, gen) for x in _as_args(inputs))


def _fresh(x: Any, gen: torch.Generator) -> Any:
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return x
    if x.dtype == torch.bool:
        return torch.randint(0, 2, x.shape, generator=gen).bool()
    if x.is_complex():
        return torch.randn(x.shape, generator=gen, dtype=x.dtype)
    lo, hi = float(x.min()), float(x.max())
    if not x.is_floating_point():
        return torch.randint(int(lo), int(hi) + 1, x.shape, generator=gen).to(x.dtype)
    if bool(((x == 0) | (x == 1)).all()):  # a float mask stays a mask
        return torch.randint(0, 2, x.shape, generator=gen).to(x.dtype)
    if lo >= 0:
        u = torch.rand(x.shape, generator=gen, dtype=torch.float64)
        return (lo + (hi - lo) * u).to(x.dtype)
    return torch.randn(x.shape, generator=gen, dtype=x.dtype)
