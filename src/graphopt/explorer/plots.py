"""The explorer's cost panel: baseline vs selection as bar charts and a table.

Chapter 3 introduces the explorer; `widget.Explorer` shows these next to the graphs
and `static.py` draws the same rows in JavaScript. One unit per metric, chosen from
the baseline, is used by the charts and the table alike, so a reader never compares
MiB in a chart with KiB in the table.
"""

from __future__ import annotations

import html
import io

from ..i18n import N_, cjk_font, gettext_in
from .engine import PREDICTED_GPU, Engine

BASE_COLOUR, SEL_COLOUR = "#9aa5b1", "#2b6cb0"
# (metric, row label): English, the catalog's keys (graphopt.i18n translates them);
# the unit, where there is one, is appended from `units`
_ROWS = (("nodes", N_("operator nodes (boxes)")),
         ("io_nodes", N_("inputs, weights, output (ellipses)")),
         ("kernels", N_("kernel launches")), ("bytes_moved", N_("bytes moved")),
         ("peak_bytes", N_("peak memory")), ("time", N_("time")),
         ("predicted", N_("time predicted for an {gpu} (a model, not a "
                          "measurement)")))
# measured on a GPU only: the CUDA caching allocator's peak during one call
CUDA_PEAK = ("cuda_peak", N_("peak memory, CUDA allocator"))
PLOTTED = ("time", "predicted", "bytes_moved", "kernels", "peak_bytes", "cuda_peak")
NODES_NOTE = N_("Operator nodes are the boxes of a drawing, the ops that run; the "
                "ellipses are the graph's inputs, weights and output, and the boxes "
                "of the 'op kind' legend are not nodes.")
# the charts are narrow: the prediction's label on two lines there
_CHART_TITLES = {"predicted": N_("time predicted for an {gpu}\n"
                                 "(a model, not measured)"),
                 "cuda_peak": N_("peak, CUDA allocator")}
# The table's and charts' other fixed words; "en" is what the English chapters show.
_TEXT = {"metric": N_("metric"), "baseline": N_("baseline"),
         "selected": N_("selected"),
         "ratio": N_("selected / baseline"), "not_measured": N_("not measured"),
         "same_time": N_("no measurable change"), "press": N_("press\nmeasure"),
         "untimed": N_("Times: press measure."),
         "timed": N_("Times: median of {rounds} interleaved rounds on {threads} "
                     "thread(s), after a warm-up. This run's noise (the spread of "
                     "the baseline's rounds, or how far two timings of it differ) is "
                     "{noise}: smaller differences read 'no measurable change'.")}


def _in(lang: str, text: str) -> str:
    return gettext_in(lang, text).replace("{gpu}", PREDICTED_GPU)


# Each in English and Chinese, from the library's catalog (the static fragment
# carries the Chinese for zh pages)
ROWS = tuple((m, _in("en", t)) for m, t in _ROWS)
ROWS_ZH = {m: _in("zh", t) for m, t in _ROWS}
CUDA_PEAK_ZH = _in("zh", CUDA_PEAK[1])
NODES_NOTE_ZH = _in("zh", NODES_NOTE)
CHART_TITLES = {lang: {m: _in(lang, t) for m, t in _CHART_TITLES.items()}
                for lang in ("en", "zh")}
TEXT = {lang: {k: _in(lang, t) for k, t in _TEXT.items()} for lang in ("en", "zh")}


def row_labels(lang: str = "en", cuda: bool = False) -> dict[str, str]:
    """{metric: row label} in `lang` ("en" or "zh"), without the unit; with the
    CUDA allocator's row when the times were measured on a GPU."""
    labels = dict(ROWS_ZH) if lang == "zh" else dict(ROWS)
    if cuda:
        labels[CUDA_PEAK[0]] = CUDA_PEAK_ZH if lang == "zh" else CUDA_PEAK[1]
    return labels


