"""Every way PyTorch can capture a graph, run side by side on the same model.

Introduced in chapter 2 (static and dynamic graphs). `compare_capture(model, *inputs)`
tries each capture method on the model and returns one `CaptureRow` per method:

    eager                       no graph: Python runs the ops one by one (dynamic graph)
    fx.symbolic_trace           Python runs once on proxies; module-level fx graph
    torch.export(strict=False)  Python runs once on fake tensors; aten-level fx graph
    torch.export(strict=True)   TorchDynamo reads the bytecode; aten-level fx graph
    torch.jit.script            TorchScript compiler parses the source (deprecated)
    torch.jit.trace             records the ops one run executed (deprecated)
    torch.compile               TorchDynamo + a backend; splits at graph breaks

A failure is a row, never an exception: the row keeps the error's type and first line.
Each captured callable is then checked against eager on *fresh* random inputs (same
shapes, different values) - that is how a trace that silently baked in one branch of an
`if` is caught. Torch's own logs, warnings and the model's prints are kept off the
screen and recorded in the row instead.
"""

from __future__ import annotations

import contextlib
import copy
import html
import io
import logging
import re
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch.fx import GraphModule
from torch.utils._pytree import tree_flatten

from .capture import _FunctionModule, annotate, check_inputs
from .errors import InputError

METHODS = (
    "eager",
    "fx.symbolic_trace",
    "torch.export(strict=False)",
    "torch.export(strict=True)",
    "torch.jit.script",
    "torch.jit.trace",
    "torch.compile",
)

# TorchScript nodes that hold constants or fetch attributes: no computation
_TS_NOT_OPS = ("prim::Constant", "prim::GetAttr")


@dataclass
class CaptureRow:
    """What one capture method did with the model (chapter 2)."""

    method: str
    captured: bool
    graph: GraphModule | str | None = field(default=None, repr=False)  # or IR text
    nodes: int | None = None          # op nodes: no inputs, outputs or constants
    graph_breaks: int | None = None   # torch.compile only: dynamo's graph-break count
    error_type: str | None = None
    error: str | None = None          # the first line of the error message
    capture_s: float | None = None    # torch.compile: the first call, which compiles
    run_s: float | None = None        # median steady-state call on the example inputs
    matches_eager: bool | None = None  # on fresh inputs; None for eager and failures
    fresh_error: str | None = None    # raised on fresh inputs (e.g. a shape guard)
    kernels: list[str] | None = None  # launches per call: eager and inductor only
    warnings: list[str] = field(default_factory=list)
    prints_at_capture: int = 0        # lines the model printed while being captured
    prints_per_call: int | None = None  # lines printed by one call of the captured form
    note: str = ""
    graphs: list = field(default_factory=list, repr=False)  # every graph (compile: >1)
    source: str | None = field(default=None, repr=False)  # inductor's generated code
    module: Callable | None = field(default=None, repr=False)
    exception: BaseException | None = field(default=None, repr=False)

    @property
    def verdict(self) -> str:
        """One word for the table: ok, WRONG, failed or reference."""
        if not self.captured:
            return "failed"
        if self.matches_eager is None:
            return "reference" if self.method == "eager" else "-"
        if self.fresh_error:
            return "raises"
        return "ok" if self.matches_eager else "WRONG"


