"""The pass explorer without a kernel: every combination precomputed, plain JavaScript.

Chapter 3 introduces the explorer; the static site shows this form of it. The fragment
is self-contained: the drawings are inline (each distinct drawing stored once, gzipped
and base64-encoded, unpacked by the browser's own DecompressionStream), the numbers are
a JSON table, the bars are HTML, and nothing is fetched from anywhere. Every element id
starts with a per-fragment prefix, so two explorers on one page do not collide.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import itertools
import json
import re

from ..errors import GraphoptError
from . import changes
from .engine import Engine
from .plots import NODES_NOTE, ROWS, _io_nodes, error_html, units

_counter = itertools.count(1)


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


def _scoped(svg: str, prefix: str) -> str:
    # graphviz numbers its elements node1, edge1...: prefix them so pages stay valid
    return re.sub(r'\bid="', f'id="{prefix}-', svg)


def _packed(svg: str) -> str:
    return base64.b64encode(gzip.compress(svg.encode(), mtime=0)).decode("ascii")


def fragment(title: str, data: dict, selected: frozenset) -> str:
    """The explorer as HTML + plain JavaScript; every id carries a unique prefix."""
    digest = hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]
    uid = f"gox{next(_counter)}-{digest}"
    passes = data["passes"]
    mask = sum(1 << i for i, p in enumerate(passes) if p in selected)
    payload = {"passes": passes, "combos": data["combos"], "device": data["device"],
               "units": data["units"], "rows": ROWS,
               "svgs": [_packed(_scoped(s, uid)) for s in data["svgs"]]}
    boxes = "".join(
        f"<label style='margin-right:12px;white-space:nowrap'><input type='checkbox' "
        f"id='{uid}-pass-{i}' data-pass='{html.escape(p)}'"
        f"{' checked' if p in selected else ''}> {html.escape(p)}</label>"
        for i, p in enumerate(passes))
    first = _scoped(data["svgs"][data["combos"][mask]["svg"]], uid)
    return _TEMPLATE.format(
        uid=uid, title=html.escape(title), boxes=boxes, first=first,
        baseline=_scoped(data["baseline"], uid + "-base"),
        timed=html.escape(_timing_text(data)), nodes_note=html.escape(NODES_NOTE),
        css=changes.outline_css(f"#{uid}"), n=2 ** len(passes), mask=mask,
        data=json.dumps(payload, separators=(",", ":")).replace("</", "<\\/"),
        script=_SCRIPT.replace("__UID__", uid))


def _timing_text(data: dict) -> str:
    t = data["timing"]
    if t is None:
        return "Times were not measured for this page."
    return (f"Times: measured on the CPU when this page was built, median of "
            f"{t['rounds']} interleaved rounds on {t['threads']} thread(s) after a "
            f"warm-up, every distinct graph in the same rounds (equal graphs share one "
            f"time). This build's noise (the spread of the baseline's rounds, or how "
            f"far two timings of it differ) is {t['noise']:.0%}: smaller differences "
            "read 'no measurable change'.")


def error_fragment(title: str, message: str) -> str:
    return (f"<div class='graphopt-static-explorer'><b>{html.escape(title)}</b>"
            f"{error_html(message)}</div>")


_TEMPLATE = """<div class="graphopt-static-explorer" id="{uid}" data-combo="{mask}">
<style>
#{uid} {{font-family: sans-serif; font-size: 13px; border: 1px solid #ddd;
  padding: 8px; margin: 8px 0;}}
