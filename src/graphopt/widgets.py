"""The pass explorer: tick optimization passes on and off, watch graph, time and memory.

Introduced in chapter 3 and used again in chapters 4-6. `explore(model, *inputs)` shows
a checkbox per pass of `graphopt.PIPELINE`, the graph the ticked passes leave behind
(drawn by `graphopt.draw`: fused groups as clusters, one colour per op kind), and bar
charts of time, bytes moved, kernel launches and peak memory against the baseline
(every pass off).

Why it stays quick: every combination of passes is a node of a prefix tree. The
passes always run in pipeline order, so the graph for {fold_conv_bn, fuse_elementwise}
is fuse_elementwise applied to the graph for {fold_conv_bn}: each combination costs one
pass application, cached under `frozenset(passes)`. Many combinations end in the same
graph (DCE on a graph with nothing dead): equal graphs share one drawing, one count
and one timing per device. Bytes, kernels and peak memory come
from the pipeline's own `graphopt.run` statistics (deterministic); only "measure" times
real runs, in a background thread with a progress bar.

With `static=True`, or when the environment sets GRAPHOPT_STATIC=1 (the site build
does), `explore` precomputes every combination and returns a self-contained HTML
fragment with plain JavaScript instead (see `explorer_static.py`).
"""

from __future__ import annotations

import copy
import html
import io
import itertools
import os
import statistics
import threading
import time
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from .errors import GraphoptError, InputError
from .interpret import fmt_bytes


def explore(model, *inputs, passes=None, selected=(), static=None, devices=None,
            prefetch=True, title=None):
    """Toggle optimization passes on `model`; watch the graph, time and memory change.

    `passes` restricts which pipeline passes get a checkbox (default: all of
    `graphopt.PIPELINE`); `selected` are ticked at the start. `static=None` follows the
    GRAPHOPT_STATIC environment variable; a static explorer is plain HTML + JavaScript
    that keeps working without a kernel. Chapter 3 introduces it.
    """
    if static is None:
        static = os.environ.get("GRAPHOPT_STATIC", "") not in ("", "0")
    if static:
        from .explorer_static import StaticExplorer
        return StaticExplorer(model, *inputs, passes=passes, selected=selected,
                              title=title)
    return Explorer(model, *inputs, passes=passes, selected=selected, devices=devices,
                    prefetch=prefetch, title=title)


def available_devices() -> list[str]:
    """The devices a learner can time on: always the CPU, CUDA when torch sees one."""
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def _pipeline():
    """The real pipeline, imported late: the passes load when an explorer is made."""
    from .passes import pipeline
    return pipeline.optimize, tuple(pipeline.PIPELINE)


# ------------------------------------------------------------------ the cached engine

@dataclass
class Result:
    """One combination of passes: its graph and its deterministic costs."""

    passes: tuple[str, ...]  # in pipeline order
    module: torch.fx.GraphModule
    nodes: int
    kernels: int
    bytes_moved: int
    peak_bytes: int
    signature: str = ""  # equal for equal graphs, whatever path produced them


def _count(value) -> int:
    return value if isinstance(value, int) else len(value)


_PLAIN = (int, float, str, bool, tuple, type(None))


def signature(gm: torch.fx.GraphModule) -> str:
    """What makes two graphs cost the same: code, submodule settings, weight shapes.

    Many combinations of passes end in the same graph (DCE on a graph with nothing
    dead, CSE with no duplicates): they share one drawing, one cost and one timing.
    """
    parts = []
    for name, m in gm.named_modules():
        inner = getattr(m, "gm", m)
        code = inner.code if isinstance(inner, torch.fx.GraphModule) else ""
        attrs = sorted((k, v) for k, v in vars(m).items()
                       if not k.startswith("_") and isinstance(v, _PLAIN))
        parts.append(f"{name}:{type(m).__name__}:{attrs}\n{code}")
    tensors = itertools.chain(gm.named_parameters(), gm.named_buffers())
    parts += [f"{n}:{tuple(t.shape)}:{t.dtype}" for n, t in tensors]
    return "\n".join(parts)


