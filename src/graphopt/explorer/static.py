"""The pass explorer without a kernel: every combination precomputed, plain JavaScript.

Chapter 3 introduces the explorer; the static site shows this form of it. Here every
combination of passes is computed and measured once (`collect`); the fragment that
shows them, self-contained HTML and JavaScript, is built in `static_fragment`.
"""

from __future__ import annotations

import html

from ..errors import GraphoptError
from . import changes
from .engine import Engine
from .plots import _io_nodes, units
from .static_fragment import error_fragment, fragment


class StaticExplorer:
    """Every combination of passes, precomputed, as one HTML fragment."""

    def __init__(self, model, *inputs, passes=None, selected=(), title=None,
                 measure=True, time_budget_s=0.1, **kwargs):
        self.title = title or f"pass explorer: {type(model).__name__}"
        self.error = None
        self.engine = None
        try:
            self.engine = Engine(model, inputs, passes, kwargs=kwargs)
            self.data = collect(self.engine, measure, time_budget_s)
        except GraphoptError as e:
            self.error = str(e)
        selected = frozenset(selected)
        self.html = (error_fragment(self.title, self.error) if self.error else
                     fragment(self.title, self.data, selected))

    def _repr_html_(self) -> str:
        return self.html

    def page(self) -> str:
        """A whole HTML document holding just this explorer (for saving or testing)."""
        return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
                "<meta name='viewport' content='width=device-width, initial-scale=1'>"
                f"<title>{html.escape(self.title)}</title></head><body>"
                f"{self.html}</body></html>")

    def __repr__(self) -> str:
        if self.error:
            return f"StaticExplorer(error: {self.error.splitlines()[0]})"
        return (f"StaticExplorer({self.engine.model_name}, "
                f"{len(self.data['combos'])} combinations, "
                f"{len(self.data['svgs'])} distinct graphs)")


def collect(engine: Engine, measure: bool, time_budget_s: float) -> dict:
    """Graph and numbers for every combination, indexed by a bitmask over the passes.

    Times come from ONE interleaved run over every distinct graph, after a warm-up
    (`Engine.measure_all`): no combination is timed cold, equal graphs share one
    time, and a difference below the run's own noise is marked as such.
    """
    svgs, svg_index, combos, masks = [], {}, [], []
    base_svg = None
    for mask in range(2 ** len(engine.passes)):
        passes = [p for i, p in enumerate(engine.passes) if mask >> i & 1]
        r = engine.result(passes)
        base_svg, cur, d = changes.drawings(engine, passes)
        cur = _inline_svg(cur)
        if cur not in svg_index:
            svg_index[cur] = len(svgs)
            svgs.append(cur)
        masks.append(passes)
        combos.append({"svg": svg_index[cur], "nodes": r.nodes,
                       "io_nodes": _io_nodes(r.module), "kernels": r.kernels,
                       "bytes_moved": r.bytes_moved, "peak_bytes": r.peak_bytes,
                       "time": None, "same_time": None,
                       "notes": changes.idle_notes(engine, passes),
                       "diff": changes.legend_html(d)})
    timing = None
    if measure:
        distinct = len({engine.result(p).signature for p in masks})
        run = engine.measure_all(masks, "cpu", budget_s=time_budget_s * (distinct + 1))
        for passes, c in zip(masks, combos):
            c["time"] = engine.time(passes, "cpu")
            c["same_time"] = engine.within_noise(passes, "cpu")
        timing = {"rounds": run.rounds, "threads": run.threads, "noise": run.noise}
    base = combos[0]
    unit = units({"time": (base["time"], None),
                  "bytes_moved": (base["bytes_moved"], None),
                  "peak_bytes": (base["peak_bytes"], None)})
    return {"passes": list(engine.passes), "combos": combos, "svgs": svgs,
            "baseline": _inline_svg(base_svg), "device": "cpu", "timing": timing,
            "units": {k: list(v) for k, v in unit.items()}}


def _inline_svg(svg: str) -> str:
    """Graphviz's SVG minus the XML prologue, ready to sit inside HTML."""
    return svg[svg.index("<svg"):].strip()