class CaptureTable(list):
    """The rows of `compare_capture`; a table in a notebook and in a terminal."""

    def __getitem__(self, key):
        if not isinstance(key, str):
            return super().__getitem__(key)
        exact = [r for r in self if r.method == key]
        loose = [r for r in self if r.method.startswith(key + "(")]
        if exact or len(loose) == 1:
            return (exact or loose)[0]
        raise KeyError(f"no single row {key!r}; rows are: "
                       + ", ".join(r.method for r in self))

    def _columns(self) -> list[tuple[str, Callable[[CaptureRow], str]]]:
        cols = [
            ("method", lambda r: r.method),
            ("captured", lambda r: "yes" if r.captured else "no"),
            ("ops", lambda r: _dash(r.nodes)),
            ("graph breaks", lambda r: _dash(r.graph_breaks)),
            ("capture", lambda r: _fmt_time(r.capture_s)),
            ("run (median)", lambda r: _fmt_time(r.run_s)),
            ("fresh inputs", lambda r: r.verdict),
        ]
        if any(r.kernels is not None for r in self):
            cols.insert(4, ("kernels", lambda r: _dash(None if r.kernels is None
                                                       else len(r.kernels))))
        if any(r.prints_at_capture or r.prints_per_call for r in self):
            cols.append(("prints: capture / call", lambda r: (
                f"{r.prints_at_capture} / {_dash(r.prints_per_call)}")))
        cols.append(("error or note", _explain))
        return cols

    def __repr__(self) -> str:
        cols = self._columns()
        return text_table([h for h, _ in cols], [[f(r) for _, f in cols] for r in self])

    def _repr_html_(self) -> str:
        cols = self._columns()
        page = html_table([h for h, _ in cols], [[f(r) for _, f in cols] for r in self])
        # a silently wrong capture is the one result a reader must not miss
        return page.replace("<td style='text-align:left'>WRONG</td>",
                            "<td style='text-align:left;color:#b00020'><b>WRONG</b></td>")


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; the last column is free text."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    widths[-1] = 0
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()
                     for line in [headers] + rows)


