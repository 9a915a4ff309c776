"""From a PyTorch model to a torch.fx graph, with shapes, dtypes and bytes on each node.

Introduced in chapter 1; chapter 2 compares every capture method side by side.

- `level="aten"` goes through `torch.export` (non-strict unless `strict=True`): the ops
  are aten operators such as `aten.conv2d`, parameters appear as `get_attr` nodes.
- `level="module"` goes through `torch.fx.symbolic_trace`: one node per submodule call
  (`conv1`, `bn1`) and Python operators (`operator.add`).

Also `autograd_graph(tensor)` (in `dynamic_graph.py`): the dynamic graph autograd
recorded behind a tensor.
The input check a captured graph runs, `ShapeGuard`, is in `shape_guard.py`.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import warnings

import torch
from torch import nn
from torch.fx import GraphModule
from torch.fx.passes.shape_prop import ShapeProp

from . import state
from .aliasing import written_values
from .dynamic_graph import AutogradGraph, AutogradNode, autograd_graph  # noqa: F401
from .errors import CaptureError, GraphoptError, InputError, first_line
from .errors import first_line as _first_line  # noqa: F401 - compare/ imports it
from .functionalization import functionalize_graph
from .shape_guard import ShapeGuard

_CONTROL_FLOW_HINT = (
    "The model's Python code branches or loops on tensor values, which a graph "
    "captured ahead of time cannot represent. Options (chapter 2, 'Control flow'): "
    "rewrite the branch with torch.cond, run it eagerly, or use torch.compile, "
    "which splits the model into several graphs at the branch (a graph break)."
)
_TRACE_HINT = (
    "symbolic_trace runs forward with placeholder values that have no shape or "
    "data, so any Python code that looks at a tensor (`if x.shape[0] > 1`, "
    "`for t in x`, `len(x)`, `x.size(1) == n`, as Hugging Face models do) fails, "
    "even when it branches on shapes, not data. Use level='aten' (torch.export "
    "traces with real shapes); for Hugging Face models"
    " transformers.utils.fx.symbolic_trace also works."
)
_CACHE_HINT = (
    "The model returns a cache object (Hugging Face's past_key_values, returned when "
    "use_cache=True, the default for GPT-2 and Llama), which a graph cannot output. "
    "Pass use_cache=False with the inputs, e.g. optimize(model, input_ids=ids, "
    "use_cache=False) or set model.config.use_cache = False."
)


def capture(model, *example_inputs, level: str = "aten", strict: bool = False,
            **example_kwargs) -> GraphModule:
    """Capture `model` as a GraphModule whose nodes carry shapes, dtypes and byte sizes.

    Inputs are given as the model takes them: `capture(bert, input_ids=ids,
    attention_mask=mask)` works like `bert(input_ids=ids, attention_mask=mask)`. They
    are used to record shapes and, for `level="aten"`, to specialise the graph to them.
    The caller's model, inputs and random state are not changed, and the graph owns
    copies of the model's buffers: running it never writes the caller's model.
    At aten level in-place ops that nothing else can see become functional ones
    (`passes.functionalize`), and `gm.meta["training"]` records the model's mode.
    Bounded: ResNet-18 64x64 460 MiB RSS, 1168 MiB address space, 16 s on 2 cores
    (README: Bounds).

    Introduced in chapters 1-2.
    """
    if level not in ("aten", "module"):
        raise ValueError(f"level must be 'aten' or 'module', not {level!r}")
    check_inputs(model, example_inputs, example_kwargs)
    saved_modes = state.modes(model)
    try:
        with torch.random.fork_rng(devices=[]):
            if level == "module":
                gm = _symbolic_trace(model, example_inputs, example_kwargs)
            else:
                gm = _export(model, example_inputs, example_kwargs, strict)
    finally:
        state.restore_modes(saved_modes)
    gm.meta["training"] = bool(getattr(model, "training", False))
    _annotate_or_explain(gm, state.flat_inputs(gm, example_inputs, example_kwargs))
    if level == "aten":  # private values written in place become functional ops
        functionalize_graph(gm.graph)
        gm.graph.lint()
        gm.recompile()
    return gm


def _annotate_or_explain(gm: GraphModule, flat_inputs) -> None:
    """`annotate`, with a CaptureError when the graph fails on the example inputs."""
    try:
        annotate(gm, *flat_inputs)
    except GraphoptError:
        raise
    except Exception as e:  # symbolic_trace never ran the model: shapes fail only now
        cause = e.__cause__ or e
        raise CaptureError(
            f"the captured graph failed on the example inputs: {type(cause).__name__}: "
            f"{first_line(cause)}\nCheck that the model runs eagerly on these inputs "
            "(model(*inputs)).") from None


def check_inputs(model, example_inputs, example_kwargs=None) -> None:
    """Name any input that is not a tensor, or whose dtype the model cannot take.

    Introduced in chapter 2.
    """
    named = [(f"example input {i}", x) for i, x in enumerate(example_inputs)]
    named += [(f"keyword input {k!r}", x) for k, x in (example_kwargs or {}).items()]
    # A keyword may be a Python flag (use_cache=False) or None: the graph is
    # specialised to it, as forward's default would be.
    constants = _constant_placeholders(model)
    for i, (what, x) in enumerate(named):
        flag = what[0] == "k" or i in constants
        flag = flag and (x is None or isinstance(x, (bool, int, float, str)))
        if not isinstance(x, torch.Tensor) and not flag:
            raise InputError(
                f"{what} is a {type(x).__name__}, not a torch.Tensor. "
                f"Pass tensors, e.g. torch.as_tensor(value)."
            )
    if not isinstance(model, nn.Module):
        return
    param_dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if len(param_dtypes) != 1:
        return
    (want,) = param_dtypes
    for what, x in named:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != want:
            raise InputError(
                f"{what} has dtype {x.dtype} but the model's parameters are "
                f"{want}. Convert one of them, e.g. x.to({want}) or "
                f"model.to({x.dtype})."
            )


def _constant_placeholders(model) -> set[int]:
    """Positions of a captured graph's inputs that were Python values (use_cache)."""
    if not isinstance(model, GraphModule):
        return set()
    holders = [n for n in model.graph.nodes if n.op == "placeholder"]
    return {i for i, n in enumerate(holders)
            if "val" in n.meta and not isinstance(n.meta["val"], torch.Tensor)}


