"""The dynamic graph autograd records behind a tensor (chapter 1, "two kinds of graph").

`autograd_graph(tensor)` walks `grad_fn` back to the leaves; `graphopt.draw` renders
the result. Re-exported by `graphopt.capture`, where it used to live.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .errors import InputError


@dataclass
class AutogradNode:
    """One node of the dynamic graph: a backward function, a leaf tensor or the root.

    Introduced in chapter 1.
    """

    id: str
    label: str
    role: str  # "root", "function" or "leaf"
    shape: tuple[int, ...] | None = None


@dataclass
class AutogradGraph:
    """The grad_fn graph behind a tensor, as plain data that `graphopt.draw` renders.

    Introduced in chapter 1.
    """

    nodes: list[AutogradNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (input side, consumer)

    def __repr__(self) -> str:
        return f"AutogradGraph({len(self.nodes)} nodes, {len(self.edges)} edges)"


def autograd_graph(
    tensor: torch.Tensor, names: dict[str, torch.Tensor] | None = None
) -> AutogradGraph:
    """Walk the backward functions behind `tensor` (the graph `backward()` will run).

    Nodes are numbered in breadth-first order from the output, so the same code gives
    the same graph every time. `names` labels leaf tensors, e.g. {"w": w, "b": b}.

    Introduced in chapter 1.
    """
    _check_tensor(tensor)
    leaf_names = {id(t): n for n, t in (names or {}).items()}
    graph = AutogradGraph()
    ids: dict[int, str] = {}
    out_id = "out"
    graph.nodes.append(AutogradNode(out_id, "output", "root", tuple(tensor.shape)))
    queue = [(tensor.grad_fn, out_id)]
    while queue:
        fn, consumer = queue.pop(0)
        key = id(fn)
        seen = key in ids
        if not seen:
            ids[key] = f"n{len(ids)}"
            graph.nodes.append(_node(fn, ids[key], leaf_names))
        graph.edges.append((ids[key], consumer))
        if not seen:
            queue.extend(
                (nxt, ids[key]) for nxt, _ in fn.next_functions if nxt is not None
            )
    return graph


def _check_tensor(tensor) -> None:
    """Refuse what has no autograd graph behind it, saying how to get one."""
    if not isinstance(tensor, torch.Tensor):
        raise InputError(
            f"autograd_graph takes a tensor, not a {type(tensor).__name__}."
        )
    if tensor.grad_fn is None:
        raise InputError(
            "This tensor has no grad_fn: autograd recorded nothing behind it. "
            "Create the inputs with requires_grad=True and compute it outside "
            "torch.no_grad()."
        )


def _node(fn, node_id: str, leaf_names: dict[int, str]) -> AutogradNode:
    """One backward function as a node; AccumulateGrad becomes the leaf it fills."""
    variable = getattr(fn, "variable", None)
    if variable is not None:  # AccumulateGrad: the gradient lands in a leaf
        label = leaf_names.get(id(variable), "leaf")
        return AutogradNode(node_id, label, "leaf", tuple(variable.shape))
    return AutogradNode(node_id, type(fn).__name__, "function")
