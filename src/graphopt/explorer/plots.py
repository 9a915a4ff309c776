"""The explorer's cost panel: baseline vs selection as bar charts and a table.

Chapter 3 introduces the explorer; `widget.Explorer` shows these next to the graph.
"""

from __future__ import annotations

import html
import io

from .engine import Engine
from ..interpret import fmt_bytes

_METRICS = (("time", "time (ms)"), ("bytes_moved", "bytes moved (MiB)"),
            ("kernels", "kernel launches"), ("peak_bytes", "peak memory (MiB)"))
_SCALE = {"time": 1e3, "bytes_moved": 1 / 2**20, "kernels": 1, "peak_bytes": 1 / 2**20}
_ROWS = (("nodes", "graph nodes"), ("time", "time"), ("bytes_moved", "bytes moved"),
         ("kernels", "kernel launches"), ("peak_bytes", "peak memory"))
BASE_COLOUR, SEL_COLOUR = "#9aa5b1", "#2b6cb0"


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
