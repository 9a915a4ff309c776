"""The pass explorer on a chapter's slide, working without a kernel.

A chapter shows the explorer with a code cell that calls `graphopt.explore(...)`;
its saved output is the live widget, which needs a kernel. The deck shows the static
explorer instead (graphopt.explorer.StaticExplorer: every combination of the ticked
passes precomputed, plain HTML and JavaScript), built from the chapter's own code:
the statements of the earlier cells that define what the call reads (its model, its
inputs, their classes and imports) are run, then the call's own arguments are given
to `StaticExplorer`. Times are not measured for a deck (a lecture hall's projector
is not the machine the numbers would describe); the graph, the node and kernel
counts and the bytes are. Each fragment is kept in .cache/slides, keyed by the code
that made it and the explorer's source, so a second `make slides` is quick.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "slides"
# explore()'s arguments that only the live widget has
LIVE_ONLY = ("static", "devices", "prefetch")


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _parse(cell):
    # IPython's magics and shell lines (%config, !pip) are not Python: left out
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in _source(cell).splitlines())
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def explore_call(cell) -> ast.Call | None:
    """The cell's `graphopt.explore(...)` or `explore(...)` call, if it has one."""
    if cell.get("cell_type") != "code":
        return None
    tree = _parse(cell)
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Call) and (
                getattr(node.func, "attr", None) == "explore"
                or getattr(node.func, "id", None) == "explore"):
            return node
    return None


def _defines(stmt) -> set[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    targets = {ast.Assign: lambda s: s.targets, ast.AugAssign: lambda s: [s.target],
               ast.AnnAssign: lambda s: [s.target]}.get(type(stmt))
    if not targets:
        return set()
    return {n.id for t in targets(stmt) for n in ast.walk(t)
            if isinstance(n, ast.Name)}


def _uses(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def program(cells: list, call: ast.Call) -> str:
    """The earlier cells' statements that define what `call` reads, in their order."""
    stmts = [s for cell in cells if cell.get("cell_type") == "code"
             for s in (getattr(_parse(cell), "body", None) or [])]
    needed, kept = _uses(call), []
    for stmt in reversed(stmts):
        if _defines(stmt) & needed:
            kept.append(stmt)
            needed |= _uses(stmt)
    return "\n".join(ast.unparse(s) for s in reversed(kept))


def _key(code: str, call: str) -> str:
    explorer = ROOT / "src" / "graphopt" / "explorer"
    h = hashlib.sha256((code + "\n#call\n" + call).encode())
    for path in sorted(explorer.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def fragment(cells: list, index: int) -> str | None:
    """The static explorer for the cell `cells[index]` (None: it shows no explorer)."""
    call = explore_call(cells[index])
    if call is None:
        return None
    code = program(cells[:index], call)
    args = ", ".join([ast.unparse(a) for a in call.args] + [
        ast.unparse(k) for k in call.keywords if k.arg not in LIVE_ONLY])
    cached = CACHE / f"{_key(code, args)}.html"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    html = _build(code, args)
    CACHE.mkdir(parents=True, exist_ok=True)
    cached.write_text(html, encoding="utf-8")
    return html


def _build(code: str, args: str) -> str:
    os.environ.setdefault("GRAPHOPT_QUIET", "1")
    from graphopt.explorer.static import StaticExplorer  # noqa: PLC0415 - torch: late

    space = {"__name__": "__slides__", "_StaticExplorer": StaticExplorer}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<chapter cells>", "exec"), space)  # noqa: S102 - the book
        ex = eval(f"_StaticExplorer({args}, measure=False)", space)  # noqa: S307
    if ex.error:
        raise SystemExit(f"slides: the chapter's explorer failed: {ex.error}")
    return ex.html


# The explorer's slide: its words at 20 px, the boxes, table and legend on the
# left, the current drawing on the right, shrunk to the height left (never cut);
# the long notes on how it was computed, the time row (not measured for a deck) and
# the baseline drawing (its numbers are the table's first column) stay on the page.
CSS = """
.reveal section.explorer .graphopt-static-explorer {flex: 1 1 0; min-height: 0;
  position: relative; margin: 0; padding: 4px 10px;}
.reveal section.explorer .graphopt-static-explorer > * {width: 64%;}
.reveal section.explorer .graphopt-static-explorer :not(svg, svg *) {
  font-size: 20px !important; line-height: 1.3;}
.reveal section.explorer .graphopt-static-explorer > div > small,
.reveal section.explorer tr[data-metric=time],
.reveal section.explorer .gox-base {display: none;}
.reveal section.explorer input[type=checkbox] {width: 20px; height: 20px;
  vertical-align: -3px;}
.reveal section.explorer table {margin: 2px 0;}
.reveal section.explorer table th, .reveal section.explorer table td {
  padding: 1px 8px;}
.reveal section.explorer .gox-bar {max-width: 80px;}
.reveal section.explorer td + td {white-space: nowrap;}
.reveal section.explorer .gox-pair {position: absolute; top: 4px; bottom: 4px;
  right: 10px; width: 34%; display: flex;}
.reveal section.explorer .gox-current {flex: 1 1 0; min-height: 0; display: flex;
  flex-direction: column;}
.reveal section.explorer .gox-current .gox-graph {flex: 1 1 0; min-height: 0;
  max-height: none !important; overflow: hidden !important;}
.reveal section.explorer .gox-graph svg {width: 100% !important;
  height: 100% !important; max-width: 100% !important;}
"""
