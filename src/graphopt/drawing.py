"""`Drawing`: a Graphviz Digraph that a notebook shows as SVG (chapter 1).

Every drawing of the book is one: `viz.draw` for graphs, `figures.py` for concepts.
It says how to install Graphviz instead of failing deep inside it, and gives a
sentence of alt text wherever SVG cannot be shown.
"""

from __future__ import annotations

import re

import graphviz

from .errors import DOT_INSTALL_HINT, MissingDotError
from .i18n import _

# a DOT node's line
_NODE_LINE = re.compile(r'^\t+(?!(?:graph|node|edge) \[)("[^"]+"|[\w.]+) \[')


class Drawing(graphviz.Digraph):
    """A Digraph that says how to install Graphviz instead of failing in it (ch. 1)."""

    def pipe(self, *args, **kwargs):
        try:
            return super().pipe(*args, **kwargs)
        except graphviz.ExecutableNotFound:
            raise MissingDotError(_(DOT_INSTALL_HINT)) from None

    def render(self, *args, **kwargs):
        try:
            return super().render(*args, **kwargs)
        except graphviz.ExecutableNotFound:
            raise MissingDotError(_(DOT_INSTALL_HINT)) from None

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        """SVG for the eye, and a sentence saying what the figure shows for
        everything that cannot show SVG (an untrusted notebook, a screen reader)."""
        try:
            svg = self.pipe(format="svg", encoding="utf-8")
        except MissingDotError:
            return {"text/plain": _(DOT_INSTALL_HINT) + "\n\n" + self.source}
        return {"image/svg+xml": svg, "text/plain": self.describe()}

    def describe(self) -> str:
        """'Graph drawing "title": 6 nodes, 6 edges (...)': a figure's alt text."""
        lines = [ln for ln in self.source.splitlines()
                 if "legend_" not in ln and "style=invis" not in ln]
        edges = sum(" -> " in ln for ln in lines)
        nodes = sum(bool(_NODE_LINE.match(ln)) and " -> " not in ln for ln in lines)
        return _('Graph drawing "{title}": {nodes} nodes, {edges} edges (trust the '
                 "notebook, or run the cell, to see it).").format(
            title=self.name or "graph", nodes=nodes, edges=edges)

    def svg(self) -> str:
        """The drawing as SVG text."""
        return self.pipe(format="svg", encoding="utf-8")
