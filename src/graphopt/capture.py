"""From a PyTorch model to a torch.fx graph, with shapes, dtypes and bytes on every node.

Introduced in chapter 1; chapter 2 compares every capture method side by side.

- `level="aten"` goes through `torch.export` (non-strict unless `strict=True`): the ops
  are aten operators such as `aten.conv2d`, parameters appear as `get_attr` nodes.
- `level="module"` goes through `torch.fx.symbolic_trace`: one node per submodule call
  (`conv1`, `bn1`) and Python operators (`operator.add`).

Also `autograd_graph(tensor)`: the dynamic graph autograd recorded behind a tensor.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.fx import GraphModule
from torch.fx.passes.shape_prop import ShapeProp

from .errors import CaptureError, InputError

_CONTROL_FLOW_HINT = (
    "The model's Python code branches or loops on tensor values, which a graph captured "
    "ahead of time cannot represent. Options (chapter 2, 'Control flow'): rewrite the "
    "branch with torch.cond, run it eagerly, or use torch.compile, which splits the "
    "model into several graphs at the branch (a graph break)."
)


def capture(model, *example_inputs, level: str = "aten", strict: bool = False) -> GraphModule:
    """Capture `model` as a GraphModule whose nodes carry shapes, dtypes and byte sizes.

    The caller's model is not changed. `example_inputs` must be tensors; they are used to
    record shapes (and, for `level="aten"`, to specialise the graph to them).
    """
    if level not in ("aten", "module"):
        raise ValueError(f"level must be 'aten' or 'module', not {level!r}")
    check_inputs(model, example_inputs)
    if level == "module":
        gm = _symbolic_trace(model)
    else:
        gm = _export(model, example_inputs, strict)
    try:
        annotate(gm, *example_inputs)
    except Exception as e:  # symbolic_trace never ran the model: shapes fail only now
        cause = e.__cause__ or e
        raise CaptureError(
            f"the captured graph failed on the example inputs: {type(cause).__name__}: "
            f"{_first_line(cause)}\nCheck that the model runs eagerly on these inputs "
            "(model(*inputs)).") from None
    return gm


def check_inputs(model, example_inputs) -> None:
    """Name any input that is not a tensor, or whose dtype the model cannot take."""
    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise InputError(
                f"example input {i} is a {type(x).__name__}, not a torch.Tensor. "
                f"Pass tensors, e.g. torch.as_tensor(value)."
            )
    if not isinstance(model, nn.Module):
        return
    param_dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if len(param_dtypes) != 1:
        return
    (want,) = param_dtypes
    for i, x in enumerate(example_inputs):
        if x.is_floating_point() and x.dtype != want:
            raise InputError(
                f"example input {i} has dtype {x.dtype} but the model's parameters are "
                f"{want}. Convert one of them, e.g. x.to({want}) or model.to({x.dtype})."
            )


def _symbolic_trace(model) -> GraphModule:
    try:
        return torch.fx.symbolic_trace(model)
    except torch.fx.proxy.TraceError as e:
        raise CaptureError(f"symbolic_trace failed: {_first_line(e)}\n{_CONTROL_FLOW_HINT}") from None
    except Exception as e:
        raise CaptureError(
            f"symbolic_trace failed with {type(e).__name__}: {_first_line(e)}\n"
            "Try level='aten' (torch.export), which traces with real shapes."
        ) from None


def _export(model, example_inputs, strict: bool) -> GraphModule:
    if not isinstance(model, nn.Module):
        model = _FunctionModule(model)
    # torch.export prints partial graphs to the log before it gives up; keep the
    # learner's screen for the one message that matters.
    with warnings.catch_warnings(), _quiet_torch_logs():
        warnings.simplefilter("ignore")
        try:
            exported = torch.export.export(model, tuple(example_inputs), strict=strict)
        except Exception as e:
            text = f"{type(e).__name__}: {e}"
            data_dependent = any(s in text for s in (
                "data-dependent", "Data-dependent", "GuardOnDataDependent",
                "data dependent", "control flow"))
            hint = _CONTROL_FLOW_HINT if data_dependent else (
                "Check that the model runs eagerly on these inputs; chapter 2 lists other "
                "capture methods (symbolic_trace, torch.compile) and what each supports.")
            raise CaptureError(
                f"torch.export (strict={strict}) could not capture the model: "
                f"{type(e).__name__}: {_first_line(e)}\n{hint}") from None
    gm = exported.module()
    gm.meta["exported_program"] = exported
    return gm


class _FunctionModule(nn.Module):
    """Wraps a plain function so that torch.export can take it."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


@contextlib.contextmanager
def _quiet_torch_logs():
    import logging

    loggers = [logging.getLogger(n) for n in ("torch._dynamo", "torch.fx.experimental",
                                               "torch.export", "torch._export",
                                               "torch._subclasses.fake_tensor")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def annotate(gm: GraphModule, *example_inputs) -> GraphModule:
    """Record shape, dtype and bytes on every node by running `gm` on the inputs.

    Uses torch.fx's ShapeProp, which stores a TensorMetadata in `node.meta["tensor_meta"]`;
    `graphopt.shape(node)` and friends read it. Returns `gm` for chaining.
    """
    # ShapeProp really runs the graph, and the graph shares its buffers with the
    # caller's model: in training mode BN would update the model's running statistics.
    buffers = list(gm.buffers())
    saved = [b.clone() for b in buffers]
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)
        for b, s in zip(buffers, saved):
            b.copy_(s)
    return gm


# ---------------------------------------------------------------- the autograd graph

@dataclass
class AutogradNode:
    """One node of the dynamic graph: a backward function, a leaf tensor, or the root."""

    id: str
    label: str
    role: str  # "root", "function" or "leaf"
    shape: tuple[int, ...] | None = None


@dataclass
class AutogradGraph:
    """The grad_fn graph behind a tensor, as plain data that `graphopt.draw` renders."""

    nodes: list[AutogradNode] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (input side, consumer)

    def __repr__(self) -> str:
        return f"AutogradGraph({len(self.nodes)} nodes, {len(self.edges)} edges)"


def autograd_graph(tensor: torch.Tensor, names: dict[str, torch.Tensor] | None = None) -> AutogradGraph:
    """Walk the backward functions behind `tensor` (the graph `backward()` will run).

    Nodes are numbered in breadth-first order from the output, so the same code gives the
    same graph every time. `names` labels leaf tensors, e.g. {"w": w, "b": b}.
    """
    if not isinstance(tensor, torch.Tensor):
        raise InputError(f"autograd_graph takes a tensor, not a {type(tensor).__name__}.")
    if tensor.grad_fn is None:
        raise InputError(
            "This tensor has no grad_fn: autograd recorded nothing behind it. Create the "
            "inputs with requires_grad=True and compute it outside torch.no_grad().")
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
            variable = getattr(fn, "variable", None)
            if variable is not None:  # AccumulateGrad: the gradient lands in a leaf
                label = leaf_names.get(id(variable), "leaf")
                graph.nodes.append(AutogradNode(ids[key], label, "leaf", tuple(variable.shape)))
            else:
                graph.nodes.append(AutogradNode(ids[key], type(fn).__name__, "function"))
        graph.edges.append((ids[key], consumer))
        if not seen:
            queue.extend((nxt, ids[key]) for nxt, _ in fn.next_functions if nxt is not None)
    return graph
