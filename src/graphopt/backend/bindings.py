"""torch's Python bindings in place of aten overloads, where they are the same (ch. 7).

fx's graph names each aten op by its overload (`aten.add.Tensor`); calling the
overload object goes through its own argument handling, and on a tiny tensor that
is a good part of the op's cost. `torch.add` reaches the same C++ kernel through
torch's generated argument parser, the way eager PyTorch calls it. The wrapper's
function calls the binding only where it provably dispatches to the very overload
in the graph, with the same arguments: a short table, and arguments that are a
tensor, then tensors or Python numbers, and only the keywords listed.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.fx import Node


def _bindings() -> dict:
    """aten overload -> (torch's Python function, the keywords it may be given)
    (ch. 7).

    For these arguments (a tensor, then tensors or Python numbers) each function
    dispatches to exactly that overload (tests/test_wrapper.py checks it under a
    dispatch mode), and its C++ argument parser costs less per call than the
    overload object's (about 1.1 against 1.7 us for an add on a small tensor)."""
    aten = torch.ops.aten
    return {aten.add.Tensor: (torch.add, {"alpha"}),
            aten.sub.Tensor: (torch.sub, {"alpha"}),
            aten.mul.Tensor: (torch.mul, set()), aten.div.Tensor: (torch.div, set()),
            aten.relu.default: (torch.relu, set())}


BINDINGS = _bindings()


def _number(a) -> bool:
    """A Python int or float (ch. 7)."""
    return type(a) in (int, float)  # not bool: another overload may take it


def binding(node: Node) -> Callable | None:
    """torch's Python function for an aten node where it provably calls the same
    overload with the same arguments (`BINDINGS`), else None: the overload (ch. 7)."""
    function, keywords = BINDINGS.get(node.target, (None, set()))
    args = node.args
    if function is None or not args or not isinstance(args[0], Node):
        return None
    if not all(isinstance(a, Node) or _number(a) for a in args[1:]):
        return None
    if not set(node.kwargs) <= keywords or not all(
            _number(v) for v in node.kwargs.values()):
        return None
    return function
