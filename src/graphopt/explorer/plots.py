"""The explorer's cost panel: baseline vs selection as bar charts and a table.

Chapter 3 introduces the explorer; `widget.Explorer` shows these next to the graphs
and `static.py` draws the same rows in JavaScript. One unit per metric, chosen from
the baseline, is used by the charts and the table alike, so a reader never compares
MiB in a chart with KiB in the table.
"""

from __future__ import annotations

import html
import io

from .engine import Engine

BASE_COLOUR, SEL_COLOUR = "#9aa5b1", "#2b6cb0"
# (metric, row label); the unit, where there is one, is appended from `units`
ROWS = (("nodes", "operator nodes (boxes)"),
        ("io_nodes", "inputs, weights, output (ellipses)"),
        ("kernels", "kernel launches"), ("bytes_moved", "bytes moved"),
        ("peak_bytes", "peak memory"), ("time", "time"))
PLOTTED = ("time", "bytes_moved", "kernels", "peak_bytes")
NODES_NOTE = ("Operator nodes are the boxes of a drawing, the ops that run; the "
              "ellipses are the graph's inputs, weights and output, and the boxes of "
              "the 'op kind' legend are not nodes.")


def numbers(engine: Engine, passes, device="cpu") -> dict:
    """Baseline and selection side by side: {metric: (baseline, selection)}."""
    base, sel = engine.result(()), engine.result(passes)
    run = engine.measured.get(device)
    return {"time": (engine.time((), device), engine.time(passes, device)),
            "bytes_moved": (base.bytes_moved, sel.bytes_moved),
            "kernels": (base.kernels, sel.kernels),
            "peak_bytes": (base.peak_bytes, sel.peak_bytes),
            "nodes": (base.nodes, sel.nodes),
            "io_nodes": (base.io_nodes, sel.io_nodes),
            "within_noise": engine.within_noise(passes, device),
            "noise": None if run is None else run.noise,
            "rounds": None if run is None else run.rounds,
            "threads": None if run is None else run.threads}


def byte_unit(n: float) -> tuple[str, float]:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return unit, scale
    return "B", 1


def time_unit(seconds: float | None) -> tuple[str, float]:
    for unit, scale in (("s", 1), ("ms", 1e-3)):
        if seconds is not None and seconds >= scale:
            return unit, scale
    return "µs", 1e-6


def units(nums: dict) -> dict:
    """{metric: (unit, scale)}, each from the baseline's value (the fixed side)."""
    return {"time": time_unit(nums["time"][0]),
            "bytes_moved": byte_unit(nums["bytes_moved"][0]),
            "peak_bytes": byte_unit(nums["peak_bytes"][0])}


def _label(metric: str, text: str, unit: dict) -> str:
    return f"{text} ({unit[metric][0]})" if metric in unit else text


def _value(v, metric: str, unit: dict) -> str:
    if v is None:
        return "not measured"
    if metric not in unit:
        return str(v)
    x = v / unit[metric][1]
    whole = unit[metric][0] == "B" or x >= 100
    return f"{x:.0f}" if whole else f"{x:.3g}"


def plot_png(nums: dict) -> bytes:
    """Four small bar charts, baseline vs selection, as PNG bytes (no pyplot state)."""
    from matplotlib.figure import Figure
    unit = units(nums)
    fig = Figure(figsize=(4.8, 3.6), dpi=100)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.08, top=0.92, wspace=0.4,
                        hspace=0.5)
    labels = dict(ROWS)
    for ax, metric in zip(fig.subplots(2, 2).flat, PLOTTED):
        values = nums[metric]
        heights = [0 if v is None else v / unit.get(metric, ("", 1))[1] for v in values]
        bars = ax.bar(["baseline", "selected"], heights,
                      color=[BASE_COLOUR, SEL_COLOUR])
        for bar, v in zip(bars, values):
            ax.annotate("?" if v is None else _value(v, metric, unit),
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        if all(v is None for v in values):
            ax.set_yticks([])
            ax.text(0.5, 0.5, "press\nmeasure", transform=ax.transAxes, ha="center",
                    va="center", fontsize=9, color="#666666")
        ax.set_title(_label(metric, labels[metric], unit), fontsize=9)
        ax.tick_params(labelsize=8)
        ax.margins(y=0.25)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def ratio_text(metric: str, nums: dict) -> str:
    b, s = nums[metric]
    if metric == "time" and b and s is not None and nums["within_noise"]:
        return "no measurable change"
    return f"{s / b:.2f}×" if b and s is not None else ""


def numbers_html(nums: dict) -> str:
    """The same numbers as a small table, with the ratio selection / baseline."""
    unit = units(nums)
    rows = []
    for metric, text in ROWS:
        b, s = nums[metric]
        rows.append(f"<tr data-metric='{metric}'><td>{_label(metric, text, unit)}"
                    f"</td><td>{_value(b, metric, unit)}</td>"
                    f"<td><b>{_value(s, metric, unit)}</b></td>"
                    f"<td>{ratio_text(metric, nums)}</td></tr>")
    return ("<table class='graphopt-numbers'><tr><th></th><th>baseline</th>"
            "<th>selected</th><th>selected / baseline</th></tr>" + "".join(rows)
            + f"</table><div class='gox-caption'><small>{NODES_NOTE} "
            f"{html.escape(timing_note(nums))}</small></div>")


def timing_note(nums: dict) -> str:
    """How the times were taken, and how large a difference the run can see."""
    if nums["noise"] is None:
        return "Times: press measure."
    return (f"Times: median of {nums['rounds']} interleaved rounds on "
            f"{nums['threads']} thread(s), after a warm-up. This run's noise (the "
            f"spread of the baseline's rounds, or how far two timings of it differ) "
            f"is {nums['noise']:.0%}: smaller differences read 'no measurable "
            "change'.")


def error_html(message: str) -> str:
    """A graphopt error shown in the explorer: the learner sees advice, not a trace."""
    return ("<div class='graphopt-error' style='border:1px solid #c53030;"
            "background:#fff5f5;color:#742a2a;padding:8px;white-space:pre-wrap'>"
            "<b>graphopt could not explore this model</b>\n"
            f"{html.escape(message)}</div>")
