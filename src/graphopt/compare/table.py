"""CaptureRow and CaptureTable: what each capture method did, as a table (chapter 2).

`text_table` and `html_table` render any headers and rows; `Table` is a small table of
text cells for the seed's summary (`static_vs_dynamic`).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Callable

from torch.fx import GraphModule

from ..i18n import _, ljust, pgettext
from ..i18n import display_width as width


@dataclass
class CaptureRow:
    """What one capture method did with the model (chapter 2)."""

    method: str
    captured: bool
    graph: GraphModule | str | None = field(default=None, repr=False)  # or IR text
    nodes: int | None = None          # op nodes: no inputs, outputs or constants
    graph_breaks: int | None = None   # torch.compile only: dynamo's graph-break count
    error_type: str | None = None
    error: str | None = None          # the first line of the error message
    capture_s: float | None = None    # torch.compile: the first call, which compiles
    run_s: float | None = None        # median steady-state call on the example inputs
    matches_eager: bool | None = None  # on fresh inputs; None for eager and failures
    fresh_error: str | None = None    # raised on fresh inputs (e.g. a shape guard)
    kernels: list[str] | None = None  # launches per call: eager and inductor only
    warnings: list[str] = field(default_factory=list)
    deprecation: str | None = None    # torch's notice, for a method it deprecates
    prints_at_capture: int = 0        # lines the model printed while being captured
    prints_per_call: int | None = None  # lines printed by one call of the captured form
    note: str = ""
    graphs: list = field(default_factory=list, repr=False)  # every graph (compile: >1)
    source: str | None = field(default=None, repr=False)  # inductor's generated code
    module: Callable | None = field(default=None, repr=False)
    exception: BaseException | None = field(default=None, repr=False)

    @property
    def verdict(self) -> str:
        """One word for the table: ok, WRONG, failed or reference (English: a check
        compares it; `shown_verdict` is the word in the reader's language)."""
        if not self.captured:
            return "failed"
        if self.matches_eager is None:
            return "reference" if self.method == "eager" else "-"
        if self.fresh_error:
            return "raises"
        return "ok" if self.matches_eager else "WRONG"

    @property
    def shown_verdict(self) -> str:
        """`verdict` in the reader's language."""
        return _VERDICTS[self.verdict]() if self.verdict in _VERDICTS else self.verdict


# each verdict word in the reader's language (read at each call: GRAPHOPT_LANG)
_VERDICTS = {
    "failed": lambda: pgettext("capture verdict", "failed"),
    "reference": lambda: pgettext("capture verdict", "reference"),
    "raises": lambda: pgettext("capture verdict", "raises"),
    "ok": lambda: pgettext("capture verdict", "ok"),
    "WRONG": lambda: pgettext("capture verdict", "WRONG"),
}


class CaptureTable(list):
    """The rows of `compare_capture`; a table in a notebook and in a terminal."""

    def __getitem__(self, key):
        if not isinstance(key, str):
            return super().__getitem__(key)
        exact = [r for r in self if r.method == key]
        loose = [r for r in self if r.method.startswith(key + "(")]
        if exact or len(loose) == 1:
            return (exact or loose)[0]
        raise KeyError(f"no single row {key!r}; rows are: "
                       + ", ".join(r.method for r in self))

    def _columns(self) -> list[tuple[str, Callable[[CaptureRow], str]]]:
        cols = [
            (_("method"), lambda r: r.method),
            (_("captured"), lambda r: _("yes") if r.captured else _("no")),
            (_("ops"), lambda r: dash(r.nodes)),
            (_("graph breaks"), lambda r: dash(r.graph_breaks)),
            (_("capture"), lambda r: fmt_time(r.capture_s)),
            (_("run (median)"), lambda r: fmt_time(r.run_s)),
            (_("fresh inputs"), lambda r: r.shown_verdict),
        ]
        if any(r.kernels is not None for r in self):
            cols.insert(4, (_("kernels"), lambda r: dash(None if r.kernels is None
                                                          else len(r.kernels))))
        if any(r.prints_at_capture or r.prints_per_call for r in self):
            cols.append((_("prints: capture / call"), lambda r: (
                f"{r.prints_at_capture} / {dash(r.prints_per_call)}")))
        cols.append((_("error or note"), _explain))
        return cols

    def __repr__(self) -> str:
        cols = self._columns()
        return text_table([h for h, _ in cols], [[f(r) for _, f in cols] for r in self])

    def _repr_html_(self) -> str:
        cols = self._columns()
        page = html_table([h for h, _ in cols], [[f(r) for _, f in cols] for r in self])
        # a silently wrong capture is the one result a reader must not miss
        word = html.escape(_VERDICTS["WRONG"]())
        wrong = f"<td style='text-align:left;color:#b00020'><b>{word}</b></td>"
        return page.replace(f"<td style='text-align:left'>{word}</td>", wrong)


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; the last column is free text."""
    widths = [max([width(h)] + [width(r[i]) for r in rows])
              for i, h in enumerate(headers)]
    widths[-1] = 0
    return "\n".join("  ".join(ljust(c, w) for c, w in zip(line, widths)).rstrip()
                     for line in [headers] + rows)


def html_table(headers: list[str], rows: list[list[str]]) -> str:
    """The same table as HTML, every cell escaped."""
    cell = "<{0} style='text-align:left'>{1}</{0}>"
    head = "".join(cell.format("th", html.escape(h)) for h in headers)
    body = "".join(
        "<tr>" + "".join(cell.format("td", html.escape(c)) for c in r) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def dash(value) -> str:
    """None shows as a dash."""
    return "-" if value is None else str(value)


def fmt_time(seconds: float | None) -> str:
    """0.0123 -> '12.3 ms'; None -> '-'."""
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def _explain(r: CaptureRow) -> str:
    # torch's internals warn too (inductor about jit.script_method): show only warnings
    # about the method itself, its deprecation or else what the tracer warned
    traced = [w for w in r.warnings if w.startswith("TracerWarning")]
    text = (f"{r.error_type}: {r.error}" if r.error_type
            else r.note or r.deprecation or (traced or [""])[0])
    return text if len(text) <= 110 else text[:107] + "..."


@dataclass
class Table:
    """A small table of text cells that shows as HTML in a notebook."""

    headers: list[str]
    rows: list[list[str]]

    def __repr__(self) -> str:
        return text_table(self.headers, self.rows)

    def _repr_html_(self) -> str:
        return html_table(self.headers, self.rows)