def numbers(engine: Engine, passes, device="cpu") -> dict:
    """Baseline and selection side by side: {metric: (baseline, selection)}."""
    base, sel = engine.result(()), engine.result(passes)
    run = engine.measured.get(device)
    peaks = {} if run is None else run.peaks
    return {"time": (engine.time((), device), engine.time(passes, device)),
            "predicted": (base.predicted, sel.predicted),
            "cuda_peak": (peaks.get(base.signature), peaks.get(sel.signature)),
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
    unit = {"time": time_unit(nums["time"][0]),
            "bytes_moved": byte_unit(nums["bytes_moved"][0]),
            "peak_bytes": byte_unit(nums["peak_bytes"][0])}
    if "predicted" in nums:
        unit["predicted"] = time_unit(nums["predicted"][0])
    if (nums.get("cuda_peak") or (None,))[0] is not None:
        unit["cuda_peak"] = byte_unit(nums["cuda_peak"][0])
    return unit


def _label(metric: str, text: str, unit: dict) -> str:
    return f"{text} ({unit[metric][0]})" if metric in unit else text


def _value(v, metric: str, unit: dict, lang: str = "en") -> str:
    if v is None:
        return TEXT[lang]["not_measured"]
    if metric not in unit:
        return str(v)
    x = v / unit[metric][1]
    whole = unit[metric][0] == "B" or x >= 100
    return f"{x:.0f}" if whole else f"{x:.3g}"


def plot_png(nums: dict, lang: str = "en") -> bytes:
    """Four small bar charts, baseline vs selection, as PNG bytes (no pyplot state).

    In Chinese the text needs a CJK font: the first one matplotlib finds, or the
    English words where the machine has none (boxes of tofu teach nothing).
    """
    from matplotlib.figure import Figure
    font = cjk_font() if lang == "zh" else None
    lang = lang if font or lang == "en" else "en"
    t = TEXT[lang]
    unit = units(nums)
    fig = Figure(figsize=(4.8, 5.8), dpi=100)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.05, top=0.91, wspace=0.4,
                        hspace=0.75)
    cuda = _has_cuda_peak(nums)
    labels = row_labels(lang, cuda)
    fontdict = {"family": font} if font else None
    for ax, metric in zip(fig.subplots(3, 2).flat, PLOTTED):
        if metric not in labels or metric not in nums:  # no GPU: no allocator chart
            ax.set_axis_off()
            continue
        values = nums[metric]
        heights = [0 if v is None else v / unit.get(metric, ("", 1))[1] for v in values]
        bars = ax.bar([t["baseline"], t["selected"]], heights,
                      color=[BASE_COLOUR, SEL_COLOUR])
        for bar, v in zip(bars, values):
            ax.annotate("?" if v is None else _value(v, metric, unit),
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        if all(v is None for v in values):
            ax.set_yticks([])
            ax.text(0.5, 0.5, t["press"], transform=ax.transAxes, ha="center",
                    va="center", fontsize=9, color="#666666", fontdict=fontdict)
        title = CHART_TITLES[lang].get(metric, labels[metric])
        ax.set_title(_label(metric, title, unit), fontsize=9, fontdict=fontdict)
        ax.tick_params(labelsize=8)
        if font:
            for tick in ax.get_xticklabels():
                tick.set_family(font)
        ax.margins(y=0.25)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _has_cuda_peak(nums: dict) -> bool:
    return any(v is not None for v in nums.get("cuda_peak", (None, None)))


def ratio_text(metric: str, nums: dict, lang: str = "en") -> str:
    b, s = nums.get(metric, (None, None))
    if metric == "time" and b and s is not None and nums["within_noise"]:
        return TEXT[lang]["same_time"]
    return f"{s / b:.2f}×" if b and s is not None else ""


def numbers_html(nums: dict, lang: str = "en") -> str:
    """The same numbers as a small table, with the ratio selection / baseline."""
    unit, t = units(nums), TEXT[lang]
    rows = []
    for metric, text in row_labels(lang, _has_cuda_peak(nums)).items():
        b, s = nums.get(metric, (None, None))
        rows.append(f"<tr data-metric='{metric}'><td>{_label(metric, text, unit)}"
                    f"</td><td>{_value(b, metric, unit, lang)}</td>"
                    f"<td><b>{_value(s, metric, unit, lang)}</b></td>"
                    f"<td>{ratio_text(metric, nums, lang)}</td></tr>")
    note = NODES_NOTE_ZH if lang == "zh" else NODES_NOTE + " "
    return (f"<table class='graphopt-numbers'><tr><th>{t['metric']}</th>"
            f"<th>{t['baseline']}</th><th>{t['selected']}</th>"
            f"<th>{t['ratio']}</th></tr>" + "".join(rows)
            + f"</table><div class='gox-caption'><small>{note}"
            f"{html.escape(timing_note(nums, lang))}</small></div>")


def timing_note(nums: dict, lang: str = "en") -> str:
    """How the times were taken, and how large a difference the run can see."""
    if nums["noise"] is None:
        return TEXT[lang]["untimed"]
    return TEXT[lang]["timed"].format(rounds=nums["rounds"], threads=nums["threads"],
                                      noise=f"{nums['noise']:.0%}")


def error_html(message: str) -> str:
    """A graphopt error shown in the explorer: the learner sees advice, not a trace."""
    return ("<div class='graphopt-error' style='border:1px solid #c53030;"
            "background:#fff5f5;color:#742a2a;padding:8px;white-space:pre-wrap'>"
            "<b>graphopt could not explore this model</b>\n"
            f"{html.escape(message)}</div>")
