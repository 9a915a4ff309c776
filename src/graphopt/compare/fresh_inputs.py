"""Fresh inputs: new values with the example's shapes, to catch a wrong capture.

Chapter 2: torch.jit.trace records the branch one run took. On the example inputs the
trace agrees with eager; on inputs that take the other branch it does not. Each captured
form is therefore checked against eager on fresh inputs, never on the example.
"""

from __future__ import annotations

import torch

from ..capture import _first_line
from ..errors import InputError
from ..i18n import _
from ..torch_internals import tree_flatten
from .quiet import quiet
from .table import CaptureRow


def make_fresh_inputs(inputs, seed: int = 1234) -> list[tuple]:
    """Two input tuples shaped like `inputs`: a random draw and its negation."""
    g = torch.Generator().manual_seed(seed)
    draw = tuple(_random_like(x, g) for x in inputs)
    negated = tuple(-x if x.is_floating_point() else x.clone() for x in draw)
    return [draw, negated]


def _random_like(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    if x.is_floating_point():
        return torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device)
    if x.dtype == torch.bool:
        return (torch.rand(x.shape, generator=g) > 0.5).to(x.device)
    low, high = (int(x.min()), int(x.max()) + 1) if x.numel() else (0, 1)
    return torch.randint(low, high, x.shape, generator=g, dtype=x.dtype).to(x.device)


def check_fresh(fresh_inputs, count: int) -> None:
    """Fresh inputs are a list of input tuples, one tuple per call."""
    for i, xs in enumerate(fresh_inputs):
        if not isinstance(xs, (tuple, list)) or len(xs) != count or not all(
                isinstance(x, torch.Tensor) for x in xs):
            raise InputError(
                f"fresh_inputs[{i}] must be a tuple of {count} tensor(s), one per "
                "model input, e.g. fresh_inputs=[(x2,)] for a one-input model.")


def eager_outputs(model, fresh_inputs) -> list | None:
    """Eager results on the fresh inputs, or None if the model itself fails on them."""
    try:
        with quiet(), torch.no_grad():
            return [model(*xs) for xs in fresh_inputs]
    except Exception:
        return None


def check_row(row: CaptureRow, fresh_inputs, reference, rtol, atol) -> None:
    """Set `row.matches_eager` (and a note) by running its callable on fresh inputs."""
    try:
        with quiet(), torch.no_grad():
            got = [row.module(*xs) for xs in fresh_inputs]
        row.matches_eager = all(_allclose(a, b, rtol, atol)
                                for a, b in zip(got, reference))
        if not row.matches_eager:
            row.note = _("silently wrong on fresh inputs: differs from eager")
    except Exception as e:  # e.g. a shape guard: the captured form is not general
        row.matches_eager = False
        row.fresh_error = f"{type(e).__name__}: {_first_line(e)}"
        row.note = _("raises on fresh inputs: {error}").format(error=row.fresh_error)


def _allclose(a, b, rtol, atol) -> bool:
    fa, fb = tree_flatten(a)[0], tree_flatten(b)[0]
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or not torch.allclose(x, y, rtol=rtol, atol=atol):
                return False
        elif x != y:
            return False
    return True