def html_table(headers: list[str], rows: list[list[str]]) -> str:
    """The same table as HTML, every cell escaped."""
    cell = "<{0} style='text-align:left'>{1}</{0}>"
    head = "".join(cell.format("th", html.escape(h)) for h in headers)
    body = "".join(
        "<tr>" + "".join(cell.format("td", html.escape(c)) for c in r) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _dash(value) -> str:
    return "-" if value is None else str(value)


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def _explain(r: CaptureRow) -> str:
    # torch's internals warn too (inductor about jit.script_method): show only warnings
    # about the method itself, such as TorchScript's deprecation and TracerWarning
    own = [w for w in r.warnings
           if f"`{r.method}` is" in w or w.startswith("TracerWarning")]
    text = (f"{r.error_type}: {r.error}" if r.error_type
            else r.note or (own or [""])[0])
    return text if len(text) <= 110 else text[:107] + "..."


# ------------------------------------------------------------------ the comparison

def compare_capture(model, *inputs, methods=METHODS, fresh_inputs=None,
                    compile_backend: str = "inductor", runs: int = 5,
                    rtol: float = 1e-4, atol: float = 1e-5) -> CaptureTable:
    """Capture `model` with each method in `methods`: one `CaptureRow` each (chapter 2).

    `fresh_inputs` is a list of input tuples used to check each captured form against
    eager; by default two random draws with the shapes and dtypes of `inputs`, the
    second the negation of the first (so a branch on a sign sees both sides).
    `compile_backend="eager"` runs TorchDynamo without inductor's code generation:
    graph breaks are the same, and it costs a fraction of a second instead of ~10 s.
    The caller's model is not changed.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(
            f"unknown capture method(s) {unknown}; choose from {list(METHODS)}")
    check_inputs(model, inputs)
    if runs < 1:
        raise InputError(f"runs must be at least 1, not {runs}.")
    if fresh_inputs is None:
        fresh_inputs = make_fresh_inputs(inputs)
    _check_fresh(fresh_inputs, len(inputs))
    reference = _eager_outputs(_private_copy(model), fresh_inputs)
    table = CaptureTable()
    for method in methods:
        row = _capture_one(method, _private_copy(model), inputs, compile_backend)
        if row.captured:
            _time_and_check(row, inputs, fresh_inputs, reference, runs, rtol, atol)
        table.append(row)
    return table


def _check_fresh(fresh_inputs, count: int) -> None:
    """Fresh inputs are a list of input tuples, one tuple per call."""
    for i, xs in enumerate(fresh_inputs):
        if not isinstance(xs, (tuple, list)) or len(xs) != count or not all(
                isinstance(x, torch.Tensor) for x in xs):
            raise InputError(
                f"fresh_inputs[{i}] must be a tuple of {count} tensor(s), one per model "
                f"input, e.g. fresh_inputs=[(x2,)] for a one-input model.")


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


def _private_copy(model):
    """Each method gets its own copy: running a model in training mode updates its
    BatchNorm statistics, and the caller's model must not change."""
    if not isinstance(model, nn.Module):
        return model
    try:
        return copy.deepcopy(model)
    except Exception:  # an uncopyable module: use it as is
        return model


def _eager_outputs(model, fresh_inputs) -> list | None:
    """Eager results on the fresh inputs, or None if the model itself fails on them."""
    try:
        with _quiet(), torch.no_grad():
            return [model(*xs) for xs in fresh_inputs]
    except Exception:
        return None


def _capture_one(method: str, model, inputs, compile_backend: str) -> CaptureRow:
    label = method
    if method == "torch.compile" and compile_backend != "inductor":
        label = f"torch.compile(backend={compile_backend!r})"
    start = time.perf_counter()
    with _quiet() as record:
        try:
            with torch.no_grad():
                row = _CAPTURERS[method](model, inputs, compile_backend)
        except Exception as e:  # the model's failure is this row's result
            row = CaptureRow(method, captured=False, error_type=type(e).__name__,
                             error=_first_line(e), exception=e)
    row.method = label
    if method != "eager" and row.capture_s is None:
        row.capture_s = time.perf_counter() - start
    row.warnings = record.warnings
    row.prints_at_capture = record.printed_lines()
    return row


def _time_and_check(row: CaptureRow, inputs, fresh_inputs, reference, runs, rtol, atol):
    """Median steady-state time on `inputs`; then compare with eager on fresh inputs."""
    fn = row.module
    try:
        with torch.no_grad():
            with _quiet():
                fn(*inputs)  # warm-up: TorchScript's profiling executor specialises
            with _quiet() as record:
                fn(*inputs)
            row.prints_per_call = record.printed_lines()
            row.run_s = _median_time(fn, inputs, runs)
            if row.method == "eager":
                row.kernels = _try_eager_kernels(fn, inputs)
    except Exception as e:  # captured, yet it cannot run: that is the row's result
        row.captured, row.module = False, None
        row.error_type, row.error, row.exception = type(e).__name__, _first_line(e), e
        return
    if row.method == "eager" or reference is None:
        return
    try:
        with _quiet(), torch.no_grad():
            got = [fn(*xs) for xs in fresh_inputs]
        row.matches_eager = all(_allclose(a, b, rtol, atol)
                                for a, b in zip(got, reference))
        if not row.matches_eager:
            row.note = "silently wrong on fresh inputs: differs from eager"
    except Exception as e:
        row.matches_eager = False
        row.fresh_error = f"{type(e).__name__}: {_first_line(e)}"
        row.note = f"raises on fresh inputs: {row.fresh_error}"


def _try_eager_kernels(model, inputs) -> list[str] | None:
    try:
        with _quiet():
            return eager_kernels(model, *inputs)
    except Exception:  # a model a dispatch mode cannot see through: count unknown
        return None


def _median_time(fn, inputs, runs: int) -> float:
    """Median wall time of `runs` calls; waits for the GPU when the inputs are there."""
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs)
    times = []
    with _quiet():
        for _ in range(runs):
            if cuda:
                torch.cuda.synchronize()
            t = time.perf_counter()
            fn(*inputs)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


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


# ------------------------------------------------------------------ the seed's table

@dataclass
class Table:
    """A small table of text cells that shows as HTML in a notebook."""

    headers: list[str]
    rows: list[list[str]]

    def __repr__(self) -> str:
        return text_table(self.headers, self.rows)

    def _repr_html_(self) -> str:
        return html_table(self.headers, self.rows)


