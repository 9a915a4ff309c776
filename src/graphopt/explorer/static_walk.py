"""The static explorer's precomputation: tickable combinations, one walk, no modules.

Chapter 3 introduces the explorer. The site's explorer has no kernel, so every
combination a reader can tick is computed beforehand. Three things keep that
proportional to what changes rather than to 2^passes:

1. Only passes that change this model are combined (`active_passes`); the others
   are shown idle, with the reason.
2. Equal graphs are shared: an edge (graph, pass) -> graph is computed once, and a
   graph's drawing, counts and time are taken once per structural key
   (`engine.signature`).
3. Modules are not kept. The combinations are walked depth first along the prefix
   tree ({a} -> {a, b} -> {a, b, c}); only the path being walked holds modules
   (at most one per pass), built lazily and dropped on the way back up:

       capture ── a ── a,b ── a,b,c        live: capture, a, a,b, a,b,c
                 │     └─── a,c            (the rest: SVG text and numbers)
                 └─ b ── b,c

Each new graph is timed as soon as it is built, together with the baseline in the
same interleaved rounds (the baseline twice, so each run measures its own noise).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import torch

from .. import measure
from ..measure.progress import bar
from . import changes
from .engine import THREADS, Engine, _io_nodes, _run_stats, signature


@dataclass
class Frame:
    """One combination on the path being walked; its module is built on demand."""

    order: tuple[str, ...]  # the ticked passes, in the order they ran
    sig: str
    module: object = None  # dropped when the walk leaves this combination
    parent: Frame | None = None
    notes: tuple[str, ...] = ()  # what the last pass noted (PassResult.notes)


def apply(engine: Engine, name: str, module):
    """One pass on `module`: the next module and the pass's notes."""
    res = engine.optimize(module, *engine.inputs, passes=[name], stats=False)
    last = res.stages[-1]
    return last.module, tuple(getattr(last.result, "notes", None) or ())


def active_passes(engine: Engine) -> tuple[list[str], dict[str, str]]:
    """(passes that change this model, {idle pass: why}), in the explorer's order.

    A pass is active when it changes the captured graph on its own or changes the
    graph it gets in the full pipeline (after every earlier pass). Combining a pass
    that does neither would only repeat graphs a reader has already seen.
    """
    base = engine.result(())
    sigs, module = [base.signature], base.module
    for p in engine.passes:  # the full pipeline, one stage alive at a time
        module = apply(engine, p, module)[0]
        sigs.append(signature(module))
    del module
    active, idle = [], {}
    for i, p in enumerate(engine.passes):
        if sigs[i + 1] != sigs[i] or signature(apply(engine, p, base.module)[0]) \
                != base.signature:
            active.append(p)
        else:
            idle[p] = changes.NOTHING.get(p, "nothing it rewrites")
    return active, idle


def time_against(engine: Engine, module, budget_s: float) -> dict:
    """`module`'s median time, its ratio to the baseline and whether that ratio is
    within this run's noise, from one interleaved run with the baseline (twice)."""
    base = engine.result(()).module
    fns = {"base": _forward(base, engine.inputs),
           "graph": _forward(module, engine.inputs)}
    fns["again"] = fns["base"]  # the baseline a second time: this run's noise
    with torch.no_grad():
        cmp = measure.compare(fns, rounds=9, warmup=3, threads=THREADS,
                              min_run_time=3 * budget_s, device="cpu")
    a, b, t = cmp["base"].median, cmp["again"].median, cmp["graph"].median
    noise = max(abs(a - b) / min(a, b), cmp["base"].spread) if min(a, b) else 0.0
    return {"time": t, "time_ratio": t / a if a else None, "noise": noise,
            "same_time": abs(t - a) <= noise * a, "threads": cmp.threads}


def _forward(module, args):
    # forward, not __call__: see Engine._runner (the capture's input-checking hook)
    forward = getattr(module, "forward", module)
    return lambda: forward(*args)


