"""Dead-code elimination (死代码消除): remove nodes whose value nobody reads.

Introduced in chapter 5, where a rewrite leaves its old nodes behind and this pass
cleans up. A node is dead when it has no users and no side effects: placeholders,
the output, `_guards_fn` and impure or random ops (`graphopt.ops.is_impure`) always
stay. Walking the graph backwards removes whole dead chains in one sweep, because a
node's users always come after it.

Parameters and buffers that no `get_attr` reads any more are deleted from the module
as well, so their memory is freed (folding a Conv+BN pair leaves the old weights
unused until this pass runs).
"""

from __future__ import annotations

from torch.fx import GraphModule, Node

from ..aliasing import written_by
from .result import PassResult, finish, impure, working_copy


def eliminate_dead_code(gm: GraphModule, inplace: bool = False) -> PassResult:
    """Erase nodes without users or side effects, then unused weights (chapter 5)."""
    gm = working_copy(gm, inplace)
    removed = []
    for n in reversed(list(gm.graph.nodes)):
        if is_dead(n):
            removed.append(n.name)
            gm.graph.erase_node(n)
    delete_unused_attributes(gm)
    return finish(gm, removed[::-1])


def is_dead(n: Node) -> bool:
    """No user reads the node's value and running it changes nothing else (ch. 3).

    "Nothing else" includes memory written in place by an op that is not marked
    impure: a training-mode `aten.batch_norm` updates its running statistics even
    when nobody reads its output.
    """
    return not n.users and not impure(n) and not written_by(n)


def delete_unused_attributes(gm: GraphModule) -> list[str]:
    """Delete parameters, buffers and submodules that the graph no longer refers to.

    Introduced in chapter 3.
    """
    used = {
        str(n.target) for n in gm.graph.nodes if n.op in ("get_attr", "call_module")
    }
    modules = {str(n.target) for n in gm.graph.nodes if n.op == "call_module"}
    deleted = []
    names = [k for k, _ in gm.named_parameters(remove_duplicate=False)]
    names += [k for k, _ in gm.named_buffers(remove_duplicate=False)]
    for name in names:
        inside_used_module = any(name.startswith(m + ".") for m in modules)
        if name not in used and not inside_used_module and _delete(gm, name):
            deleted.append(name)
    gm.delete_all_unused_submodules()
    return deleted


def _delete(gm: GraphModule, name: str) -> bool:
    owner_name, _, attr = name.rpartition(".")
    owner = gm.get_submodule(owner_name) if owner_name else gm
    if not hasattr(owner, attr):
        return False
    delattr(owner, attr)
    return True