class Engine:
    """Computes and caches every combination of passes for one model and its inputs."""

    def __init__(self, model, inputs, passes=None):
        self.optimize, pipeline = _pipeline()
        passes = pipeline if passes is None else tuple(passes)
        unknown = [p for p in passes if p not in pipeline]
        if unknown:
            raise InputError(f"unknown pass name(s) {', '.join(map(repr, unknown))}; "
                             f"choose among graphopt.PIPELINE: {', '.join(pipeline)}.")
        self.passes = tuple(p for p in pipeline if p in passes)  # pipeline order
        self.inputs = tuple(inputs)
        self.model_name = type(model).__name__
        self.hits = self.misses = 0
        self._results: dict[frozenset, Result] = {}
        self._by_signature: dict[str, Result] = {}
        self._svgs: dict[str, str] = {}
        self._times: dict[tuple[str, str], float] = {}
        self._on_device: dict[tuple[str, str], torch.nn.Module] = {}
        self._lock = threading.RLock()
        res = self.optimize(model, *self.inputs, passes=[])
        self._store((), res.stages[0].module, res.stages[0].stats)

    def key(self, passes) -> frozenset:
        passes = frozenset(passes)
        unknown = passes - set(self.passes)
        if unknown:
            raise InputError(f"pass(es) {sorted(unknown)} are not toggleable here; "
                             f"this explorer has {', '.join(self.passes)}.")
        return passes

    def ordered(self, passes) -> tuple[str, ...]:
        return tuple(p for p in self.passes if p in passes)

    def combinations(self) -> list[frozenset]:
        """Every subset of the passes, smallest first (parents before children)."""
        return [frozenset(c) for r in range(len(self.passes) + 1)
                for c in itertools.combinations(self.passes, r)]

    def cached(self, passes) -> bool:
        return self.key(passes) in self._results

    def result(self, passes) -> Result:
        """The graph and costs after `passes` (in pipeline order) ran on the capture."""
        k = self.key(passes)
        hit = self._results.get(k)
        if hit is not None:
            self.hits += 1
            return hit
        with self._lock:
            if k in self._results:
                self.hits += 1
                return self._results[k]
            self.misses += 1
            order = self.ordered(k)
            parent = self.result(order[:-1])
            # One pass on the parent's graph: the same stage optimize() builds in order.
            # Costs are counted below, once per distinct graph.
            res = self.optimize(parent.module, *self.inputs, passes=[order[-1]],
                                stats=False)
            return self._store(order, res.stages[-1].module, None)

    def _store(self, order, module, stats) -> Result:
        sig = signature(module)
        same = self._by_signature.get(sig)
        if same is not None:
            r = Result(tuple(order), module, same.nodes, same.kernels, same.bytes_moved,
                       same.peak_bytes, sig)
        else:
            if stats is None:
                stats = _run_stats(module, self.inputs)
            r = Result(tuple(order), module, _count(stats.nodes), int(stats.kernels),
                       int(stats.bytes_moved), int(stats.peak_bytes), sig)
            self._by_signature[sig] = r
        self._results[frozenset(order)] = r
        return r

    def svg(self, passes) -> str:
        """The drawing of the graph for `passes`, as SVG text (cached per graph)."""
        r = self.result(passes)
        if r.signature not in self._svgs:
            from .viz import draw
            # No title: equal graphs then draw equally, and the static fragment
            # stores each distinct drawing once.
            self._svgs[r.signature] = draw(r.module).svg()
        return self._svgs[r.signature]

    def time(self, passes, device="cpu") -> float | None:
        """The measured median time in seconds, or None when not measured yet."""
        return self._times.get((self.result(passes).signature, device))

    def measure(self, passes, device="cpu", budget_s=0.5, progress=None) -> float:
        """Time the graph for `passes` on `device`: warm-up, then the median of runs.

        Stops after `budget_s` seconds of timed runs (at least 3 runs), so a busy
        machine makes a measurement noisier, not longer.
        """
        sig = self.result(passes).signature
        module, args = self._placed(passes, device)
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

        def call() -> float:
            start = time.perf_counter()
            module(*args)
            sync()
            return time.perf_counter() - start

        with self._lock, torch.no_grad():
            # Warm up: the first calls pay for lazy initialisation (allocator, oneDNN
            # primitives, CUDA context) that later calls do not.
            first = min(call() for _ in range(3))
            repeats = max(3, min(200, int(budget_s / max(first, 1e-6))))
            times, start = [], time.perf_counter()
            while len(times) < repeats:
                times.append(call())
                if progress is not None:
                    progress(len(times), repeats)
                if len(times) >= 3 and time.perf_counter() - start > budget_s:
                    break
            if progress is not None:
                progress(repeats, repeats)
        self._times[(sig, device)] = statistics.median(times)
        return self._times[(sig, device)]

    def _placed(self, passes, device):
        r = self.result(passes)
        if device == "cpu":
            return r.module, self.inputs
        if device.startswith("cuda") and not torch.cuda.is_available():
            from .errors import NoGPUError
            raise NoGPUError("CUDA was asked for but torch sees no GPU; time on 'cpu'.")
        if (r.signature, device) not in self._on_device:
            with warnings.catch_warnings():  # deepcopy of an exported graph warns
                warnings.simplefilter("ignore", FutureWarning)
                moved = copy.deepcopy(r.module).to(device)
            self._on_device[(r.signature, device)] = moved
        args = tuple(x.to(device) for x in self.inputs)
        return self._on_device[(r.signature, device)], args