#{uid} .gox-bar {{height: 10px; display: inline-block; vertical-align: middle;}}
#{uid} table {{border-collapse: collapse; margin: 6px 0;}}
#{uid} td, #{uid} th {{padding: 2px 8px; text-align: left; border: none;}}
#{uid} .gox-table {{overflow-x: auto;}}
#{uid} .gox-pair {{display: flex; flex-wrap: wrap; gap: 8px;}}
#{uid} .gox-panel {{flex: 1 1 360px; min-width: 0; margin: 0;}}
#{uid} .gox-scroll {{overflow: auto; max-height: 70vh; border: 1px solid #ddd;}}
#{uid} .gox-scroll svg {{max-width: none; height: auto;}}
#{uid} .gox-scroll.gox-fit svg {{max-width: 100%;}}
#{uid} .gox-scroll {{cursor: zoom-out;}}
#{uid} .gox-scroll.gox-fit {{cursor: zoom-in;}}
#{uid} .gox-note {{color: #744210;}}
@media (max-width: 600px) {{ #{uid} .gox-bar {{display: none;}} }}
{css}
</style>
<div><b>{title}</b> <small>(static: all {n} combinations precomputed; tick a box to
apply a pass; ticked passes run in the order listed, left to right)</small></div>
<div class="gox-passes" style="margin:6px 0">{boxes}
<button type="button" id="{uid}-reset">reset</button></div>
<div id="{uid}-notes"></div>
<div class="gox-table"><table><thead><tr><th></th><th>baseline (no passes)</th>
<th>selected</th><th>selected / baseline</th></tr></thead>
<tbody id="{uid}-numbers"></tbody></table></div>
<div><small>{nodes_note} {timed} Graphs are drawn at natural size: scroll them,
or click one to fit it to its panel (click again to zoom back in).</small></div>
<div class="gox-pair">
<figure class="gox-panel gox-base"><figcaption><b>baseline</b>: every pass off
</figcaption><div class="gox-scroll">{baseline}</div></figure>
<figure class="gox-panel gox-current"><figcaption><b>after the ticked passes</b>
<span id="{uid}-diff"></span></figcaption>
<div class="gox-scroll gox-graph" id="{uid}-graph">{first}</div></figure>
</div>
<script type="application/json" id="{uid}-data">{data}</script>
<script>{script}</script>
</div>"""

# Plain JavaScript, no library: pick the combination from the ticked boxes (a bitmask
# over the passes), unpack its drawing once, and redraw the numbers as HTML bars in
# the units the Python side chose from the baseline (the same for every combination).
_SCRIPT = r"""
(function () {
  var uid = "__UID__";
  var root = document.getElementById(uid);
  var data = JSON.parse(document.getElementById(uid + "-data").textContent);
  var graph = document.getElementById(uid + "-graph");
  var table = document.getElementById(uid + "-numbers");
  var notes = document.getElementById(uid + "-notes");
  var diff = document.getElementById(uid + "-diff");
  var boxes = data.passes.map(function (_, i) {
    return document.getElementById(uid + "-pass-" + i);
  });
  var unpacked = {};
  var shown = -1, wanted = 0;
  function label(m, text) {
    var u = data.units[m];
    return u ? text + " (" + u[0] + ")" : text;
  }
  function fmt(m, v) {
    if (v === null || v === undefined) return "not measured";
    var u = data.units[m];
    if (!u) return String(v);
    var x = v / u[1];
    return u[0] === "B" || x >= 100 ? x.toFixed(0) : x.toPrecision(3);
  }
  function bar(v, max, colour) {
    var w = (v === null || !max) ? 0 : Math.max(1, Math.round(160 * v / max));
    return '<span class="gox-bar" style="width:' + w + 'px;background:' + colour +
      '"></span> ';
  }
  function ratio(m, b, s, combo) {
    if (!b || s === null) return "";
    if (m === "time" && combo.same_time) return "no measurable change";
    return (s / b).toFixed(2) + "\u00d7";
  }
  function esc(t) {
    var d = document.createElement("div");
    d.textContent = t;
    return d.innerHTML;
  }
  function numbers(combo) {
    var base = data.combos[0], html = "";
    data.rows.forEach(function (row) {
      var m = row[0], b = base[m], s = combo[m];
      var max = Math.max(b || 0, s || 0);
      html += '<tr data-metric="' + m + '"><td>' + label(m, row[1]) + "</td><td>" +
        bar(b, max, "#9aa5b1") + fmt(m, b) + '</td><td class="gox-selected">' +
        bar(s, max, "#2b6cb0") + "<b>" + fmt(m, s) + "</b></td><td>" +
        ratio(m, b, s, combo) + "</td></tr>";
    });
    table.innerHTML = html;
    notes.innerHTML = combo.notes.map(function (n) {
      return '<div class="gox-note">\u24d8 ' + esc(n) + "</div>";
    }).join("");
    diff.innerHTML = combo.diff;
  }
  function unpack(i) {
    if (unpacked[i] === undefined) {
      var bin = Uint8Array.from(atob(data.svgs[i]), function (c) {
        return c.charCodeAt(0);
      });
      var stream = new Blob([bin]).stream()
        .pipeThrough(new DecompressionStream("gzip"));
      unpacked[i] = new Response(stream).text();
    }
    return unpacked[i];
  }
  function show() {
    wanted = 0;
    boxes.forEach(function (b, i) { if (b.checked) wanted |= 1 << i; });
    var mask = wanted, combo = data.combos[mask];
    numbers(combo);
    if (combo.svg === shown) { root.setAttribute("data-combo", mask); return; }
    if (typeof DecompressionStream === "undefined") {
      graph.textContent =
        "This browser cannot unpack the drawings (no DecompressionStream).";
      return;
    }
    unpack(combo.svg).then(function (svg) {
      if (mask !== wanted) return;  // a later click won the race
      graph.innerHTML = svg;
      shown = combo.svg;
      root.setAttribute("data-combo", mask);
    });
  }
  boxes.forEach(function (b) { b.addEventListener("change", show); });
  root.querySelectorAll(".gox-scroll").forEach(function (panel) {
    panel.addEventListener("click", function () {
      panel.classList.toggle("gox-fit");  // overview <-> legible natural size
    });
  });
  document.getElementById(uid + "-reset").addEventListener("click", function () {
    boxes.forEach(function (b) { b.checked = false; });
    show();
  });
  shown = data.combos[Number(root.getAttribute("data-combo"))].svg;
  show();  // also honours boxes the browser restored on a reload
  root.setAttribute("data-ready", "1");
})();
"""
