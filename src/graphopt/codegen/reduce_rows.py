"""One call's rows: the (rows, D) view of a row-reduction group, and its passes (ch. 6).

`plan_rows` checks rule 1 of `reduce` (the reduction runs over the innermost,
contiguous dimension of the group's full row shape) for one call's inputs and says
how each input is read along a row. `stat_vars`, `passes` and `needed` tell the
generators (`reduce_cpu`, `reduce_triton`) which values are one number per row, in
which reading pass each value is known, and what to recompute inside a pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import UnsupportedOpError
from .layout import broadcast_strides, shapes_of
from .reduce_program import REDUCTIONS, reduced_shape


@dataclass(frozen=True)
class RowLayout:
    """The (rows, D) view of one call. Per input: a pattern ("contig": stride 1 along
    the row; "rowconst": one value per row; "scalar"; "strided"), the strides of the
    leading dims (0 where broadcast) and the stride along the row (ch. 6)."""

    lead: tuple[int, ...]
    D: int
    patterns: tuple[str, ...]
    lead_strides: tuple[tuple[int, ...], ...]
    col_strides: tuple[int, ...]
    out_kinds: tuple[str, ...]            # "row" ([..., D]) or "stat" ([..., 1])
    out_shapes: tuple[tuple[int, ...], ...]

    @property
    def rows(self) -> int:
        return math.prod(self.lead)

    @property
    def numel(self) -> int:
        return self.rows * self.D


def plan_rows(prog, inputs) -> RowLayout:
    """Check rule 1 of `reduce`'s docstring for these inputs and lay the rows out
    (ch. 6)."""
    shapes = shapes_of(prog, inputs)
    full = tuple(torch.broadcast_shapes(*shapes.values()))
    if not full or full[-1] <= 1:
        raise UnsupportedOpError(
            "a row reduction needs a last dimension longer than 1.")
    for st in prog.stmts:
        if st.op in REDUCTIONS and shapes[dict(st.args)["x"]] != full:
            raise UnsupportedOpError(
                f"{st.op} reduces a value of shape {shapes[dict(st.args)['x']]}, "
                "not the "
                f"group's full row shape {full}: not a row reduction of this group.")
    patterns, leads, cols = [], [], []
    for t in inputs:
        st = broadcast_strides(t.shape, t.stride(), full)
        leads.append(st[:-1])
        cols.append(st[-1])
        patterns.append("scalar" if not any(st) else "rowconst" if st[-1] == 0
                        else "contig" if st[-1] == 1 else "strided")
    out_kinds, out_shapes = [], []
    for v in prog.outputs:
        kind = "row" if shapes[v] == full else "stat" if \
            shapes[v] == reduced_shape(full) else None
        if kind is None:
            raise UnsupportedOpError(
                f"group output of shape {shapes[v]} is neither a full row {full} nor "
                "one value per row.")
        out_kinds.append(kind)
        out_shapes.append(shapes[v])
    return RowLayout(full[:-1], full[-1], tuple(patterns), tuple(leads), tuple(cols),
                     tuple(out_kinds), tuple(out_shapes))


def stat_vars(prog, layout: RowLayout) -> set[str]:
    """Values with one number per row: reductions, per-row inputs, math on them
    (ch. 6)."""
    stat = {v for v, p in zip(prog.inputs, layout.patterns)
            if p in ("rowconst", "scalar")}
    for st in prog.stmts:
        ops = prog.operands(st)
        if st.op in REDUCTIONS or (ops and all(o in stat for o in ops)):
            stat.add(st.var)
    return stat


def passes(prog) -> dict[str, int]:
    """The reading pass in which each value is known, 0 before any pass (ch. 6)."""
    level: dict[str, int] = {v: 0 for v in prog.inputs}
    for st in prog.stmts:
        if st.op in REDUCTIONS:
            level[st.var] = 1 + level[dict(st.args)["x"]]
        else:
            level[st.var] = max([level[o] for o in prog.operands(st)], default=0)
    return level


def needed(prog, roots, known: set[str]) -> list:
    """The elementwise statements that compute `roots`, in program order (ch. 6)."""
    by_var = {s.var: s for s in prog.stmts}
    want, stack = set(), list(roots)
    while stack:
        v = stack.pop()
        if v in want or v in known or v not in by_var:
            continue
        want.add(v)
        if by_var[v].op not in REDUCTIONS:
            stack += prog.operands(by_var[v])
    return [s for s in prog.stmts if s.var in want and s.op not in REDUCTIONS]