def _run_stats(module, inputs):
    """Nodes, kernels, bytes moved and peak memory, counted as the pipeline does."""
    from .interpret import run
    report = run(module, *inputs)
    return SimpleNamespace(nodes=len(report.nodes), kernels=report.kernels,
                           bytes_moved=report.bytes_moved, peak_bytes=report.peak_bytes)


# ------------------------------------------------------------------ plots

_METRICS = (("time", "time (ms)"), ("bytes_moved", "bytes moved (MiB)"),
            ("kernels", "kernel launches"), ("peak_bytes", "peak memory (MiB)"))
_SCALE = {"time": 1e3, "bytes_moved": 1 / 2**20, "kernels": 1, "peak_bytes": 1 / 2**20}
_ROWS = (("nodes", "graph nodes"), ("time", "time"), ("bytes_moved", "bytes moved"),
         ("kernels", "kernel launches"), ("peak_bytes", "peak memory"))
BASE_COLOUR, SEL_COLOUR = "#9aa5b1", "#2b6cb0"
# Scale a wide graph down to the panel instead of scrolling sideways.
_SVG_CSS = "<style>.graphopt-graph svg {max-width: 100%; height: auto;}</style>"


def numbers(engine: Engine, passes, device="cpu") -> dict:
    """Baseline and selection side by side: {metric: (baseline, selection)}."""
    base, sel = engine.result(()), engine.result(passes)
    return {"time": (engine.time((), device), engine.time(passes, device)),
            "bytes_moved": (base.bytes_moved, sel.bytes_moved),
            "kernels": (base.kernels, sel.kernels),
            "peak_bytes": (base.peak_bytes, sel.peak_bytes),
            "nodes": (base.nodes, sel.nodes)}


