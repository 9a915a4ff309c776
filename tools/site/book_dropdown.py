"""`:::{dropdown} Title` for the book: a folded <details> block, offline.

The chapters' worked solutions use sphinx-design's syntax; this small directive
renders it with no extra package. Its title is a text node of its own, so gettext
puts it into the page's catalog and the Chinese book shows it translated ("Solution"
becomes "参考解答"); the nodes live here, not in conf.py, because Sphinx pickles
every doctree and a pickled node's class must be importable.
"""

from __future__ import annotations

from book_languages import text
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective


class dropdown(nodes.General, nodes.Element):
    """A folded block: <details>, its <summary> title, its body."""


class dropdown_title(nodes.General, nodes.TextElement):
    """The <summary> of a dropdown: a text node, so its title goes into the catalogs
    (gettext) and the Chinese book shows it translated."""


def _visit_dropdown(self, node):
    opened = " open" if node.get("opened") else ""
    self.body.append(f'<details class="graphopt-dropdown"{opened}>')


def _depart_dropdown(self, node):
    self.body.append("</details>")


def _visit_dropdown_title(self, node):
    self.body.append("<summary>")


def _depart_dropdown_title(self, node):
    self.body.append("</summary>")


def _directive():
    """The directive: the title as the <summary>, the body parsed as MyST, `:open:`
    to start unfolded; sphinx-design's look options are accepted and ignored."""

    class Dropdown(SphinxDirective):
        has_content = True
        optional_arguments = 1
        final_argument_whitespace = True
        option_spec = {
            "open": directives.flag, "name": directives.unchanged,
            "class": directives.unchanged, "color": directives.unchanged,
            "icon": directives.unchanged, "animate": directives.unchanged,
            "chevron": directives.unchanged, "margin": directives.unchanged,
            "class-container": directives.unchanged,
            "class-title": directives.unchanged, "class-body": directives.unchanged,
        }

        def run(self):
            words = self.arguments[0] if self.arguments else text(
                self.config.language, "Details")
            title = dropdown_title(words, words)
            title.source, title.line = self.get_source_info()
            body = nodes.container(classes=["graphopt-dropdown-body"])
            self.state.nested_parse(self.content, self.content_offset, body)
            return [dropdown("", title, body, opened="open" in self.options)]

    return Dropdown


def setup(app) -> None:
    """Register the directive and how its two nodes render in HTML."""
    app.add_node(dropdown, html=(_visit_dropdown, _depart_dropdown))
    app.add_node(dropdown_title, html=(_visit_dropdown_title, _depart_dropdown_title))
    app.add_directive("dropdown", _directive())
