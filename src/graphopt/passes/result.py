"""What every pass returns, and the steps every pass shares (copy, check, recompile).

Introduced in chapter 5. A pass is a function `GraphModule -> PassResult`. Unless the
caller says `inplace=True` it works on a copy, so the caller's model, parameters
and buffers are never touched: rewriting a graph should never change the weights a
user holds. The copy shares the frozen weights the graph only reads (a pass never
writes a weight: one that makes new weights, as Conv+BN folding does, registers new
tensors), so a stage of a model nobody trains costs the memory of what it changed,
not a copy of the whole model. Trainable weights are copied: an optimizer updates
them in place, and a step on one stage must not reach another, or the caller's.

Shape metadata: a pass copies `node.meta` from the node each new node replaces (a
folded constant records its value's shape), so `graphopt.shape(node)` stays right
without running the graph again.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.fx import GraphModule, Node

from ..aliasing import written_values
from ..errors import InputError
from ..i18n import _
from ..ops import is_impure
from ..torch_internals import fake_mode_of, new_fake_mode, set_graph, tensor_metadata


@dataclass
class PassResult:
    """A new GraphModule plus the names of the nodes a pass removed, added and rewrote.

    `notes` has one readable line per thing the pass left alone on purpose and why,
    e.g. "fold_constants: kept embedding (reads parameter pos.weight: training mode)".

    Introduced in chapter 3.
    """

    module: GraphModule
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.added or self.rewritten)

    def __repr__(self) -> str:
        return (f"PassResult(changed={self.changed}, removed={self.removed}, "
                f"added={self.added}, rewritten={self.rewritten}"
                + (f", notes={self.notes}" if self.notes else "") + ")")


def working_copy(gm: GraphModule, inplace: bool, codegen: bool = True,
                 share_weights: bool = True) -> GraphModule:
    """`gm` itself when inplace, else a copy whose graph and modules are its own.

    The copy shares with `gm` every weight the graph reads and never writes
    (`read_only_weights`) that needs no gradient: no pass or call writes those, so
    sharing them loses nothing, and a chain of stages of a frozen model (the pass
    explorer's, `explorer.engine`) holds one copy of its weights instead of one per
    pass. A pass that changes a weight makes a new tensor (`add_constant`) and never
    writes one in place. A weight with `requires_grad` is copied: an optimizer step
    on one stage writes it in place. `share_weights=False` copies everything (a
    reader's pass that may break that rule gets such a copy from the pipeline).

    `codegen=False` skips generating the copy's Python code (seconds for a 100k-node
    graph): the copy must then be recompiled before it is called (pipeline.py does).

    Introduced in chapter 3.
    """
    gm = getattr(gm, "graph_module", gm)  # the backend's wrapper: its graph module
    if not isinstance(gm, GraphModule):
        raise InputError(_(
            "passes take a torch.fx.GraphModule, not a {type}; capture the model "
            "first: gm = graphopt.capture(model, x), or use graphopt.optimize."
        ).format(type=type(gm).__name__))
    if inplace:
        return gm
    # The exported program and the example inputs are read, never written: share them
    # instead of copying (copying an ExportedProgram is slow and not needed).
    memo = {id(v): v for v in getattr(gm, "meta", {}).values()}
    if share_weights:
        memo.update({id(t): t for t in read_only_weights(gm) if not t.requires_grad})
    with warnings.catch_warnings():  # torch's pytree specs warn when deep-copied
        warnings.simplefilter("ignore", FutureWarning)
        return copy.deepcopy(gm, memo) if codegen else _copy_without_codegen(gm, memo)


def read_only_weights(gm: GraphModule) -> list[torch.Tensor]:
    """The tensors `gm`'s graph reads (get_attr) and no node writes in place (ch. 3).

    Written ones (a training batch norm's running statistics, a counter buffer, as
    `aliasing.written_values` finds them) are left out, and so are the weights of
    modules the graph calls (`call_module`): their forward may write them unseen.
    """
    written = {key[1] for key in written_values(gm.graph) if key[0] == "attr"}
    shared = {}
    for n in gm.graph.nodes:
        if n.op != "get_attr" or str(n.target) in written:
            continue
        owner, _dot, name = str(n.target).rpartition(".")
        try:
            t = getattr(gm.get_submodule(owner) if owner else gm, name)
        except AttributeError:
            continue  # a dangling get_attr: lint reports it, the copy needs nothing
        if type(t) in (torch.Tensor, nn.Parameter):  # not a subclass with state
            shared[id(t)] = t
    return list(shared.values())


def _copy_without_codegen(gm: GraphModule, memo: dict) -> GraphModule:
    """What GraphModule.__deepcopy__ does, minus the code generation."""
    new = type(gm).__new__(type(gm))  # a fresh per-instance class, as torch makes
    memo[id(gm)] = new
    graph = copy.deepcopy(gm.graph)
    skip = ("_graph", "_code")
    new.__dict__.update(copy.deepcopy(
        {k: v for k, v in gm.__dict__.items() if k not in skip}, memo))
    set_graph(new, graph)
    graph.owning_module = new
    return new


def finish(gm: GraphModule, removed=(), added=(), rewritten=(),
           recompile: bool = True) -> PassResult:
    """Check the graph's invariants, regenerate its code and package the result.

    Introduced in chapter 3.
    """
    if not _DEFERRED.get():  # the pipeline lints and recompiles once at the end
        gm.graph.lint()
        if recompile:
            gm.recompile()
    return PassResult(gm, _names(removed), _names(added), _names(rewritten))


def _names(nodes) -> list[str]:
    out, seen = [], set()
    for n in nodes:
        name = n.name if isinstance(n, Node) else str(n)
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


# The pipeline runs several passes on one working copy; regenerating Python code for
# a 100k-node graph after every pass costs seconds, so it asks for one recompile at
# the end instead, inside `deferred_recompile()` (see pipeline.py). A context
# variable, set only inside that block: a pass called on its own always finishes.
_DEFERRED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "graphopt_deferred_recompile", default=False)


@contextlib.contextmanager
def deferred_recompile(on: bool = True):
    """Inside the block, `finish` skips lint and recompile (ch. 5): the caller
    promises to lint and recompile the graph once, after the last pass."""
    token = _DEFERRED.set(on)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def free_name(gm: GraphModule, base: str) -> str:
    """The first of `base`, `base_1`, `base_2`, ... that `gm` does not hold (ch. 3)."""
    name, i = base, 1
    while hasattr(gm, name):
        name, i = f"{base}_{i}", i + 1
    return name


def add_constant(gm: GraphModule, name: str, value: torch.Tensor) -> str:
    """Register `value` as a new buffer on `gm` under a free name based on `name`
    (chapter 3)."""
    target = free_name(gm, name.replace(".", "_"))
    gm.register_buffer(target, value)
    return target


def copy_meta(src: Node, dst: Node) -> None:
    """Give `dst` the shape metadata of the node it replaces (ch. 3)."""
    for key in ("val", "tensor_meta"):
        if key in src.meta:
            dst.meta[key] = src.meta[key]


def set_value_meta(node: Node, value) -> None:
    """Record shape and dtype of a value a pass computed (a folded constant) (ch. 3).

    Both keys a captured node carries: `tensor_meta` (ShapeProp's) and `val` (a fake
    tensor, as torch.export records: shape, dtype and strides, no memory).
    """
    if isinstance(value, torch.Tensor):
        node.meta["tensor_meta"] = tensor_metadata(value)
        node.meta["val"] = fake_value(node.graph, value)


def fake_value(graph, value: torch.Tensor):
    """A fake tensor like `value`, in the graph's own fake mode when it has one.

    Introduced in chapter 3.
    """
    val = next((n.meta["val"] for n in graph.nodes
                if isinstance(n.meta.get("val"), torch.Tensor)), None)
    mode = fake_mode_of([val]) if val is not None else None
    with warnings.catch_warnings():  # static: a constant's shape is known (in
        warnings.simplefilter("ignore")  # export's mode it would get symbols)
        return (mode or new_fake_mode()).from_tensor(value.detach(),
                                                     static_shapes=True)


def label(n: Node) -> str:
    """A node as a reader knows it: `batch_norm in layer1.0.bn1` when torch.export
    recorded the submodule it came from, else its name. Used in `PassResult.notes`.

    Introduced in chapter 3.
    """
    stack = n.meta.get("nn_module_stack") or {}
    path = list(stack.values())[-1][0] if stack else ""
    return f"{n.name} in {path}" if path else n.name


def topo_index(gm: GraphModule) -> dict[Node, int]:
    """Each node's position in the graph, which is always a topological order.

    Introduced in chapter 3.
    """
    return {n: i for i, n in enumerate(gm.graph.nodes)}


def drop_unused_weights(gm: GraphModule, nodes, module_targets=()) -> list[Node]:
    """Erase the given get_attr nodes that nothing reads, and free what they pointed at.

    A rewrite that replaces ops leaves their weights behind (the BN's statistics after
    Conv+BN folding). Dropping them here keeps the model's memory honest; submodules
    in `module_targets` that no node calls any more are deleted too (ch. 3).
    """
    erased = [n for n in dict.fromkeys(nodes)
              if n.op == "get_attr" and not n.users and n.graph is gm.graph]
    for n in erased:
        gm.graph.erase_node(n)
    targets = [str(n.target) for n in erased] + [str(t) for t in module_targets]
    if targets:
        _delete_unreferenced(gm, targets)
    return erased


def _delete_unreferenced(gm: GraphModule, targets) -> None:
    used = {
        str(n.target) for n in gm.graph.nodes if n.op in ("get_attr", "call_module")
    }
    # every module path above a used name is needed too ("conv1" for "conv1.weight")
    above = {u.rsplit(".", i)[0] for u in used for i in range(1, u.count(".") + 1)}
    for t in dict.fromkeys(targets):
        owners = {t.rsplit(".", i)[0] for i in range(1, t.count(".") + 1)}
        if t in used or t in above or owners & used:
            continue
        owner_name, _dot, attr = t.rpartition(".")
        try:
            owner = gm.get_submodule(owner_name) if owner_name else gm
        except AttributeError:
            continue
        if hasattr(owner, attr):
            delattr(owner, attr)


_IMPURE: dict = {}


def impure(n: Node) -> bool:
    """`graphopt.ops.is_impure`, remembered per op (for a call, only the op decides).

    Passes ask it for every node; asking torch's registries afresh each time made
    purity checks the slowest part of a 100k-node pipeline (ch. 3).
    """
    if n.op not in ("call_function", "call_method"):
        return is_impure(n)
    key = (n.op, n.target)
    try:
        return _IMPURE[key]
    except KeyError:
        _IMPURE[key] = result = is_impure(n)
        return result
    except TypeError:  # an unhashable target
        return is_impure(n)
