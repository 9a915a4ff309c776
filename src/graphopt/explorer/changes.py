"""What the ticked passes changed: nodes new, changed and removed, and passes idle.

Chapter 3 introduces the explorer. It shows the baseline graph (every pass off) next
to the current one; this file finds what differs and marks it on the current
drawing: a node the passes created gets a solid orange outline, a node they rewrote
(same name, other op or inputs) a dashed magenta one (the line's style says it
without the colour), and the nodes they removed are listed
under the drawing, since a removed node cannot be drawn. It also says, per ticked
pass, when that pass changed nothing, so a ticked box that seems dead explains itself.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from torch.fx import GraphModule, Node

from ..i18n import N_, gettext_in, translated

# Outline colours: 3:1 or more (WCAG's contrast for a non-text mark) on the white
# of a drawing and on a dark page (#c05621: 4.6:1 and 3.9:1; #b83280: 5.5:1 and
# 3.2:1). No colour reads 4.5:1 as text on both white and a dark ground, so the
# legend's words keep the page's own text colour and only its swatches are coloured.
NEW_COLOUR, CHANGED_COLOUR = "#c05621", "#b83280"
DASH = {"gox-new": "none", "gox-changed": "4,2"}

# What each pass found nothing of, when it left the graph as it was (English: the
# catalog's keys; graphopt.i18n gives the reader's language).
NOTHING = {
    "eliminate_dead_code": N_("nothing dead: every node feeds the output"),
    "fold_constants": N_("nothing to fold: no op reads only weights and constants"),
    "eliminate_common_subexpressions": N_("no subexpression is computed twice"),
    "fold_conv_bn": N_("no convolution followed by an eval-mode batch norm"),
    "fuse_attention": N_("no matmul -> softmax -> matmul attention to fuse"),
    "fuse_qkv": N_("no two linears read the same input"),
    "fuse_patterns": N_("no fusion pattern matched (Conv+BN+ReLU, Conv+Add+ReLU, ...)"),
    "fuse_elementwise": N_("no chain of two or more elementwise ops to fuse"),
    "convert_layout": N_("no region of two or more convolutions to run channels-last"),
    "lower": N_("no fused elementwise group to turn into a generated kernel"),
    "backend": N_("no fused pattern, convolution or linear to bind a library kernel "
                  "to"),
}
# The notes' and legend's fixed words; "en" is what the English chapters show.
TEXT = {
    "en": {"idle": N_("{p}: changed nothing here ({why})"),
           "other": N_("nothing it rewrites"),
           "same": N_("same graph as the baseline"), "new": N_("new"),
           "changed": N_("rewritten"), "removed": N_("removed"), "none": N_("none"),
           "open": N_(" ("), "close": N_(")"), "colon": N_(": "), "comma": N_(", ")},
}
# The same in Chinese, from the library's catalog (the static fragment carries them)
TEXT["zh"] = {k: gettext_in("zh", v) for k, v in TEXT["en"].items()}
NOTHING_ZH = {p: gettext_in("zh", why) for p, why in NOTHING.items()}


def reason(p: str, lang: str = "en") -> str:
    """Why pass `p` changed nothing, in `lang` ("en" or "zh")."""
    return gettext_in(lang, NOTHING.get(p, TEXT["en"]["other"]))


@dataclass
class Diff:
    """How a graph differs from the baseline, by node name."""

    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _hidden(n: Node) -> bool:
    # the export guard is not drawn (viz.py skips it), so it is never "changed"
    return n.op == "call_module" and str(n.target).startswith("_guards")


def _form(n: Node) -> tuple:
    """What a node computes from what: op, target and its inputs' names."""
    return (n.op, str(n.target), tuple(a.name for a in n.all_input_nodes))


def diff(base: GraphModule, gm: GraphModule) -> Diff:
    """Nodes of `gm` that `base` lacks or computes differently, and nodes it lost."""
    before = {n.name: _form(n) for n in base.graph.nodes if not _hidden(n)}
    after = {n.name: _form(n) for n in gm.graph.nodes if not _hidden(n)}
    d = Diff(removed=[name for name in before if name not in after])
    for name, form in after.items():
        if name not in before:
            d.new.append(name)
        elif form != before[name] and form[0] != "output":
            d.changed.append(name)
    return d


def idle_notes(engine, passes, lang: str = "en") -> list[str]:
    """One line per ticked pass that left its input graph as it was, plus what the
    passes themselves noted (`PassResult.notes`: what they kept and why, English
    data that `i18n.translated` shows in `lang`)."""
    order = engine.ordered(passes)
    lines = []
    for i, p in enumerate(order):
        r = engine.result(order[:i + 1])
        parent = engine.result(order[:i])
        notes = list(getattr(r.step, "notes", None) or ())
        if r.signature == parent.signature:
            lines.append(gettext_in(lang, TEXT["en"]["idle"]).format(
                p=p, why=reason(p, lang)))
        lines += [translated(n, lang) if n.startswith(p)
                  else f"{p}: {translated(n, lang)}" for n in notes]
    return lines


