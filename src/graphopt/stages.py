"""The stage driver: named stages run in order, every stage kept (chapters 5-7).

`run_stages(model, *x, passes=..., table=...)` captures an nn.Module at aten level
(torch.export), runs the named stages of `table` in order and keeps each stage's
GraphModule with its measured cost (`graphopt.run` on the example inputs), so
drawings, tables and widgets show the stages by name. Its default table is the
graph passes (`passes.pipeline.PASSES`); `graphopt.optimize` gives it
`tuning.stage_table(policy)`: the graph passes, then `lower` and `backend` with the
kernel policy as their argument. It imports neither of those two stages.

Shapes: each pass keeps `node.meta` shapes up to date itself (a new node copies them
from the node it replaces), so the example inputs are not stored on the graph; they
are used here to measure every stage and, with `check=True`, to re-run shape
propagation and to verify each stage against the one before it.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn
from torch.fx import GraphModule, Interpreter

from .capture import annotate, capture
from .errors import GraphoptError, NotEquivalentError
from .i18n import ljust, pgettext, rjust
from .interpret import fmt_bytes, run
from .ops import op_name
from .passes.pipeline import PASSES, UnknownPassError
from .passes.result import PassResult, deferred_recompile, working_copy
from .state import copies, flat_inputs, preserved
from .verify import Float64Reference, mismatch, random_like


@dataclass
class Stats:
    """What one stage costs on the example inputs, from `graphopt.run` (ch. 5)."""

    nodes: int
    kernels: int
    bytes_moved: int
    peak_bytes: int


@dataclass
class Stage:
    """One named step of the pipeline: its graph, its cost, what changed (ch. 5)."""

    name: str
    module: GraphModule | None
    stats: Stats | None
    result: PassResult | None = None


@dataclass
class OptimizeResult:
    """The optimised `.module` and every stage on the way, `.stages` (ch. 5).

    `.policy`: the kernel policy `lower` and `backend` applied, set by
    `graphopt.optimize` (after `policy="measured"`, the record it timed: `save` it
    to replay the same choices)."""

    module: GraphModule
    stages: list[Stage] = field(default_factory=list)
    policy: object = None

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @property
    def notes(self) -> list[str]:
        """Every stage's notes: one line per thing a pass left alone, and why."""
        return [note for s in self.stages if s.result for note in s.result.notes]

    def table(self) -> str:
        """One line per stage: nodes, kernels, bytes moved, peak memory."""
        rows = [ljust(pgettext("stage table", "stage"), 34)
                + rjust(pgettext("stage table", "nodes"), 7)
                + rjust(pgettext("stage table", "kernels"), 9)
                + rjust(pgettext("stage table", "moved"), 12)
                + rjust(pgettext("stage table", "peak"), 12)]
        for s in self.stages:
            st = s.stats
            cells = (f"{st.nodes:>7}{st.kernels:>9}{fmt_bytes(st.bytes_moved):>12}"
                     f"{fmt_bytes(st.peak_bytes):>12}") if st else f"{'-':>7}"
            rows.append(f"{s.name:<34}{cells}")
        return "\n".join(rows)

    def __repr__(self) -> str:
        return self.table()


def run_stages(model_or_gm, *example_inputs, passes: Sequence | None = None,
               check: bool = False, stats: bool = True, keep_stages: bool = True,
               table: dict | None = None, **example_kwargs) -> OptimizeResult:
    """Run the named stages in order and keep every stage (chapter 5).

    `passes` holds names from `table` (default: the graph passes, `PASSES`, all of
    them in order) or your own functions `GraphModule -> PassResult`.
    `check=True` is the debug mode: after each stage shapes are propagated again
    and the outputs compared with the previous stage's on the example inputs and on
    fresh random ones; where they differ by more than float32's tolerance, a float64
    run of the captured graph decides (`verify.Float64Reference`).
    `keep_stages=False` runs every pass on one copy (fast for huge graphs): only the
    last stage has a module. Inputs are given as the model takes them, keywords
    included (`optimize(bert, input_ids=ids, attention_mask=mask)`).

    Nothing is lost: the caller's model (weights, buffers, train/eval flags), its
    example inputs and the random generator are as before; measuring and checking
    run on copies of the inputs and undo what a run writes (`graphopt.state`). On a
    model in training mode nothing that reads a parameter and no batch norm is
    folded; `result.notes` says what each pass left alone and why.
    Bounded: see `graphopt.optimize` (README: Bounds).
    """
    table = PASSES if table is None else table
    steps = _resolve(tuple(table) if passes is None else passes, table)
    gm = as_graph_module(model_or_gm, example_inputs, example_kwargs)
    example_inputs = flat_inputs(gm, example_inputs, example_kwargs)
    with _gc_paused():
        return _run_stages(gm, steps, example_inputs, check, stats, keep_stages,
                           own=tuple(table.values()))