_FAMILIES = {  # the column each method stands for in the seed's table
    "eager": "dynamic: eager",
    "torch.export(strict=False)": "static: torch.export",
    "torch.jit.script": "static: TorchScript (deprecated)",
    "torch.compile": "JIT: torch.compile",
}
_FRAMEWORKS = {
    "eager": "PyTorch eager, TensorFlow 2 eager, Chainer",
    "torch.export(strict=False)": "TF 1.x graphs, ONNX, TensorRT, ExecuTorch",
    "torch.jit.script": "TorchScript (PyTorch 1.x deployment)",
    "torch.compile": "torch.compile, tf.function, jax.jit",
}


def static_vs_dynamic(plain: CaptureTable, branching: CaptureTable) -> Table:
    """The seed's static-vs-dynamic table, each cell read off a measured row (ch. 2).

    `plain` compares a model with a `print` in forward (e.g. models.PrintingAddMul) and
    torch.compile included; `branching` compares a model with a data-dependent `if`.
    """
    keys = list(_FAMILIES)
    lines = [
        ("when the graph is built", [_built(plain[k]) for k in keys]),
        ("what an optimiser sees", [_sees(plain[k]) for k in keys]),
        ("print() inside forward", [_prints(plain[k]) for k in keys]),
        ("if on a tensor's value", [_branch(branching[k]) for k in keys]),
        ("frameworks", [_FRAMEWORKS[k] for k in keys]),
    ]
    return Table([""] + [_FAMILIES[k] for k in keys],
                 [[name] + cells for name, cells in lines])


def _built(r: CaptureRow) -> str:
    if r.method == "eager":
        return "while it runs, op by op, on every call"
    if not r.captured:
        return f"never: {r.error_type}"
    if r.method.startswith("torch.compile"):
        return f"at the first call ({_fmt_time(r.capture_s)}), again if a guard fails"
    return f"before it runs, once ({_fmt_time(r.capture_s)})"


def _sees(r: CaptureRow) -> str:
    if r.method == "eager":
        launches = _dash(None if r.kernels is None else len(r.kernels))
        return f"one op at a time: {launches} kernel launches"
    if not r.captured:
        return "nothing"
    if r.kernels is not None:
        return f"the whole graph ({r.nodes} ops), run as {len(r.kernels)} kernel(s)"
    return f"the whole graph ({r.nodes} ops)"


def _prints(r: CaptureRow) -> str:
    when = ("on every call" if r.prints_per_call else
            "only while capturing" if r.prints_at_capture else "never: it was dropped")
    counts = f"{r.prints_at_capture} at capture, {_dash(r.prints_per_call)} per call"
    return f"{when} ({counts})"


def _branch(r: CaptureRow) -> str:
    if r.method == "eager":
        return "just works: Python decides each call"
    if not r.captured:
        return f"fails: {r.error_type}"
    if r.graph_breaks:
        return f"{r.graph_breaks} graph break: {len(r.graphs)} graphs, Python decides"
    if r.verdict == "WRONG":
        return "silently wrong for the other branch"
    return "kept in the graph" if r.verdict == "ok" else r.verdict


# ------------------------------------------------------------------ one capturer each

def _eager(model, inputs, backend) -> CaptureRow:
    return CaptureRow("eager", captured=True, module=model, note="no graph: ops run "
                      "one by one as Python reaches them")


def _symbolic_trace(model, inputs, backend) -> CaptureRow:
    gm = torch.fx.symbolic_trace(model)
    return _graph_row("fx.symbolic_trace", gm, inputs)


def _export(strict: bool):
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
    from torch._inductor.utils import run_and_get_code

    # explain() runs TorchDynamo alone: it reports the graphs and why each break
    # happened. It is our analysis, not torch.compile's work: its prints and time are
    # kept out of the row.
    with _quiet():
        explanation = torch._dynamo.explain(model)(*inputs)
    compiled = torch.compile(model, backend=backend)
    start = time.perf_counter()
    # the first call compiles (its time is the capture time); inductor hands us the
    # code it generated on the way
    _, sources = run_and_get_code(compiled, *inputs)
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
        note=("graph break: " + "; ".join(reasons)) if reasons else "",
        module=compiled, capture_s=capture_s,
        kernels=inductor_launches(sources) if sources else None,
        source="\n\n".join(sources) or None)


