"""The static explorer's HTML fragment: markup, styles and plain JavaScript (ch. 3).

`fragment` turns the precomputed table of `static.collect` into one self-contained
piece of HTML: the drawings inline (each distinct drawing stored once, gzipped and
base64-encoded, unpacked by the browser's own DecompressionStream), the numbers a
JSON table, the bars HTML, nothing fetched from anywhere. Every element id starts
with a per-fragment prefix, so two explorers on one page do not collide.

The markup is English; on a page whose `<html lang>` starts with "zh" (the Chinese
site) the script swaps its fixed labels for `ZH_LABELS`, the library catalog's
Chinese for `EN_LABELS` (graphopt.i18n), so one fragment serves both editions and
the English one stays as it was.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import itertools
import json
import re

from ..i18n import N_, gettext_in
from . import changes
from .plots import NODES_NOTE, NODES_NOTE_ZH, ROWS, ROWS_ZH, error_html

_counter = itertools.count(1)

# The fixed labels by place, English as the markup below shows them (the catalog's
# keys); {n}, {k}, {rounds}, {threads}, {noise}, {pass}, {why} are filled in.
EN_LABELS = {
    "title": N_("pass explorer: {name}"),  # the default title (StaticExplorer)
    "intro": N_("(static: all {n} combinations of the {k} passes that change this "
                "model precomputed; tick a box to apply a pass; ticked passes run in "
                "the order listed, left to right)"),
    "reset": N_("reset"), "current": N_("after the ticked passes"),
    "baseline": N_("<b>baseline</b>: every pass off"),
    "timed": N_("Times: measured on the CPU when this page was built, median of "
                "{rounds} interleaved rounds on {threads} thread(s) after a warm-up, "
                "each distinct graph in the same rounds as the baseline (equal graphs "
                "share one time; the ratio is that run's). This build's noise (the "
                "spread of the baseline's rounds, or how far two timings of it "
                "differ) is at most {noise}: smaller differences read 'no measurable "
                "change'."),
    "untimed": N_("Times were not measured for this page."),
    "natural": N_("Graphs are drawn at their natural size, so every label stays "
                  "legible: a graph wider than its panel scrolls, and opens on the "
                  "first node the ticked passes changed."),
    "idle": N_("greyed out, idle: "),
    "idle_why": N_("{pass}: changes nothing on this model ({why})"),
    "not_measured": N_("not measured"), "same_time": N_("no measurable change"),
    "no_stream": N_("This browser cannot unpack the drawings (no "
                    "DecompressionStream)."),
}
HEADS = (N_("metric"), N_("baseline (no passes)"), N_("selected"),
         N_("selected / baseline"))
# On a zh page the script swaps them for the catalog's Chinese; the idle reasons and
# the outline legend too (`changes.NOTHING_ZH`, `changes.TEXT`).
ZH_LABELS = {
    **{k: gettext_in("zh", v) for k, v in EN_LABELS.items()},
    "heads": [gettext_in("zh", h) for h in HEADS],
    "nodes_note": NODES_NOTE_ZH,
    "rows": ROWS_ZH, "nothing": changes.NOTHING_ZH,
    "nothing_en": {why: p for p, why in changes.NOTHING.items()},
    "diff": changes.TEXT["zh"],
}


def _scoped(svg: str, prefix: str) -> str:
    # graphviz numbers its elements node1, edge1...: prefix them so pages stay valid
    return re.sub(r'\bid="', f'id="{prefix}-', svg)


def _packed(svg: str) -> str:
    return base64.b64encode(gzip.compress(svg.encode(), mtime=0)).decode("ascii")


def fragment(title: str, data: dict, selected: frozenset) -> str:
    """The explorer as HTML + plain JavaScript; every id carries a unique prefix."""
    digest = hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]
    uid = f"gox{next(_counter)}-{digest}"
    passes, active = data["passes"], data["active"]
    selected = {p for p, on in zip(passes, active) if on and p in selected}
    # data-combo is a bitmask over every listed pass; the table is indexed by the
    # bitmask over the active ones (idle passes cannot be ticked)
    mask = sum(1 << i for i, p in enumerate(passes) if p in selected)
    # a default title names the model: a zh page says it in Chinese
    prefix = EN_LABELS["title"].split("{")[0]
    named = title[len(prefix):] if title.startswith(prefix) else None
    payload = {"passes": passes, "active": active, "idle": data["idle"],
               "model": named,
               "combos": data["combos"],
               "device": data["device"], "units": data["units"], "rows": ROWS,
               "timing": data["timing"], "zh": ZH_LABELS,
               "svgs": [_packed(_scoped(s, uid)) for s in data["svgs"]]}
    boxes = "".join(_box(uid, i, p, p in selected, data["idle"].get(p))
                    for i, p in enumerate(passes))
    first = _scoped(data["svgs"][data["combos"][_compact(data, mask)]["svg"]], uid)
    return _TEMPLATE.format(
        uid=uid, title=html.escape(title), boxes=boxes, first=first,
        baseline=_scoped(data["baseline"], uid + "-base"),
        timed=html.escape(_timing_text(data)), nodes_note=html.escape(NODES_NOTE),
        intro=html.escape(EN_LABELS["intro"].format(n=len(data["combos"]),
                                                    k=sum(active))),
        reset=EN_LABELS["reset"], current=EN_LABELS["current"],
        baseline_caption=EN_LABELS["baseline"], natural=EN_LABELS["natural"],
        head0=HEADS[0], head1=HEADS[1], head2=HEADS[2], head3=HEADS[3],
        css=changes.outline_css(f"#{uid}"), n=len(data["combos"]), mask=mask,
        k=sum(active), idle=_idle_text(data["idle"]),
        data=json.dumps(payload, separators=(",", ":")).replace("</", "<\\/"),
        script=_SCRIPT.replace("__UID__", uid))


def _box(uid: str, i: int, name: str, checked: bool, idle: str | None) -> str:
    """A pass's checkbox; an idle pass's is disabled and says why."""
    attrs = " checked" if checked else ""
    if idle:
        attrs += f" disabled title='{html.escape(idle, quote=True)}'"
    style = "margin-right:12px;white-space:nowrap" + (";color:#999" if idle else "")
    return (f"<label style='{style}'><input type='checkbox' id='{uid}-pass-{i}' "
            f"data-pass='{html.escape(name)}'{attrs}> {html.escape(name)}</label>")


def _compact(data: dict, mask: int) -> int:
    """A bitmask over every pass -> the bitmask over the active ones."""
    active = [i for i, on in enumerate(data["active"]) if on]
    return sum(1 << j for j, i in enumerate(active) if mask >> i & 1)


def _idle_text(idle: dict) -> str:
    if not idle:
        return ""
    lines = "".join("<div>" + html.escape(EN_LABELS["idle_why"].format(
        **{"pass": p, "why": why})) + "</div>" for p, why in idle.items())
    return (f"<div class='gox-idle' style='color:#666'>{EN_LABELS['idle']}{lines}"
            "</div>")


def _timing_text(data: dict) -> str:
    t = data["timing"]
    if t is None:
        return EN_LABELS["untimed"]
    return EN_LABELS["timed"].format(rounds=t["rounds"], threads=t["threads"],
                                     noise=f"{t['noise']:.0%}")


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
#{uid} .gox-pair {{display: flex; flex-direction: column; gap: 8px;}}
#{uid} .gox-panel {{min-width: 0; margin: 0;}}
#{uid} .gox-scroll {{overflow: auto; max-height: 70vh; border: 1px solid #ddd;}}
#{uid} .gox-scroll svg {{max-width: none; height: auto; display: block;
  margin: 0 auto;}}
#{uid} .gox-note {{color: #744210;}}
#{uid} :focus-visible {{outline: 3px solid #1565c0; outline-offset: 2px;}}
@media (max-width: 600px) {{ #{uid} .gox-bar {{display: none;}} }}
{css}
</style>
<div><b>{title}</b> <small>{intro}</small></div>
<div class="gox-passes" style="margin:6px 0">{boxes}
<button type="button" id="{uid}-reset">{reset}</button></div>{idle}
<div id="{uid}-notes"></div>
<div class="gox-table"><table><thead><tr><th>{head0}</th><th>{head1}</th>
<th>{head2}</th><th>{head3}</th></tr></thead>
<tbody id="{uid}-numbers"></tbody></table></div>
<div><small>{nodes_note} {timed} {natural}</small></div>
<div class="gox-pair">
<figure class="gox-panel gox-current"><figcaption><b>{current}</b>
<span id="{uid}-diff"></span></figcaption>
<div class="gox-scroll gox-graph" id="{uid}-graph">{first}</div></figure>
<figure class="gox-panel gox-base"><figcaption>{baseline_caption}
</figcaption><div class="gox-scroll">{baseline}</div></figure>
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
  var zh = /^zh/i.test(document.documentElement.lang || "") ? data.zh : null;
  function say(key, english) { return zh ? zh[key] : english; }
  function fill(text, values) {
    return text.replace(/\{(\w+)\}/g, function (_, k) { return values[k]; });
  }
  function localise() {  // a Chinese page: the fixed labels of the markup, once
    var t = data.timing, q = function (s) { return root.querySelector(s); };
    var smalls = root.querySelectorAll(":scope > div > small");
    smalls[0].textContent = fill(zh.intro, {n: data.combos.length,
      k: data.active.filter(Boolean).length});
    smalls[1].textContent = zh.nodes_note + (t ? fill(zh.timed, {rounds: t.rounds,
      threads: t.threads, noise: Math.round(100 * t.noise) + "%"}) : zh.untimed) +
      zh.natural;
    q("#" + uid + "-reset").textContent = zh.reset;
    if (data.model) q(":scope > div > b").textContent = fill(zh.title,
      {name: data.model});
    root.querySelectorAll("thead th").forEach(function (th, i) {
      th.textContent = zh.heads[i];
    });
    q(".gox-current figcaption b").textContent = zh.current;
    q(".gox-base figcaption").innerHTML = zh.baseline;
    var idle = q(".gox-idle");
    if (idle) idle.innerHTML = esc(zh.idle) + Object.keys(data.idle).map(function (p) {
      var why = zh.nothing[p] || zh.diff.other;
      return "<div>" + esc(fill(zh.idle_why, {pass: p, why: why})) + "</div>";
    }).join("");
  }
  // The notes and legend are built in English by Python; on a Chinese page the
  // fixed ones are rewritten here (what the passes note themselves stays English).
  var IDLE = /^(\w+): changed nothing here \((.*)\)$/;
  function note(n) {
    var m = zh && IDLE.exec(n);
    if (!m) return n;
    var p = zh.nothing_en[m[2]] === m[1] ? m[1] : null;
    return fill(zh.diff.idle, {p: m[1], why: p ? zh.nothing[p] : zh.diff.other});
  }
  function legend(h) {
    if (!zh) return h;
    var t = zh.diff, count = function (word) {
      return function (_, k) { return t[word] + t.open + k + t.close; };
    };
    return h.replace(">same graph as the baseline<", ">" + t.same + "<")
      .replace(/\bnew \((\d+)\)/, count("new"))
      .replace(/\brewritten \((\d+)\)/, count("changed"))
      .replace(/\bremoved \((\d+)\): (.*)<\/span>/, function (_, k, names) {
        names = names === "none" ? t.none : names.split(", ").join(t.comma);
        return count("removed")(_, k) + t.colon + names + "</span>";
      });
  }
  function label(m, text) {
    text = zh ? zh.rows[m] || text : text;
    var u = data.units[m];
    return u ? text + " (" + u[0] + ")" : text;
  }
  function fmt(m, v) {
    if (v === null || v === undefined) return say("not_measured", "not measured");
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
    if (m === "time" && combo.same_time) {
      return say("same_time", "no measurable change");
    }
    if (m === "time" && combo.time_ratio) return combo.time_ratio.toFixed(2) + "\u00d7";
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
      return '<div class="gox-note">\u24d8 ' + esc(note(n)) + "</div>";
    }).join("");
    diff.innerHTML = legend(combo.diff);
  }
  function compact(mask) {  // every pass -> the active ones (the table's index)
    var c = 0, j = 0;
    data.active.forEach(function (on, i) {
      if (on) { if (mask >> i & 1) c |= 1 << j; j += 1; }
    });
    return c;
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
    var mask = wanted, combo = data.combos[compact(mask)];
    numbers(combo);
    if (combo.svg === shown) { root.setAttribute("data-combo", mask); return; }
    if (typeof DecompressionStream === "undefined") {
      graph.textContent = say("no_stream",
        "This browser cannot unpack the drawings (no DecompressionStream).");
      return;
    }
    unpack(combo.svg).then(function (svg) {
      if (mask !== wanted) return;  // a later click won the race
      graph.innerHTML = svg;
      shown = combo.svg;
      focus(graph);
      root.setAttribute("data-combo", mask);
    });
  }
  // A graph wider than its panel opens where it changed (else on its first op),
  // not on its top-left corner, which may hold nothing but unused inputs.
  function focus(panel) {
    var marked = Array.prototype.slice.call(
      panel.querySelectorAll(".gox-new, .gox-changed"));
    if (!marked.length) marked = [panel.querySelector("g.node")].filter(Boolean);
    if (!marked.length || panel.scrollWidth <= panel.clientWidth + 1 &&
        panel.scrollHeight <= panel.clientHeight + 1) return;
    var top = function (e) { return e.getBoundingClientRect().top; };
    var target = marked.reduce(function (a, b) { return top(b) < top(a) ? b : a; });
    var p = panel.getBoundingClientRect(), t = target.getBoundingClientRect();
    panel.scrollLeft += t.left + t.width / 2 - (p.left + p.width / 2);
    panel.scrollTop += Math.max(0, t.top - p.top - 24);
  }
  boxes.forEach(function (b) { b.addEventListener("change", show); });
  document.getElementById(uid + "-reset").addEventListener("click", function () {
    boxes.forEach(function (b) { b.checked = false; });  // idle ones stay off
    show();
  });
  if (zh) localise();
  shown = data.combos[compact(Number(root.getAttribute("data-combo")))].svg;
  show();  // also honours boxes the browser restored on a reload
  focus(graph);
  root.setAttribute("data-ready", "1");
})();
"""