def _symbolic_trace(model, args=(), kwargs=None) -> GraphModule:
    # The graph calls the model's submodules: trace a copy whose buffers are its own
    # (weights are shared, never written), or running it would write the caller's.
    if isinstance(model, nn.Module):
        model = copy.deepcopy(model, {id(p): p for p in model.parameters()})
    concrete = _unsupplied_defaults(model, args, kwargs or {})
    try:
        return _specialised_defaults(
            torch.fx.symbolic_trace(model, concrete_args=concrete or None), concrete)
    except torch.fx.proxy.TraceError as e:
        hint = _TRACE_HINT
        if "control flow" in str(e):
            hint = (f"{_TRACE_HINT}\nIf it branches on tensor *values*: "
                    f"{_CONTROL_FLOW_HINT}")
        raise CaptureError(f"symbolic_trace failed: {first_line(e)}\n{hint}") from None
    except Exception as e:
        raise CaptureError(
            f"symbolic_trace failed with {type(e).__name__}: {first_line(e)}\n"
            f"{_TRACE_HINT}") from None


def _specialised_defaults(gm: GraphModule, concrete: dict) -> GraphModule:
    """symbolic_trace keeps forward's old default on a specialised argument, then
    asserts the new value; make the value it was traced with the default."""
    changed = False
    for n in gm.graph.find_nodes(op="placeholder"):
        name = str(n.target).rstrip("0123456789").rstrip("_")
        if n.target != name and name in concrete and n.args:
            n.args, changed = (concrete[name],), True
    if changed:
        gm.recompile()
    return gm


def _unsupplied_defaults(model, args, kwargs) -> dict:
    """Arguments symbolic_trace takes as fixed values: forward's optional arguments
    that the call does not give (at their defaults) and Python values it does."""
    forward = model.forward if isinstance(model, nn.Module) else model
    try:
        params = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return {}
    # Python values given as keywords (scale=2.0, use_cache=False) are specialised,
    # as torch.export specialises them
    out = {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}
    for i, p in enumerate(params):
        given = i < len(args) or p.name in kwargs
        if not given and p.default is not inspect.Parameter.empty and p.kind in (
                p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            out[p.name] = p.default
    return out


def _export(model, args, kwargs, strict: bool) -> GraphModule:
    if not isinstance(model, nn.Module):
        model = _FunctionModule(model)
    # torch.export prints partial graphs to the log before it gives up; keep the
    # learner's screen for the one message that matters.
    with warnings.catch_warnings(), _quiet_torch_logs():
        warnings.simplefilter("ignore")
        try:
            exported = torch.export.export(model, tuple(args), dict(kwargs),
                                           strict=strict)
        except Exception as e:
            raise CaptureError(
                f"torch.export (strict={strict}) could not capture the model: "
                f"{type(e).__name__}: {first_line(e)}\n{export_hint(e)}") from None
    gm = exported.module()
    gm.meta["exported_program"] = exported
    written = {k[1] for k in written_values(gm.graph) if k[0] == "attr"}
    state.own_buffers(gm, written)
    if hasattr(gm, "_guards_fn"):
        gm._guards_fn = ShapeGuard(gm._guards_fn, args, kwargs)
    return gm


def export_hint(e: BaseException) -> str:
    """What to do about a torch.export failure, from what its message says (ch. 2)."""
    text = f"{type(e).__name__}: {e}"
    if "Cache" in text or "cache" in text:
        return _CACHE_HINT
    if any(
        s in text
        for s in (
            "data-dependent",
            "Data-dependent",
            "GuardOnDataDependent",
            "data dependent",
            "control flow",
        )
    ):
        return _CONTROL_FLOW_HINT
    return ("Check that the model runs eagerly on these inputs; chapter 2 lists other "
            "capture methods (symbolic_trace, torch.compile) and what each supports.")


class _FunctionModule(nn.Module):
    """Wraps a plain function so that torch.export can take it."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


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


def annotate(gm: GraphModule, *example_inputs) -> GraphModule:
    """Record shape, dtype and bytes on every node by running `gm` on the inputs.

    Uses torch.fx's ShapeProp, which stores a TensorMetadata in
    `node.meta["tensor_meta"]`; `graphopt.shape(node)` and friends read it.
    Returns `gm` for chaining (ch. 2).
    """
    # ShapeProp really runs the graph: in training mode BN would update the running
    # statistics, a model may write its input, dropout draws random numbers. Run on
    # copies of the inputs and undo every write.
    with torch.no_grad(), state.preserved(gm):
        ShapeProp(gm).propagate(*state.copies(tuple(example_inputs)))
    return gm