_CAPTURERS = {
    "eager": _eager,
    "fx.symbolic_trace": _symbolic_trace,
    "torch.export(strict=False)": _export(strict=False),
    "torch.export(strict=True)": _export(strict=True),
    "torch.jit.script": _jit_script,
    "torch.jit.trace": _jit_trace,
    "torch.compile": _compile,
}


def count_ops(gm: GraphModule) -> int:
    """Op nodes of an fx graph: the calls (not inputs, outputs, attributes, guards)."""
    return sum(1 for n in gm.graph.nodes
               if n.op in ("call_function", "call_method", "call_module")
               and not str(n.target).startswith("_guards"))


# ------------------------------------------------------------------ kernel launches

def eager_kernels(model, *inputs) -> list[str] | None:
    """The aten operators eager mode dispatches for one call: one kernel launch each.

    Chapter 2 compares this count with `inductor_launches` of the compiled model.

    Counts as `graphopt.run` does (views and allocations are not kernels). Returns
    None for a model that calls a higher-order operator such as torch.cond: the ops
    inside it run out of the counter's sight.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from .interpret import _NOT_KERNELS

    names: list[str] = []
    hidden = []

    class _Names(TorchDispatchMode):
        supports_higher_order_operators = True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            schema = getattr(func, "_schema", None)
            if schema is None:
                hidden.append(func)
            elif not func.is_view:
                name = schema.name.split("::")[-1]
                if name not in _NOT_KERNELS:
                    names.append(name)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), _Names():
        model(*inputs)
    if hidden:
        # torch.cond runs through TorchDynamo in eager mode; under a dispatch mode that
        # leaves dynamo's caches unusable for the next torch.export: start it afresh
        torch._dynamo.reset()
        return None
    return names


_LAUNCH = re.compile(r"^\s*(?:\w+ = )?(extern_kernels\.\w+|torch\.ops\.\w+\.\w+"
                     r"|cpp_fused_\w+|triton_\w+|aten\.\w+)(?:\.default)?(?:\.run)?\(")


def inductor_launches(sources: list[str]) -> list[str]:
    """The kernels inductor's generated code launches per call, in order (chapter 2).

    Its `call()` function calls each fused kernel (`cpp_fused_*` on CPU, `triton_*` on
    GPU) and each library kernel (`extern_kernels.addmm`, aten fallbacks) once.
    """
    launches = []
    for source in sources:
        body = source[source.find("def call("):]
        body = body[:body.find("\nrunner = ")] if "\nrunner = " in body else body
        launches += [m.group(1) for line in body.splitlines()
                     if (m := _LAUNCH.match(line))]
    return launches


# ------------------------------------------------------------------ keeping quiet

class _Record:
    def __init__(self):
        self.stdout = io.StringIO()
        self.caught: list[warnings.WarningMessage] = []

    @property
    def warnings(self) -> list[str]:
        seen: list[str] = []
        for w in self.caught:
            text = f"{w.category.__name__}: {_first_line(w.message)}"
            if text not in seen:
                seen.append(text)
        return seen

    def printed_lines(self) -> int:
        return len(self.stdout.getvalue().splitlines())


@contextlib.contextmanager
def _quiet():
    """Silence torch's loggers and stderr, record warnings and the model's prints.

    torch.export dumps partial graphs to its logs before it gives up, and dynamo logs
    recompilations; the learner should see the one line in the table instead.
    """
    record = _Record()
    torch_loggers = [logging.getLogger(name) for name in
                     list(logging.root.manager.loggerDict) if name.startswith("torch")]
    disabled = [lg.disabled for lg in torch_loggers]
    for lg in torch_loggers:
        lg.disabled = True
    try:
        with warnings.catch_warnings(record=True) as caught, \
                contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(record.stdout):
            warnings.simplefilter("always")
            try:
                yield record
            finally:
                record.caught = list(caught)
    finally:
        for lg, was in zip(torch_loggers, disabled):
            lg.disabled = was


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
