"""The pass explorer: tick optimization passes on and off, watch graph, time and memory.

Introduced in chapter 3 and used again in chapters 4-6. `explore(model, *inputs)` shows
a checkbox per pass of `graphopt.PIPELINE` (or of `passes=`, in that order: the ticked
passes run in the order listed), the baseline graph (every pass off) next to the graph
the ticked passes leave behind, with new and rewritten nodes outlined and removed ones
listed (`changes.py`), a note for every ticked pass that changed nothing, and bar
charts of time, bytes moved, kernel launches and peak memory against the baseline.
Graphs are drawn at their natural size in scrolling panels, never squeezed to fit.

It stays quick because `engine.Engine` computes each combination of passes once and
caches it; `plots.py` draws the costs. Only "measure" times real runs (baseline and
selection in the same interleaved rounds), in a background thread.

With `static=True`, or when the environment sets GRAPHOPT_STATIC=1 (the site build
does), `explore` precomputes every combination and returns a self-contained HTML
fragment with plain JavaScript instead (see `static.py`).

Its fixed labels, notes, legends and charts are English, or Chinese when GRAPHOPT_LANG
starts with "zh" (`make lab LANG=zh` sets it); the static fragment follows the page's
`<html lang>` instead. Every fixed word comes from the library's message catalog
(graphopt.i18n), as the passes' notes do.
"""

from __future__ import annotations

import html
import os
import threading
import time

import torch

from ..errors import GraphoptError
from ..i18n import N_, gettext_in, language
from . import changes
from .engine import Engine
from .plots import error_html, numbers, numbers_html, plot_png

# Natural size: a graph squeezed into the panel has unreadable 4-6 px labels; the
# panels scroll instead (JupyterLab's output CSS would otherwise cap svg width).
# The HTML widget's box shrinks to its content: make it the panel's width, or a wide
# graph would push the second panel off the screen. "fit" is the overview button.
_CSS = ("<style>.graphopt-graph svg {{max-width: {width} !important; height: auto;}}\n"
        ".graphopt-graph .widget-html-content {{display: block; width: 100%;}}\n"
        + changes.outline_css(".graphopt-graph").replace("{", "{{").replace("}", "}}")
        + "</style>")
# The widget's fixed labels: English, the keys of the library's catalog
# (graphopt.i18n); GRAPHOPT_LANG=zh picks the Chinese entries. English stays as it
# was, so the saved outputs of the English chapters do not change.
_LABELS = {"title": N_("pass explorer: {name}"), "baseline": N_("baseline"),
           "base_caption": N_("<b>baseline</b>: every pass off"),
           "current_caption": N_("<b>after the ticked passes</b> "),
           "device": N_("device"), "reset": N_("reset"), "fit": N_("fit graphs"),
           "fit_tip": N_("shrink both graphs to their panels (labels get small)"),
           "measure": N_("measure"), "order": N_("passes, run in the order listed:"),
           "press": N_("<i>press measure to time this selection</i>"),
           "measuring": N_("measuring baseline and {label} on {device}…"),
           "measured": N_("measured")}
LABELS = {lang: {k: gettext_in(lang, v) for k, v in _LABELS.items()}
          for lang in ("en", "zh")}


def labels() -> dict[str, str]:
    """The live widget's labels in the language GRAPHOPT_LANG asks for (default: en)."""
    return LABELS[language()]


_PANEL = ("<figure class='gox-panel {cls}' style='flex:1 1 100%;min-width:0;"
          "margin:0'><figcaption>{caption}</figcaption><div class='gox-scroll' "
          "style='overflow:auto;max-height:640px;border:1px solid #ddd'>{svg}</div>"
          "</figure>")