@contextlib.contextmanager
def _gc_paused():
    """Python's cyclic garbage collector off while the passes run.

    Passes create many small objects while the graph keeps millions alive; the
    collector would rescan them all again and again (quadratic time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run_stages(gm, steps, example_inputs, check, stats, keep_stages,
                own=()) -> OptimizeResult:
    measure = stats and bool(example_inputs)
    first = stage_stats(gm, example_inputs) if measure else None
    stages = [Stage("captured", gm, first)]
    current = gm if keep_stages else working_copy(gm, inplace=False, codegen=False)
    truth = Float64Reference(gm) if check else None  # run only if a check fails
    if not steps and not keep_stages:
        current.recompile()
    for i, (name, fn) in enumerate(steps):
        last = i == len(steps) - 1
        defer = not (keep_stages or last or check)
        res = _apply(fn, current, inplace=not keep_stages, defer=defer,
                     known=fn in own or fn in PASSES.values())
        if check:  # against the previous stage, or the original when stages are shared
            _check(name, current if keep_stages else gm, res.module, example_inputs,
                   truth)
        current = res.module
        module = current if keep_stages or last else None
        measured = measure and module is not None
        st = stage_stats(current, example_inputs) if measured else None
        stages.append(Stage(name, module, st, res))
    return OptimizeResult(current, stages)


def _resolve(passes: Sequence, table: dict) -> list[tuple[str, Callable]]:
    if isinstance(passes, str):
        passes = (passes,)
    steps = []
    for p in passes:
        if callable(p):
            steps.append((getattr(p, "__name__", "custom_pass"), p))
        elif p in table:
            steps.append((p, table[p]))
        else:
            raise UnknownPassError(
                f"unknown pass {p!r}. Valid names: {', '.join(table)}; or pass "
                "your own function GraphModule -> PassResult."
            )
    return steps


def as_graph_module(model_or_gm, example_inputs, example_kwargs) -> GraphModule:
    """`model_or_gm` captured at aten level, or itself if a GraphModule (ch. 5)."""
    if isinstance(model_or_gm, GraphModule):
        return model_or_gm
    inner = getattr(model_or_gm, "graph_module", None)  # the backend's wrapper
    if isinstance(inner, GraphModule):
        return inner  # its graph, not a new capture of the wrapper's fast path
    if isinstance(model_or_gm, nn.Module) or callable(model_or_gm):
        return capture(model_or_gm, *example_inputs, level="aten", **example_kwargs)
    raise GraphoptError(f"optimize takes an nn.Module or a GraphModule, not a "
                        f"{type(model_or_gm).__name__}.")


def _apply(fn: Callable, gm: GraphModule, inplace: bool, defer: bool,
           known: bool) -> PassResult:
    with deferred_recompile(defer):
        if "inplace" in inspect.signature(fn).parameters:
            out = fn(gm, inplace=inplace)
        else:  # a reader's own pass: give it a copy, unless stages share one
            out = fn(gm if inplace else working_copy(gm, False))
    if isinstance(out, GraphModule):
        out = PassResult(out)
    if not defer and not known:  # a reader's pass may forget these; ours finish()
        out.module.graph.lint()
        out.module.recompile()
    return out


def stage_stats(gm: GraphModule, inputs) -> Stats:
    """What one stage costs on `inputs`, flat as the placeholders take them (ch. 5).

    A measuring run is not a call: it runs on copies of the inputs and undoes what it
    writes (buffers, the random generator), so the next call sees the same state.
    """
    with preserved(gm):
        report = run(gm, *copies(tuple(inputs)))
    return Stats(nodes=len(report.nodes), kernels=report.kernels,
                 bytes_moved=report.bytes_moved, peak_bytes=report.peak_bytes)


def _tolerance(gm: GraphModule) -> dict:
    """float32 tolerances, 10x looser when batch norm runs in training mode.

    A training BN divides by the batch's own standard deviation; where a channel
    varies little across the batch (a 1x1 feature map, batch 4) the last-bit
    differences of a rewritten conv (another kernel, another summation order) grow
    past the float32 default. A real miscompilation is orders of magnitude larger.
    """
    from .aliasing import written_by
    training_bn = any(op_name(n) == "batch_norm" and written_by(n)
                      for n in gm.graph.nodes)
    return {"rtol": 1e-3, "atol": 1e-4} if training_bn else {}


def _check(name: str, before: GraphModule, after: GraphModule, inputs,
           truth: Float64Reference) -> None:
    """Debug mode: invariants hold and outputs still agree after stage `name`.

    Both graphs run from the same state: copies of the inputs, buffers restored after
    each run, and the same random seed, so dropout draws the same masks in both.
    Outputs that differ by more than float32's tolerance are judged again against
    a float64 run of the captured graph (`verify.Float64Reference`): the stage
    fails only if it is also further from float64 than the stage before and than
    float32's rounding allows (eager's error, and what rounding its constants does).
    """
    after.graph.lint()
    if not inputs:
        return
    annotate(after, *inputs)  # raises if shapes no longer propagate
    for key, args in enumerate((tuple(inputs), random_like(inputs, seed=1))):
        outs = []
        for gm in (before, after):
            with torch.no_grad(), preserved(gm, seed=0):
                outs.append(Interpreter(gm).run(*copies(args)))
        problem = mismatch(*outs, **_tolerance(before))
        if problem is not None:  # float32's rounding, or an error? Ask float64
            problem = truth.recheck(key, args, outs[1], problem, before_out=outs[0],
                                    **_tolerance(before))
        if problem is not None:
            raise NotEquivalentError(f"after pass {name!r}: {problem}")
