"""The shape guard: a captured graph refuses inputs of shapes it was not captured for.

Introduced in chapter 2. `capture` installs it in place of torch.export's own input
check (`gm._guards_fn`), so the error says what to do.
"""

from __future__ import annotations

import torch
from torch import nn

from .errors import ShapeError, first_line
from .torch_internals import tree_leaves


class ShapeGuard(nn.Module):
    """torch.export's input check, with a graphopt error that says what to do (ch. 2).

    An exported graph is specialised to the example inputs' shapes (a reshape to
    (1, 512) is baked in); called with another shape it must refuse, not compute.

    Export's guards are asserts on input sizes and on the Python values the graph
    was specialised to, run through torch._dynamo's machinery (some 25 Python
    frames, ~25 µs). They held on the examples, so inputs of the examples' types,
    sizes and values pass them too: that is checked first, in one comparison of
    two tuples, and only other inputs run export's guards.
    """

    def __init__(self, guards, args, kwargs):
        super().__init__()
        self.guards = guards
        self.expected = ", ".join(
            [f"{tuple(a.shape)}" for a in args if isinstance(a, torch.Tensor)]
            + [f"{k}={tuple(v.shape)}" for k, v in kwargs.items()
               if isinstance(v, torch.Tensor)])
        # export's placeholders, in order: the leaves of (args, kwargs)
        flat = tree_leaves((tuple(args), dict(kwargs)))
        self.types = tuple(map(type, flat))
        self.key = _guard_key(flat)

    def forward(self, *args, **kwargs):
        if not kwargs and tuple(map(type, args)) == self.types and \
                _guard_key(args) == self.key:
            return None  # as the examples: export's guards held on these
        try:
            return self.guards(*args, **kwargs)
        except AssertionError as e:
            raise ShapeError(
                f"this graph was captured for inputs of shape {self.expected} and "
                f"cannot run on these ({first_line(e)}). A captured graph is "
                "specialised to its example inputs' shapes: capture or optimize the "
                "model again with an example of the new shape, e.g. "
                "graphopt.optimize(model, x_new). (torch.export's dynamic_shapes would "
                "keep a dimension symbolic; graphopt's passes assume fixed shapes.)"
            ) from None


def _guard_key(values) -> list:
    """What export's guards read of each input: a tensor's size, a Python value."""
    return [a.shape if isinstance(a, torch.Tensor) else a for a in values]