class Walk:
    """Walks every combination of the active passes; keeps drawings and numbers."""

    def __init__(self, engine: Engine, active, measure_time: bool, budget_s: float):
        self.engine, self.active = engine, list(active)
        self.measure_time, self.budget_s = measure_time, budget_s
        self.edges: dict[tuple[str, str], tuple[str, tuple]] = {}
        self.graphs: dict[str, dict] = {}  # signature -> drawing index and numbers
        self.svgs: list[str] = []
        self._svg_index: dict[str, int] = {}
        self.combos: dict[int, dict] = {}  # bitmask over `active` -> combination
        self.applied = 0  # pass applications, the walk's unit of work

    def run(self) -> list[dict]:
        """Every combination, indexed by a bitmask over the active passes."""
        base = self.engine.result(())
        root = Frame((), base.signature, base.module)
        g = self.graphs[root.sig] = self.describe(base.module, base.signature)
        if g["time"] is not None:  # the baseline against itself: no change
            g.update(time_ratio=1.0, same_time=True)
        # A full collection walks every object torch and transformers hold (0.8 s
        # each on BERT, a minute over the walk); frozen, it scans only the walk's own.
        gc.collect()
        gc.freeze()
        desc = f"explorer: {self.engine.model_name}"
        try:
            with bar(2 ** len(self.active), desc) as pb:
                self._visit(root, 0, 0, pb)
        finally:
            gc.unfreeze()
        return [self.combos[m] for m in range(2 ** len(self.active))]

    def _visit(self, f: Frame, mask: int, start: int, pb) -> None:
        self.combos[mask] = self.combo(f)
        pb.update(1)
        for j in range(start, len(self.active)):
            child = self.child(f, self.active[j])
            self._visit(child, mask | 1 << j, j + 1, pb)
            if child.module is not None:
                child.module = None  # the walk leaves it: free its weights now;
                gc.collect()  # a GraphModule and its graph form a cycle

    def module(self, f: Frame):
        if f.module is None:  # reached through a known edge: rebuild from its parent
            f.module, _ = self._apply(f.order[-1], self.module(f.parent))
        return f.module

    def child(self, f: Frame, name: str) -> Frame:
        known = self.edges.get((f.sig, name))
        if known is not None:
            return Frame(f.order + (name,), known[0], None, f, known[1])
        module, notes = self._apply(name, self.module(f))
        sig = signature(module)
        self.edges[(f.sig, name)] = (sig, notes)
        if sig not in self.graphs:
            self.graphs[sig] = self.describe(module, sig)
        return Frame(f.order + (name,), sig, module, f, notes)

    def _apply(self, name, module):
        self.applied += 1
        return apply(self.engine, name, module)

    def describe(self, module, sig: str) -> dict:
        """What a graph shows and costs: its drawing (stored once) and its numbers."""
        e = self.engine
        stats, predicted = _run_stats(module, e.inputs)
        d = changes.diff(e.result(()).module, module)
        from ..viz import draw
        title = (f"{e.model_name}: graph after the ticked passes: {stats.nodes} "
                 f"operator nodes, {stats.kernels} kernels; {len(d.new)} new and "
                 f"{len(d.changed)} rewritten nodes outlined, {len(d.removed)} removed")
        svg = changes.label(changes.highlight(draw(module).svg(), d), title)
        if svg not in self._svg_index:
            self._svg_index[svg] = len(self.svgs)
            self.svgs.append(svg)
        g = {"svg": self._svg_index[svg], "nodes": int(stats.nodes),
             "io_nodes": _io_nodes(module), "kernels": int(stats.kernels),
             "bytes_moved": _plain(stats.bytes_moved),
             "peak_bytes": _plain(stats.peak_bytes), "diff": changes.legend_html(d),
             "predicted": predicted,
             "time": None, "time_ratio": None, "same_time": None}
        if self.measure_time:
            g.update(time_against(e, module, self.budget_s))
        return g

    def combo(self, f: Frame) -> dict:
        g = self.graphs[f.sig]
        c = {k: v for k, v in g.items() if k not in ("noise", "threads")}
        c["notes"] = self.notes(f)
        return c

    def notes(self, f: Frame) -> list[str]:
        """As `changes.idle_notes`: a line per ticked pass that changed nothing,
        and what the passes noted, in the order they ran."""
        path = []
        while f.parent is not None:
            path.append(f)
            f = f.parent
        lines = []
        for fr in reversed(path):
            p = fr.order[-1]
            if fr.sig == fr.parent.sig:
                why = changes.NOTHING.get(p, "nothing it rewrites")
                lines.append(f"{p}: changed nothing here ({why})")
            lines += [n if n.startswith(p) else f"{p}: {n}" for n in fr.notes]
        return lines


def _plain(n):
    """A count as JSON can hold it: an int, or a symbolic size as its expression."""
    try:
        return int(n)
    except (TypeError, ValueError, RuntimeError):
        return str(n)
