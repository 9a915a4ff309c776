"""The capture methods of chapter 2, one small function each.

Each function takes (model, inputs, compile_backend) and returns a `CaptureRow`, or
raises: `side_by_side` turns the exception into a failed row. Graphs are annotated with
shapes where they can run, so that `graphopt.draw` shows them on the edges.
"""

from __future__ import annotations

import re
import time

import torch
from torch import nn
from torch.fx import GraphModule

from ..analysis import count_ops
from ..capture import _first_line, _FunctionModule, annotate
from ..i18n import _
from ..torch_internals import dynamo_explain, run_and_get_code
from .kernels import inductor_launches
from .quiet import quiet
from .table import CaptureRow

METHODS = (
    "eager",
    "fx.symbolic_trace",
    "torch.export(strict=False)",
    "torch.export(strict=True)",
    "torch.jit.script",
    "torch.jit.trace",
    "torch.compile",
)

# The methods torch deprecates: their row keeps the deprecation warning that capturing
# raised (told by its category; see quiet.DEPRECATION_CATEGORIES). Other methods' rows
# do not: a deprecation raised under torch.compile is about torch's internals (inductor
# calls jit.script_method), not about torch.compile.
DEPRECATED = ("torch.jit.script", "torch.jit.trace")

# TorchScript nodes that hold constants or fetch attributes: no computation
_TS_NOT_OPS = ("prim::Constant", "prim::GetAttr")


def _eager(model, inputs, backend) -> CaptureRow:
    return CaptureRow("eager", captured=True, module=model,
                      note=_("no graph: ops run one by one as Python reaches them"))


def _symbolic_trace(model, inputs, backend) -> CaptureRow:
    gm = torch.fx.symbolic_trace(model)
    return _graph_row("fx.symbolic_trace", gm, inputs)


def _export(strict: bool):
    # not capture._export: that one turns the error into a CaptureError with a hint,
    # and the table must show torch's own error type
    def capture(model, inputs, backend) -> CaptureRow:
        target = model if isinstance(model, nn.Module) else _FunctionModule(model)
        program = torch.export.export(target, tuple(inputs), strict=strict)
        gm = program.module()
        gm.meta["exported_program"] = program
        return _graph_row(f"torch.export(strict={strict})", gm, inputs)
    return capture


def _graph_row(method: str, gm: GraphModule, inputs) -> CaptureRow:
    try:
        annotate(gm, *inputs)  # shapes on the edges of the drawing
    except Exception:
        pass  # a graph that cannot run on its own example inputs is still drawable
    return CaptureRow(method, captured=True, graph=gm, graphs=[gm], nodes=count_ops(gm),
                      module=gm)


def _jit_script(model, inputs, backend) -> CaptureRow:
    scripted = torch.jit.script(model)
    return _torchscript_row("torch.jit.script", scripted)


def _jit_trace(model, inputs, backend) -> CaptureRow:
    traced = torch.jit.trace(model, tuple(inputs))
    return _torchscript_row("torch.jit.trace", traced)


def _torchscript_row(method: str, module) -> CaptureRow:
    graph = getattr(module, "inlined_graph", None) or module.graph
    nodes = sum(1 for n in _ts_nodes(graph.nodes()) if n.kind() not in _TS_NOT_OPS)
    return CaptureRow(method, captured=True, graph=torchscript_text(graph), nodes=nodes,
                      module=module)


def _ts_nodes(nodes):
    for n in nodes:
        yield n
        for block in n.blocks():  # the two sides of an `if`, the body of a loop
            yield from _ts_nodes(block.nodes())


def torchscript_text(graph) -> str:
    """TorchScript IR as text, without the source-file locations (machine paths)."""
    return re.sub(r"\s+# \S+:\d+:\d+", "", str(graph)).strip()


def _compile(model, inputs, backend) -> CaptureRow:

    # explain() runs TorchDynamo alone: it reports the graphs and why each break
    # happened. It is our analysis, not torch.compile's work: its prints and time are
    # kept out of the row.
    with quiet():
        explanation = dynamo_explain(model)(*inputs)
    compiled = torch.compile(model, backend=backend)
    start = time.perf_counter()
    # the first call compiles (its time is the capture time); inductor hands us the
    # code it generated on the way
    _output, sources = run_and_get_code(compiled, *inputs)
    capture_s = time.perf_counter() - start
    graphs = list(explanation.graphs)
    if graphs:
        try:
            annotate(graphs[0], *inputs)
        except Exception:
            pass  # dynamo may lift parameters to inputs; drawings work without shapes
    reasons = [_first_line(str(b.reason)) for b in explanation.break_reasons]
    return CaptureRow(
        "torch.compile", captured=True, graph=graphs[0] if graphs else None,
        graphs=graphs, nodes=sum(count_ops(g) for g in graphs),
        graph_breaks=explanation.graph_break_count,
        note=_("graph break: {reasons}").format(reasons="; ".join(reasons))
        if reasons else "",
        module=compiled, capture_s=capture_s,
        kernels=inductor_launches(sources) if sources else None,
        source="\n\n".join(sources) or None)


CAPTURERS = {
    "eager": _eager,
    "fx.symbolic_trace": _symbolic_trace,
    "torch.export(strict=False)": _export(strict=False),
    "torch.export(strict=True)": _export(strict=True),
    "torch.jit.script": _jit_script,
    "torch.jit.trace": _jit_trace,
    "torch.compile": _compile,
}
