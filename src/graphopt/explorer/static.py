"""The pass explorer without a kernel: every tickable combination precomputed, plain JS.

Chapter 3 introduces the explorer; the static site shows this form of it. `collect`
computes and measures every combination of the passes that change the model, once
(the walk is in `static_walk`); the fragment that shows them, self-contained HTML
and JavaScript, is built in `static_fragment`.
"""

from __future__ import annotations

import html

from ..errors import ExplorerBudgetError, GraphoptError
from .engine import Engine
from .plots import units
from .static_fragment import EN_LABELS, error_fragment, fragment
from .static_walk import Walk, active_passes

# The budget `collect` checks before it builds anything (see its docstring).
MAX_COMBINATIONS = 256
MAX_BYTES = 1 << 30

class StaticExplorer:
    """Every combination of passes, precomputed, as one HTML fragment."""

    def __init__(self, model, *inputs, passes=None, selected=(), title=None,
                 measure=True, time_budget_s=0.1, max_combinations=MAX_COMBINATIONS,
                 max_bytes=MAX_BYTES, **kwargs):
        self.title = title or EN_LABELS["title"].format(name=type(model).__name__)
        self.error = None
        self.engine = None
        try:
            self.engine = Engine(model, inputs, passes, kwargs=kwargs)
            self.data = collect(self.engine, measure, time_budget_s,
                                max_combinations, max_bytes)
        except ExplorerBudgetError:
            raise  # the caller asked for too much: say so, do not draw an error box
        except GraphoptError as e:
            self.error = str(e)
        selected = frozenset(selected)
        self.html = (error_fragment(self.title, self.error) if self.error else
                     fragment(self.title, self.data, selected))

    def _repr_html_(self) -> str:
        return self.html

    @property
    def widget(self) -> "StaticExplorer":
        """What to display: the live `Explorer`'s is its ipywidgets box, a static
        one's is itself, so `display(explorer.widget)` works in JupyterLab and on
        the site."""
        return self

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
                f"{len(self.data['combos'])} combinations of "
                f"{sum(self.data['active'])} active passes, "
                f"{len(self.data['svgs'])} distinct graphs)")


def collect(engine: Engine, measure: bool, time_budget_s: float,
            max_combinations: int = MAX_COMBINATIONS,
            max_bytes: int = MAX_BYTES) -> dict:
    """Graph and numbers for every tickable combination, by a bitmask over the
    active passes (those that change this model, `static_walk.active_passes`).

    Equal graphs share one drawing, one count and one time; no module is kept
    (`static_walk.Walk`). Each distinct graph is timed as it is built, with the
    baseline in the same interleaved rounds: its ratio to the baseline is that
    run's, and a difference below that run's own noise is marked as such.

    The budget, checked before any combination is built: at most
    `max_combinations` (256: eight active passes) and an estimated `max_bytes`
    (1 GiB) of memory, counted as one copy of the weights per pass on the walked
    path plus one baseline-sized drawing per combination. Over it,
    `ExplorerBudgetError` names the active passes to choose from with `passes=`.

    Measured (2026-12-03, 2 shared CPU cores, fresh process, time_budget_s=0.01),
    peak RSS: ResNet-18 1x3x64x64 (6 active passes with `backend`, 64
    combinations) 724 MiB, 43 s; BERT (8 active, 256 combinations) 892 MiB,
    108 s; before the backend became a stage: ResNet-34 1005-1149 MiB,
    MobileNetV3-Small 64x64 495 MiB, ResNet-50 1236 MiB. Each stage shares the
    weights its pass did not change (`passes.result.working_copy`); with a deep
    copy per pass ResNet-34 took 1773 MiB, and all 512 combinations with their
    modules kept passed 20 GB on ResNet-18.
    """
    active, idle = active_passes(engine)
    check_budget(engine, active, max_combinations, max_bytes)
    walk = Walk(engine, active, measure, time_budget_s)
    combos = walk.run()
    base = combos[0]
    timing = None
    if measure:
        noise = max(g["noise"] for g in walk.graphs.values())
        threads = walk.graphs[engine.result(()).signature]["threads"]
        timing = {"rounds": 9, "threads": threads, "noise": noise}
    unit = units({"time": (base["time"], None),
                  "bytes_moved": (base["bytes_moved"], None),
                  "peak_bytes": (base["peak_bytes"], None),
                  "predicted": (base["predicted"], None)})
    return {"passes": list(engine.passes), "active": [p in active for p in
                                                      engine.passes],
            "idle": idle, "combos": combos, "svgs": walk.svgs,
            "baseline": _baseline_svg(engine), "device": "cpu", "timing": timing,
            "units": {k: list(v) for k, v in unit.items()},
            "applied": walk.applied}


def estimate_bytes(engine: Engine, active) -> int:
    """What the walk may hold at once: a copy of the weights per pass on the path,
    and one drawing (about the baseline's size) per combination. An upper bound:
    a stage shares the weights its pass did not change (`passes.result`)."""
    gm = engine.result(()).module
    weights = sum(t.numel() * t.element_size()
                  for t in [*gm.parameters(), *gm.buffers()])
    drawing = len(engine.svg(()))
    return weights * (len(active) + 1) + drawing * 2 ** len(active)


def check_budget(engine: Engine, active, max_combinations: int,
                 max_bytes: int) -> None:
    """Raise `ExplorerBudgetError` before the walk when it would pass the budget."""
    n, need = 2 ** len(active), estimate_bytes(engine, active)
    if n <= max_combinations and need <= max_bytes:
        return
    raise ExplorerBudgetError(
        f"explore(static=True) on {engine.model_name} would precompute {n} "
        f"combinations of {len(active)} passes (about {need / 2**20:.0f} MiB), over "
        f"the budget of {max_combinations} combinations and {max_bytes / 2**20:.0f} "
        f"MiB. Pass fewer passes, e.g. passes={active[:max(1, len(active) // 2)]!r}; "
        f"these change this model: {', '.join(active)}. (Or raise max_combinations= "
        "/ max_bytes= on StaticExplorer.)")


def _baseline_svg(engine: Engine) -> str:
    from . import changes
    base_svg, _, _ = changes.drawings(engine, ())
    return _inline_svg(base_svg)


def _inline_svg(svg: str) -> str:
    """Graphviz's SVG minus the XML prologue, ready to sit inside HTML."""
    return svg[svg.index("<svg"):].strip()