def graphs_html(engine: Engine, passes, fit: bool = False) -> str:
    """The current graph over the baseline, each the output's full width, at
    natural size in scrolling panels, or shrunk to the panels' width with `fit`."""
    base, cur, d = changes.drawings(engine, passes)
    text = labels()
    left = _PANEL.format(cls="gox-base", svg=base, caption=text["base_caption"])
    right = _PANEL.format(cls="gox-current", svg=cur,
                          caption=text["current_caption"]
                          + changes.legend_html(d, language()))
    css = _CSS.format(width="100%" if fit else "none")
    # the graph the ticked passes produce first, full width; the baseline under it
    return (css + "<div class='gox-pair' style='display:flex;flex-wrap:wrap;"
            f"gap:8px'>{right}{left}</div>")


def notes_html(engine: Engine, passes) -> str:
    lines = changes.idle_notes(engine, passes, language())
    return "".join(f"<div class='gox-note'>&#9432; {html.escape(x)}</div>"
                   for x in lines)


def explore(model, *inputs, passes=None, selected=(), static=None, devices=None,
            prefetch=True, title=None, **kwargs):
    """Toggle optimization passes on `model`; watch the graph, time and memory change.

    `passes` chooses which pipeline passes get a checkbox and the order they run in
    (default: all of `graphopt.PIPELINE`, in its order); `selected` are ticked at the
    start. Other keyword arguments are the model's keyword inputs, as in
    `model(*inputs, **kwargs)`. `static=None` follows the GRAPHOPT_STATIC environment
    variable; a static explorer is plain HTML + JavaScript that keeps working without
    a kernel. Chapter 3 introduces it.
    Bounded: ResNet-18 64x64 live (made, one toggle) 547 MiB RSS, 1229 MiB address
    space, 31 s; static 878 MiB, 1638 MiB, 57 s on 2 cores (README: Bounds).
    """
    if static is None:
        static = os.environ.get("GRAPHOPT_STATIC", "") not in ("", "0")
    if static:
        from .static import StaticExplorer
        return StaticExplorer(model, *inputs, passes=passes, selected=selected,
                              title=title, **kwargs)
    return Explorer(model, *inputs, passes=passes, selected=selected, devices=devices,
                    prefetch=prefetch, title=title, **kwargs)


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
                 prefetch=True, title=None, **kwargs):
        w = _ipywidgets()
        self.error = None
        self.engine = None
        self.lang, self.text = language(), labels()
        name = title or self.text["title"].format(name=type(model).__name__)
        header = w.HTML(f"<b>{html.escape(name)}</b>")
        try:
            self.engine = Engine(model, inputs, passes, kwargs=kwargs)
        except GraphoptError as e:
            self.error = str(e)
            self.widget = w.VBox([header, w.HTML(error_html(self.error))])
            return
        self._plots: dict[tuple, bytes] = {}
        self._measuring: threading.Thread | None = None
        self._prefetching: threading.Thread | None = None
        self.last_refresh_s = 0.0
        self._prefetch_wanted = prefetch
        self._prefetched: set[frozenset] = set()
        self._batch = False
        self._build(w, header, selected, devices or available_devices())
        self.refresh()

    def _build(self, w, header, selected, devices):
        text = self.text
        self.checkboxes = {
            p: w.Checkbox(value=p in selected, description=p, indent=False,
                          layout=w.Layout(width="auto"))
            for p in self.engine.passes}
        self.device = w.Dropdown(options=devices, value=devices[0],
                                 description=text["device"],
                                 layout=w.Layout(width="180px"))
        self.reset_button = w.Button(description=text["reset"], icon="undo")
        self.fit_button = w.ToggleButton(description=text["fit"], icon="compress",
                                         tooltip=text["fit_tip"])
        self.measure_button = w.Button(description=text["measure"],
                                       button_style="primary", icon="clock-o")
        self.progress = w.IntProgress(min=0, max=1, value=0,
                                      layout=w.Layout(width="160px"))
        self.status = w.HTML()
        self.graph = w.HTML(layout=w.Layout(width="100%"))
        self.notes = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(width="480px"))
        self.numbers = w.HTML(layout=w.Layout(flex="1 1 320px"))
        for box in self.checkboxes.values():
            box.observe(self._on_change, names="value")
        self.device.observe(self._on_change, names="value")
        self.fit_button.observe(lambda _: self.refresh(), names="value")
        self.reset_button.on_click(lambda _: self.reset())
        self.measure_button.on_click(lambda _: self.measure())
        controls = w.HBox([self.device, self.reset_button, self.fit_button,
                           self.measure_button,
                           self.progress, self.status])
        order = w.HTML(text["order"])
        boxes = w.HBox([order, *self.checkboxes.values()],
                       layout=w.Layout(flex_flow="row wrap"))
        # what it costs on top, then the two graphs side by side at natural size
        costs = w.HBox([self.plot, self.numbers],
                       layout=w.Layout(flex_flow="row wrap", width="100%"))
        self.widget = w.VBox([header, boxes, controls, self.notes, costs, self.graph])
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
            graphs = graphs_html(self.engine, sel, fit=self.fit_button.value)
            notes = notes_html(self.engine, sel)
            nums = numbers(self.engine, sel, device)
        except Exception as e:  # a callback's traceback would land in no cell
            text = (str(e) if isinstance(e, GraphoptError)
                    else f"{type(e).__name__}: {e}")
            self.graph.value = error_html(text)
            self.numbers.value = self.notes.value = ""
            return
        key = tuple(nums[m] for m in ("time", "predicted", "bytes_moved", "kernels",
                                      "peak_bytes", "cuda_peak"))
        if key not in self._plots:
            self._plots[key] = plot_png(nums, self.lang)
        self.graph.value = graphs
        self.notes.value = notes
        self.plot.value = self._plots[key]
        self.numbers.value = numbers_html(nums, self.lang)
        if not self._busy():
            self.status.value = (self.text["press"] if nums["time"][1] is None
                                 else "")
        self.last_refresh_s = time.perf_counter() - start

    # ---- measuring, off the kernel's main thread
    def _busy(self) -> bool:
        return self._measuring is not None and self._measuring.is_alive()

    def measure(self, wait=False) -> None:
        """Time the baseline and the selection on the chosen device, in a thread."""
        if self._busy():
            return
        sel, device = self.selection, self.device.value
        self._start_prefetch()
        self.measure_button.disabled = True
        self.progress.max, self.progress.value = 1, 0
        self._measuring = threading.Thread(target=self._measure, args=(sel, device),
                                           daemon=True)
        self._measuring.start()
        if wait:
            self.wait()

    def _measure(self, sel, device) -> None:
        # baseline and selection in the same interleaved rounds: their ratio is one
        # run's, and the baseline's second timing measures that run's noise
        try:
            text = self.text
            label = " + ".join(self.engine.ordered(sel)) or text["baseline"]
            self.status.value = text["measuring"].format(label=html.escape(label),
                                                         device=device)

            def tick(done, total):
                self.progress.max, self.progress.value = total, done
            self.engine.measure_all([(), sel], device, progress=tick)
            self.status.value = self.text["measured"]
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
        busy = self._prefetching is not None and self._prefetching.is_alive()
        if self._prefetch_wanted and not busy:
            self._prefetching = threading.Thread(target=self._prefetch, daemon=True)
            self._prefetching.start()

    def _prefetch(self) -> None:
        """Draw and count the combinations one click away from the selection, so the
        next toggle only looks things up.

        Not all 2^passes: on ResNet-18 that is minutes of a core in the background.
        The selection is read again after each one, so a click redirects the work.
        """
        done = self._prefetched
        while True:
            sel = self.selection
            todo = [k for k in (sel ^ {p} for p in self.engine.passes)
                    if k not in done]
            if not todo:
                return
            done.add(todo[0])
            try:
                changes.drawings(self.engine, todo[0])
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
