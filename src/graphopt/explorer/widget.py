"""The pass explorer: tick optimization passes on and off, watch graph, time and memory.

Introduced in chapter 3 and used again in chapters 4-6. `explore(model, *inputs)` shows
a checkbox per pass of `graphopt.PIPELINE`, the graph the ticked passes leave behind
(drawn by `graphopt.draw`: fused groups as clusters, one colour per op kind), and bar
charts of time, bytes moved, kernel launches and peak memory against the baseline
(every pass off).

It stays quick because `engine.Engine` computes each combination of passes
once and caches it; `plots.py` draws the costs. Only "measure" times real
runs, in a background thread with a progress bar.

With `static=True`, or when the environment sets GRAPHOPT_STATIC=1 (the site build
does), `explore` precomputes every combination and returns a self-contained HTML
fragment with plain JavaScript instead (see `static.py`).
"""

from __future__ import annotations

import html
import os
import threading
import time

import torch

from ..errors import GraphoptError
from .engine import Engine
from .plots import error_html, numbers, numbers_html, plot_png

# Scale a wide graph down to the panel instead of scrolling sideways.
_SVG_CSS = "<style>.graphopt-graph svg {max-width: 100%; height: auto;}</style>"


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
        from .static import StaticExplorer
        return StaticExplorer(model, *inputs, passes=passes, selected=selected,
                              title=title)
    return Explorer(model, *inputs, passes=passes, selected=selected, devices=devices,
                    prefetch=prefetch, title=title)


def available_devices() -> list[str]:
    """The devices a learner can time on: always the CPU, CUDA when torch sees one."""
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


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
            text = (str(e) if isinstance(e, GraphoptError)
                    else f"{type(e).__name__}: {e}")
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