_GROUP = re.compile(r'<g id="([^"]*)" class="(node|cluster)">\s*<title>([^<]*)</title>')


def highlight(svg: str, d: Diff) -> str:
    """Mark new and changed nodes (and fused clusters) with a class and an outline."""
    new, changed = set(d.new), set(d.changed)

    def mark(m):
        gid, kind, title = m.groups()
        name = html.unescape(title)
        if kind == "cluster":
            name = name.removeprefix("cluster_")
        cls = ("gox-new" if name in new else "gox-changed" if name in changed
               else "")
        if not cls:
            return m.group(0)
        return (f'<g id="{gid}" class="{kind} {cls}">'
                f"<title>{title} ({cls[4:]})</title>")
    return _GROUP.sub(mark, svg)


def label(svg: str, title: str) -> str:
    """Give the drawing a title that says what it shows (Graphviz's default for an
    unnamed graph is "%3") and the same text as its aria label; drop the XML
    prologue, which is not valid inside an HTML page."""
    text = html.escape(title, quote=True)
    svg = svg[svg.index("<svg"):].strip()  # no XML prologue: it sits inside HTML
    svg = _GRAPH_TITLE.sub(lambda m: f"{m.group(1)}{text}</title>", svg, count=1)
    return re.sub(r"<svg\b", f'<svg role="img" aria-label="{text}"', svg, count=1)


_GRAPH_TITLE = re.compile(r'(<g id="[^"]*" class="graph"[^>]*>\s*<title>)[^<]*</title>')


def outline_css(scope: str) -> str:
    """CSS for the outlines, limited to the elements under `scope`."""
    shapes = "polygon, {0} path, {0} ellipse"
    rules = []
    for cls, colour in (("gox-new", NEW_COLOUR), ("gox-changed", CHANGED_COLOUR)):
        dash = DASH[cls]
        sel = f"{scope} .{cls} > " + shapes.format(f"{scope} .{cls} >")
        rules.append(f"{sel} {{stroke: {colour}; stroke-width: 3px; "
                     f"stroke-dasharray: {dash};}}")
    return "\n".join(rules)


def legend_html(d: Diff, lang: str = "en") -> str:
    """The key to the outlines, and the removed nodes by name."""
    t = {k: gettext_in(lang, v) for k, v in TEXT["en"].items()}
    if not (d.new or d.changed or d.removed):
        return f"<div class='gox-diff'>{t['same']}</div>"
    removed = (t["comma"].join(html.escape(n) for n in d.removed) if d.removed
               else t["none"])

    def count(word, items):
        return f"{t[word]}{t['open']}{len(items)}{t['close']}"
    return (f"<div class='gox-diff'><span class='gox-key-new'>{swatch('gox-new')}"
            f"{count('new', d.new)}</span> &nbsp; <span class='gox-key-changed'>"
            f"{swatch('gox-changed')}{count('changed', d.changed)}</span> &nbsp; "
            f"<span class='gox-removed'>{count('removed', d.removed)}{t['colon']}"
            f"{removed}</span></div>")


def swatch(cls: str) -> str:
    """The legend's key: a small box outlined as the drawing outlines `cls`'s nodes
    (solid or dashed, in its colour); decoration, the words beside it say it."""
    colour = NEW_COLOUR if cls == "gox-new" else CHANGED_COLOUR
    style = "solid" if DASH[cls] == "none" else "dashed"
    return (f"<span aria-hidden='true' style='display:inline-block;width:0.8em;"
            f"height:0.8em;margin-right:0.3em;vertical-align:-0.1em;background:#fff;"
            f"border:3px {style} {colour}'></span>")


def drawings(engine, passes) -> tuple[str, str, Diff]:
    """(baseline SVG, current SVG with new and rewritten nodes outlined, the Diff).

    Both carry a title and aria label that say what they show; cached per graph.
    """
    cache = engine.shown
    base, cur = engine.result(()), engine.result(passes)
    if base.signature not in cache:
        cache[base.signature] = label(
            engine.svg(()), f"{engine.model_name}: captured graph, every pass off "
            f"(baseline): {base.nodes} operator nodes, {base.kernels} kernels")
    if ("cur", cur.signature) not in cache:
        d = diff(base.module, cur.module)
        title = (f"{engine.model_name}: graph after the ticked passes: {cur.nodes} "
                 f"operator nodes, {cur.kernels} kernels; {len(d.new)} new and "
                 f"{len(d.changed)} rewritten nodes outlined, {len(d.removed)} removed")
        cache[("cur", cur.signature)] = (label(highlight(engine.svg(passes), d),
                                               title), d)
    svg, d = cache[("cur", cur.signature)]
    return cache[base.signature], svg, d
