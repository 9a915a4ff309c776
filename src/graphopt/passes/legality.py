"""Named legality checks that the fusion and folding passes quote (chapter 4).

A rewrite is only allowed when these say yes; each is small enough to read in the
book, and each guards a real way a rewrite goes wrong.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.fx import Node

from ..aliasing import is_written, memory_key, written_by
from ..i18n import note
from ..ops import _submodule, op_name, shape
from .result import impure


def single_consumer(n: Node) -> bool:
    """Exactly one node reads `n`: rewriting it away cannot starve another reader.

    Introduced in chapter 4.
    """
    return len(n.users) == 1


def has_no_side_effects(*nodes: Node) -> bool:
    """None of the nodes is random, mutates memory or is otherwise impure (ch. 4)."""
    return not any(impure(n) for n in nodes)


def not_mutated(n: Node, written: set | None = None) -> bool:
    """No in-place op writes `n`'s value, or any value that shares its memory.

    The "has no side effects" rule seen from the value's side (chapter 3): in
    `acc = torch.zeros(4); acc += x` the zeros look constant, but `+=` writes them on
    every call, so a folded buffer would keep the sum of every call so far. Views
    count too: writing `w.t()` writes `w`. `written` is `aliasing.written_values(graph)`
    computed once by a pass that asks about many nodes.
    """
    return not is_written(n, written)


def is_training(gm) -> bool:
    """The model was captured in training mode (`model.train()`), chapter 3.

    Then its parameters change after every optimiser step and batch norm uses the
    batch's statistics: nothing that reads a parameter or a BN may be folded.
    """
    flag = getattr(gm, "meta", {}).get("training")
    if flag is not None:  # capture records the model's own flag
        return bool(flag)
    # a graph built by hand: training when a mode-dependent op says so
    modal = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd)
    if any(isinstance(m, modal) and m.training for m in gm.modules()):
        return True
    return any(_training_flag(n) for n in gm.graph.nodes if n.op == "call_function")


def _training_flag(n: Node) -> bool:
    """aten.batch_norm(..., training, ...) and aten.dropout(x, p, train)."""
    where = {"batch_norm": 5, "dropout": 2}.get(op_name(n))
    return where is not None and len(n.args) > where and bool(n.args[where])


def is_eval_mode(bn: Node) -> bool:
    """A batch-norm node uses running statistics (eval), so it is a fixed affine map.

    Introduced in chapter 4.
    """
    if bn.op == "call_module":
        m = _submodule(bn)
        return (isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.training
                and m.track_running_stats and m.running_mean is not None)
    name = op_name(bn)
    if name == "_native_batch_norm_legit_no_training":
        return True
    if name == "batch_norm":
        training = bn.args[5] if len(bn.args) > 5 else bn.kwargs.get("training", True)
        return training is False
    return False


def same_shape(a: Node, b: Node) -> bool:
    """Both nodes have a known output shape and the shapes are equal (no broadcast).

    Introduced in chapter 4.
    """
    return shape(a) is not None and shape(a) == shape(b)


def moves_past_a_write(members: set[Node], index: dict[Node, int]) -> str:
    """Why fusing `members` would read memory after it is written, or "" (ch. 4).

    The fused node runs where the group's last member was, so every member moves
    there. A node in between that writes in place what a member reads (an input
    written by `x.zero_()`, or a view of it) would then run first, and the member
    would read the new values. Only the span between a member and the last member
    is searched.
    """
    last = max(index[m] for m in members)
    for m in members:
        reads = {memory_key(a) for a in m.all_input_nodes}
        n = m.next
        while index.get(n, last) < last:
            if n not in members and any(memory_key(w) in reads for w in written_by(n)):
                return note("{writer} writes what {reader} reads", writer=n.name,
                            reader=m.name)
            n = n.next
    return ""


def creates_cycle(members: set[Node], index: dict[Node, int]) -> bool:
    """True when a path leaves the group and comes back into it (ch. 4).

    Such a group cannot become one node: the fused node would have to run both before
    and after the outside node on that path. Only nodes between the group's first and
    last position (`index`, a topological order) can lie on such a path, so the
    search never looks further: cost grows with the group's span, not the graph.
    """
    last = max(index[m] for m in members)
    stack = [u for m in members for u in m.users if u not in members]
    seen: set[Node] = set()
    while stack:
        n = stack.pop()
        if n in seen or index.get(n, last + 1) > last:
            continue
        seen.add(n)
        for u in n.users:
            if u in members:
                return True
            stack.append(u)
    return False


def is_constant_tensor(n, root: nn.Module) -> bool:
    """`n` is None, a tensor, or a get_attr node whose value is a tensor (a weight).

    Introduced in chapter 4.
    """
    if n is None or isinstance(n, torch.Tensor):
        return True
    return isinstance(n, Node) and n.op == "get_attr" and isinstance(
        _fetch(root, str(n.target)), torch.Tensor)


def _fetch(root: nn.Module, target: str):
    obj = root
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj
