"""Drawing graphs with Graphviz: fx graphs, fused groups and autograd graphs.

Introduced in chapter 1. `draw(gm)` returns a `Drawing` (a `graphviz.Digraph`) that a
notebook shows as SVG. The DOT text is deterministic: nodes appear in graph order, names
come from fx, colours from a fixed table, so the same graph draws the same every run.

- one colour per OpKind, with a legend;
- edges labelled with the tensor's shape, dtype and size;
- a call to a submodule that is itself a GraphModule (a fused group) is drawn as a
  cluster holding its member ops.

Drawn to fit a book column: top to bottom, so a long chain grows down, not
sideways; the weights one op reads stand in a column above it (not in a row), their
size written in their ellipse instead of on the edge; inputs nothing reads are drawn
dashed under the output, and the legend under them, so neither widens the top row.
"""

from __future__ import annotations

from torch.fx import GraphModule, Node

from .capture import AutogradGraph
from .costs import fmt_bytes
from .drawing import Drawing
from .figures import launch_timeline, memory_hierarchy
from .i18n import _, pgettext
from .ops import OpKind, dtype, kind, nbytes, op_name, shape

# Drawing is drawing.py's, launch_timeline and memory_hierarchy figures.py's: the
# chapters call them from here.
__all__ = ["COLOURS", "Drawing", "draw", "edge_label", "launch_timeline",
           "memory_hierarchy", "node_label"]

COLOURS = {
    OpKind.ELEMENTWISE: "#cfe8cf",  # green
    OpKind.REDUCTION: "#fde2b8",    # orange
    OpKind.LAYOUT: "#d9d2f0",       # purple
    OpKind.COMPUTE: "#f6c6c6",      # red
    OpKind.OTHER: "#e8e8e8",        # grey
}
_IO = "#ffffff"
_DTYPE_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16",
                "bfloat16": "bf16", "int64": "i64", "int32": "i32", "bool": "bool",
                "uint8": "u8"}


def draw(graph, *, title: str | None = None, legend: bool = True,
         edge_labels: bool = True, rankdir: str = "TB") -> Drawing:
    """Draw an fx GraphModule or an AutogradGraph (chapter 1).

    Bounded: capture + draw of ResNet-18 64x64 460 MiB RSS, 1168 MiB address space,
    4 s on 2 cores (README: Bounds).
    """
    if isinstance(graph, AutogradGraph):
        return _draw_autograd(graph, title=title, rankdir=rankdir)
    graph = getattr(graph, "graph_module", graph)  # the backend's wrapper: its graph
    if not isinstance(graph, GraphModule):
        raise TypeError(f"draw takes a GraphModule or an AutogradGraph, not "
                        f"{type(graph).__name__}; capture the model first.")
    dot = _new(title, rankdir)
    kinds_seen = _add_graph(dot, graph, prefix="", edge_labels=edge_labels)
    if legend:
        _add_legend(dot, kinds_seen, below=_last_drawn(graph))
    return dot


def _last_drawn(gm: GraphModule) -> str | None:
    """The bottom of the drawing: the last unused input, else the output."""
    unused = [n.name for n in gm.graph.nodes
              if n.op in ("placeholder", "get_attr") and not _users(n)]
    outputs = [n.name for n in gm.graph.nodes if n.op == "output"]
    return (outputs + unused)[-1] if outputs else None


def _new(title, rankdir) -> Drawing:
    # The graph's name becomes the SVG's <title> (a tooltip, and the site's alt
    # text); without one Graphviz writes "%3".
    # A transparent ground: the page's own shows through (dark in dark mode), and
    # so does the scroll shadow of a drawing wider than the column.
    dot = Drawing(name=title or _("computation graph"),
                  graph_attr={"rankdir": rankdir, "fontname": "Helvetica",
                              "fontsize": "11", "nodesep": "0.25", "ranksep": "0.35",
                              "bgcolor": "transparent"},
                  node_attr={"shape": "box", "style": "rounded,filled",
                             "fontname": "Helvetica", "fontsize": "10",
                             "height": "0.3"},
                  edge_attr={"fontname": "Helvetica", "fontsize": "8",
                             "color": "#555555"})
    if title:
        dot.attr(label=title, labelloc="t", fontsize="13")
    return dot


def node_label(n: Node) -> str:
    """What a box says: the node's name, then the op when it differs (ch. 1)."""
    name = op_name(n)
    if n.op in ("placeholder", "get_attr"):
        s = shape(n)
        return f"{n.name}\\n{_shape_text(s)}" if s else n.name
    if n.op == "output":
        return "output"
    return n.name if name == n.name else f"{n.name}\\n{name}"


def _shape_text(s) -> str:
    return "×".join(str(d) for d in s) if s else _("scalar")


def edge_label(n: Node) -> str:
    """What an edge says: shape, dtype and bytes of the tensor it carries (ch. 1)."""
    s = shape(n)
    if s is None:
        return ""
    dt = str(dtype(n)).replace("torch.", "")
    return f"{_shape_text(s)} {_DTYPE_SHORT.get(dt, dt)}\\n{fmt_bytes(nbytes(n))}"


def _add_graph(dot, gm: GraphModule, prefix: str, edge_labels: bool) -> set:
    """Add gm's nodes and edges to `dot`; returns the OpKinds used (for the legend)."""
    kinds_seen = set()
    entry: dict[str, str] = {}   # fused node name -> id of its cluster's output node
    for n in gm.graph.nodes:
        if n.op == "call_module" and str(n.target).startswith("_guards"):
            continue
        sub = _fused_submodule(gm, n)
        if sub is not None:
            entry[n.name] = _add_cluster(dot, n, sub, prefix, kinds_seen)
            continue
        k = kind(n)
        io = n.op in ("placeholder", "output", "get_attr")
        if not io:  # inputs and outputs are drawn white, not in their kind's colour
            kinds_seen.add(k)
        unused = io and n.op != "output" and not _users(n)
        dot.node(prefix + n.name, _weight_label(n) if _is_weight(n) else node_label(n),
                 fillcolor=_IO if io else COLOURS[k],
                 shape="ellipse" if io else "box",
                 style=("dashed" if unused else "filled") if io else "rounded,filled",
                 **({"fontcolor": "#666666", "color": "#888888"} if unused else {}))
    for n in gm.graph.nodes:
        for user in _users(n):
            src = entry.get(n.name, prefix + n.name)
            # a weight's ellipse already says its size: no label widens its edge
            label = edge_label(n) if edge_labels and not _is_weight(n) else ""
            extra = {"label": label} if label else {}
            if not _is_weight(n):  # keep the data's own path straight, weights aside
                extra["weight"] = "4"
            if user.name in entry:
                # edge into a cluster: point at the member that reads this input
                dot.edge(src, f"{prefix}{user.name}.in{_arg_index(user, n)}", **extra)
            else:
                dot.edge(src, prefix + user.name, **extra)
    _stack_weights(dot, gm, prefix)
    return kinds_seen


def _users(n: Node) -> list[Node]:
    return [u for u in n.users
            if not (u.op == "call_module" and str(u.target).startswith("_guards"))]


def _is_weight(n: Node) -> bool:
    """A tensor the module owns, read by exactly one op (drawn beside that op)."""
    return n.op == "get_attr" and shape(n) is not None and len(_users(n)) == 1


def _weight_label(n: Node) -> str:
    return f"{n.name}\\n{_shape_text(shape(n))}, {fmt_bytes(nbytes(n))}"


def _stack_weights(dot, gm: GraphModule, prefix: str) -> None:
    """Invisible edges that keep the layout narrow (they are not graph edges).

    An op's weights are chained into a column above it (a batch norm's four would
    otherwise make a row four ellipses wide), and inputs nothing reads hang in a
    column under the output instead of widening the top row.
    """
    invisible = {"style": "invis"}
    for n in gm.graph.nodes:
        weights = [a for a in n.all_input_nodes if _is_weight(a)]
        for a, b in zip(weights, weights[1:]):
            dot.edge(prefix + a.name, prefix + b.name, **invisible)
    outputs = [n for n in gm.graph.nodes if n.op == "output"]
    unused = [n for n in gm.graph.nodes
              if n.op in ("placeholder", "get_attr") and not _users(n)]
    for a, b in zip(outputs[-1:] + unused, unused):
        dot.edge(prefix + a.name, prefix + b.name, **invisible)


def _arg_index(user: Node, n: Node) -> int:
    return [a for a in user.all_input_nodes].index(n)


def _fused_submodule(gm: GraphModule, n: Node) -> GraphModule | None:
    if n.op != "call_module":
        return None
    sub = gm.get_submodule(str(n.target))
    inner = sub if isinstance(sub, GraphModule) else getattr(sub, "gm", None)
    return inner if isinstance(inner, GraphModule) else None


def _add_cluster(dot, n: Node, sub: GraphModule, prefix: str, kinds_seen: set) -> str:
    """Draw a fused group as a cluster; returns the id of the node its result leaves
    from."""
    cluster_prefix = f"{prefix}{n.name}."
    out_id = cluster_prefix + "out"
    with dot.subgraph(name=f"cluster_{prefix}{n.name}") as c:
        c.attr(label=_("{name} (fused: 1 kernel)").format(name=n.name),
               style="rounded,dashed",
               color="#2b6cb0", fontcolor="#2b6cb0")
        placeholders = [p for p in sub.graph.nodes if p.op == "placeholder"]
        for i, p in enumerate(placeholders):
            c.node(f"{cluster_prefix}in{i}", p.name, shape="point", width="0.08")
        for m in sub.graph.nodes:
            if m.op in ("placeholder", "output"):
                continue
            k = kind(m)
            kinds_seen.add(k)
            c.node(cluster_prefix + m.name, node_label(m), fillcolor=COLOURS[k])
        c.node(out_id, "", shape="point", width="0.08")
    ids = {p: f"{cluster_prefix}in{i}" for i, p in enumerate(placeholders)}
    for m in sub.graph.nodes:
        if m.op == "placeholder":
            continue
        dst = out_id if m.op == "output" else cluster_prefix + m.name
        for a in m.all_input_nodes:
            dot.edge(ids.get(a, cluster_prefix + a.name), dst, style="dashed")
    return out_id


def _add_legend(dot, kinds_seen: set, below: str | None = None) -> None:
    kinds = [k for k in OpKind if k in kinds_seen]
    if not kinds:
        return
    if below:  # under the graph, not beside its widest row
        dot.edge(below, f"legend_{kinds[0].value}", style="invis")
    with dot.subgraph(name="cluster_legend") as c:
        c.attr(label=_("op kind"), fontsize="9", style="rounded", color="#aaaaaa")
        for k in kinds:
            c.node(f"legend_{k.value}", kind_word(k), fillcolor=COLOURS[k],
                   fontsize="9")
        for a, b in zip(kinds, kinds[1:]):
            c.edge(f"legend_{a.value}", f"legend_{b.value}", style="invis")


# an OpKind's name in the reader's language (the legend's words)
_KIND_WORDS = {
    OpKind.ELEMENTWISE: lambda: pgettext("op kind", "elementwise"),
    OpKind.REDUCTION: lambda: pgettext("op kind", "reduction"),
    OpKind.LAYOUT: lambda: pgettext("op kind", "layout"),
    OpKind.COMPUTE: lambda: pgettext("op kind", "compute"),
    OpKind.OTHER: lambda: pgettext("op kind", "other"),
}


def kind_word(k: OpKind) -> str:
    """`k`'s name as the legend shows it (chapter 1): "elementwise" in English."""
    return _KIND_WORDS[k]()


def _draw_autograd(g: AutogradGraph, title, rankdir) -> Drawing:
    dot = _new(title or _("autograd graph (backward runs from the output to the "
                          "leaves)"), rankdir)
    fills = {"root": _IO, "leaf": "#cde3f7", "function": "#f0f0f0"}
    for n in g.nodes:
        label = n.label if n.shape is None else f"{n.label}\\n{_shape_text(n.shape)}"
        dot.node(n.id, label, fillcolor=fills[n.role],
                 shape="ellipse" if n.role != "function" else "box")
    for src, dst in g.edges:
        dot.edge(dst, src)  # gradients flow from the consumer back to its inputs
    return dot