def plot_png(nums: dict) -> bytes:
    """Four small bar charts, baseline vs selection, as PNG bytes (no pyplot state)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(4.8, 3.6), dpi=80)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.08, top=0.92, wspace=0.4,
                        hspace=0.5)
    for ax, (metric, label) in zip(fig.subplots(2, 2).flat, _METRICS):
        values = [None if v is None else v * _SCALE[metric] for v in nums[metric]]
        heights = [0 if v is None else v for v in values]
        bars = ax.bar(["baseline", "selected"], heights,
                      color=[BASE_COLOUR, SEL_COLOUR])
        for bar, v in zip(bars, values):
            text = "?" if v is None else (f"{v:.0f}" if v >= 100 else f"{v:.3g}")
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
        if all(v is None for v in values):
            ax.set_yticks([])
            ax.text(0.5, 0.5, "press\nmeasure", transform=ax.transAxes, ha="center",
                    va="center", fontsize=9, color="#666666")
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.margins(y=0.25)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def numbers_html(nums: dict) -> str:
    """The same numbers as a small table, with the ratio selection / baseline."""
    def fmt(metric, v):
        if v is None:
            return "not measured"
        if metric == "time":
            return f"{v * 1e3:.3f} ms"
        return fmt_bytes(v) if metric in ("bytes_moved", "peak_bytes") else str(v)

    rows = []
    for metric, label in _ROWS:
        b, s = nums[metric]
        ratio = f"{s / b:.2f}×" if b and s is not None else ""
        rows.append(f"<tr><td>{label}</td><td>{fmt(metric, b)}</td>"
                    f"<td><b>{fmt(metric, s)}</b></td><td>{ratio}</td></tr>")
    return ("<table class='graphopt-numbers'><tr><th></th><th>baseline</th>"
            "<th>selected</th><th>selected / baseline</th></tr>" + "".join(rows)
            + "</table>")


def error_html(message: str) -> str:
    """A graphopt error shown in the explorer: the learner sees advice, not a trace."""
    return ("<div class='graphopt-error' style='border:1px solid #c53030;"
            "background:#fff5f5;color:#742a2a;padding:8px;white-space:pre-wrap'>"
            "<b>graphopt could not explore this model</b>\n"
            f"{html.escape(message)}</div>")


# ------------------------------------------------------------------ the live widget

def _ipywidgets():
    import ipywidgets
    return ipywidgets


class Explorer:
    """The live explorer: ipywidgets controls over a cached `Engine` (chapter 3)."""

    def __init__(self, model, *inputs, passes=None, selected=(), devices=None,
                 prefetch=True, title=None):
        w = _ipywidgets()
        self.error = None
        self.engine = None
        name = title or f"pass explorer: {type(model).__name__}"
        header = w.HTML(f"<b>{html.escape(name)}</b>")
        try:
            self.engine = Engine(model, inputs, passes)
        except GraphoptError as e:
            self.error = str(e)
            self.widget = w.VBox([header, w.HTML(error_html(self.error))])
            return
        self._plots: dict[tuple, bytes] = {}
        self._measuring: threading.Thread | None = None
        self._prefetching: threading.Thread | None = None
        self.last_refresh_s = 0.0
        self._prefetch_wanted = prefetch
        self._batch = False
        self._build(w, header, selected, devices or available_devices())
        self.refresh()

    def _build(self, w, header, selected, devices):
        self.checkboxes = {
            p: w.Checkbox(value=p in selected, description=p, indent=False,
                          layout=w.Layout(width="auto"))
            for p in self.engine.passes}
        self.device = w.Dropdown(options=devices, value=devices[0],
                                 description="device",
                                 layout=w.Layout(width="180px"))
        self.reset_button = w.Button(description="reset", icon="undo")
        self.measure_button = w.Button(description="measure", button_style="primary",
                                       icon="clock-o")
        self.progress = w.IntProgress(min=0, max=1, value=0,
                                      layout=w.Layout(width="160px"))
        self.status = w.HTML()
        self.graph = w.HTML(layout=w.Layout(overflow="auto", max_height="640px",
                                            border="1px solid #ddd", flex="3 1 0%"))
        self.plot = w.Image(format="png", layout=w.Layout(width="384px"))
        self.numbers = w.HTML()
        for box in self.checkboxes.values():
            box.observe(self._on_change, names="value")
        self.device.observe(self._on_change, names="value")
        self.reset_button.on_click(lambda _: self.reset())
        self.measure_button.on_click(lambda _: self.measure())
        controls = w.HBox([self.device, self.reset_button, self.measure_button,
                           self.progress, self.status])
        boxes = w.HBox(list(self.checkboxes.values()),
                       layout=w.Layout(flex_flow="row wrap"))
        # the graph on the left, what it costs on the right
        costs = w.VBox([self.plot, self.numbers], layout=w.Layout(flex="0 0 auto"))
        panels = w.HBox([self.graph, costs], layout=w.Layout(width="100%"))
        self.widget = w.VBox([header, boxes, controls, panels])
        self.widget.add_class("graphopt-explorer")  # handles for browser tests and CSS
        self.graph.add_class("graphopt-graph")
        self.numbers.add_class("graphopt-numbers")

    # ---- what is ticked
    @property
    def selection(self) -> frozenset:
        return frozenset(p for p, box in self.checkboxes.items() if box.value)

    def select(self, passes) -> None:
        """Tick exactly `passes` (the display refreshes once)."""
        wanted = self.engine.key(passes)
        self._batch = True
        try:
            for p, box in self.checkboxes.items():
                box.value = p in wanted
        finally:
            self._batch = False
        self.refresh()

    def reset(self) -> None:
        """Untick every pass: back to the captured graph."""
        self.select(())

    def _on_change(self, _change) -> None:
        if not self._batch:
            self.refresh()
            self._start_prefetch()

    # ---- drawing
    def refresh(self) -> None:
        """Show the graph and numbers of the current selection (cached once seen)."""
        start = time.perf_counter()
        sel, device = self.selection, self.device.value
        try:
            svg = self.engine.svg(sel)
            nums = numbers(self.engine, sel, device)
        except Exception as e:  # a callback's traceback would land in no cell
            text = str(e) if isinstance(e, GraphoptError) else f"{type(e).__name__}: {e}"
            self.graph.value = error_html(text)
            self.numbers.value = ""
            return
        key = (tuple(nums[m] for m in ("time", "bytes_moved", "kernels", "peak_bytes")))
        if key not in self._plots:
            self._plots[key] = plot_png(nums)
        self.graph.value = _SVG_CSS + svg
        self.plot.value = self._plots[key]
        self.numbers.value = numbers_html(nums)
        if not self._busy():
            self.status.value = ("<i>press measure to time this selection</i>"
                                 if nums["time"][1] is None else "")
        self.last_refresh_s = time.perf_counter() - start

    # ---- measuring, off the kernel's main thread
    def _busy(self) -> bool:
        return self._measuring is not None and self._measuring.is_alive()

    def measure(self, wait=False) -> None:
        """Time the baseline and the selection on the chosen device, in a thread."""
        if self._busy():
            return
        sel, device = self.selection, self.device.value
        todo = [k for k in dict.fromkeys([frozenset(), sel])
                if self.engine.time(k, device) is None or k == sel]
        self._start_prefetch()
        self.measure_button.disabled = True
        self.progress.max, self.progress.value = 100 * len(todo), 0
        self._measuring = threading.Thread(target=self._measure, args=(todo, device),
                                           daemon=True)
        self._measuring.start()
        if wait:
            self.wait()

    def _measure(self, todo, device) -> None:
        try:
            for i, k in enumerate(todo):
                label = " + ".join(self.engine.ordered(k)) or "baseline"
                self.status.value = f"measuring {html.escape(label)} on {device}…"

                def tick(done, total, i=i):
                    self.progress.value = 100 * i + (100 * done) // total
                self.engine.measure(k, device, progress=tick)
            self.status.value = "measured"
        except Exception as e:  # shown in the widget: a thread's traceback is lost
            self.status.value = error_html(f"{type(e).__name__}: {e}")
        finally:
            self.measure_button.disabled = False
        self.refresh()

    def wait(self, timeout=None) -> None:
        """Block until a running measurement (and prefetch) finish; used by tests."""
        for t in (self._measuring, self._prefetching):
            if t is not None:
                t.join(timeout)

    def _start_prefetch(self) -> None:
        # Only once a learner interacts: a notebook run top to bottom (nbconvert, the
        # site build) must not have a thread competing with the cells timed after it.
        if self._prefetch_wanted and self._prefetching is None:
            self._prefetching = threading.Thread(target=self._prefetch, daemon=True)
            self._prefetching.start()

    def _prefetch(self) -> None:
        """Fill the cache for every combination: later toggles only look things up.

        The combinations one click away from the current selection come first.
        """
        sel = self.selection
        near = [sel ^ {p} for p in self.engine.passes]
        for k in dict.fromkeys(near + self.engine.combinations()):
            try:
                self.engine.svg(k)
            except Exception:  # the toggle that needs it will show the error
                continue

    # ---- display
    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)

    def __repr__(self) -> str:
        if self.error:
            return f"Explorer(error: {self.error.splitlines()[0]})"
        return (f"Explorer({self.engine.model_name}, "
                f"passes={list(self.engine.passes)}, "
                f"selected={sorted(self.selection)})")
