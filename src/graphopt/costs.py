"""What running a graph cost: `NodeStats` per node, `Report` for the run (chapter 1).

`graphopt.run` (interpret.py) fills them; this file only holds and prints them, so a
reader can see what is recorded before reading how it is measured.
"""

from __future__ import annotations

import html
import numbers
from dataclasses import dataclass, field
from typing import Any

from .ops import OpKind


@dataclass
class NodeStats:
    """What one node cost when it ran (chapter 1)."""

    name: str
    op: str
    kind: OpKind
    shape: tuple[int, ...] | None
    bytes_read: int
    bytes_written: int
    kernels: int
    time_s: float
    live_bytes: int


@dataclass
class Report:
    """What `graphopt.run` returns: outputs, per-node and total costs (chapter 1)."""

    outputs: Any
    nodes: list[NodeStats] = field(default_factory=list)
    peak_bytes: int = 0
    param_bytes: int = 0

    @property
    def bytes_read(self) -> int:
        return sum(n.bytes_read for n in self.nodes)

    @property
    def bytes_written(self) -> int:
        return sum(n.bytes_written for n in self.nodes)

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def kernels(self) -> int:
        return sum(n.kernels for n in self.nodes)

    @property
    def time_s(self) -> float:
        return sum(n.time_s for n in self.nodes)

    def summary(self) -> str:
        return (
            f"{len(self.nodes)} ops, {self.kernels} kernels, "
            f"{fmt_bytes(self.bytes_read)} read, "
            f"{fmt_bytes(self.bytes_written)} written, "
            f"peak {fmt_bytes(self.peak_bytes)}"
        )

    def __repr__(self) -> str:
        header = (
            f"{'node':<22}{'op':<26}{'kind':<12}"
            f"{'read':>10}{'written':>10}{'kernels':>8}"
        )
        rows = [header] + [
            f"{n.name[:21]:<22}{n.op[:25]:<26}{n.kind.value:<12}"
            f"{fmt_bytes(n.bytes_read):>10}{fmt_bytes(n.bytes_written):>10}{n.kernels:>8}"
            for n in self.nodes
        ]
        return "\n".join(rows + ["total: " + self.summary()])

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in
                       ("node", "op", "kind", "shape", "read", "written", "kernels",
                        "time", "live"))
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
                n.name, n.op, n.kind.value, "×".join(map(str, n.shape or ())) or "-",
                fmt_bytes(n.bytes_read), fmt_bytes(n.bytes_written), n.kernels,
                f"{n.time_s * 1e6:.0f} µs", fmt_bytes(n.live_bytes))) + "</tr>"
            for n in self.nodes)
        return (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"<p><b>total</b>: {html.escape(self.summary())}</p>")


def fmt_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; a symbolic size -> its expression: '32*s29 B' (ch. 1).

    A pass that re-traces with symbolic shapes (fuse_qkv on BERT) leaves nodes whose
    size is a `torch.SymInt`: comparing it with 1024 would guard on (or fail for) a
    size that is not known, so it is shown as the sympy expression it is.
    """
    if not isinstance(n, numbers.Real):  # torch.SymInt/SymFloat are not numbers.Real
        return f"{n} B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
