"""The layout of one call: how each operand of an elementwise kernel is indexed (ch. 6).

The program (`program.Program`) says what to compute per element; the layout says
where each element lives for these inputs: a flat index, one scalar, or index
arithmetic over the operand's own strides (broadcasting and non-contiguous views
without copying). It is part of the kernel's cache key. Row-reduction groups use
`reduce_rows.RowLayout` instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .program import Program
from .reduce_program import REDUCTIONS, reduced_shape


@dataclass(frozen=True)
class Layout:
    """How each operand is indexed for one call (part of the kernel's cache key).

    patterns: per input then per output, "flat" (same layout as the contiguous output:
    index i), "scalar" (one element, loaded once) or "strided" (index arithmetic over
    `shape` with the operand's own strides; covers broadcasting and non-contiguous
    views without copying). `shape` is the loop's shape after merging dimensions that
    every operand walks contiguously; `strides` are in elements (ch. 6).
    """

    out_shape: tuple[int, ...]
    shape: tuple[int, ...]
    patterns: tuple[str, ...]
    strides: tuple[tuple[int, ...], ...]
    out_shapes: tuple[tuple[int, ...], ...]

    @property
    def numel(self) -> int:
        return math.prod(self.out_shape)

    @property
    def inner_steps(self) -> tuple[int | None, ...]:
        """Per operand, a strided one's step along the loop's last dimension when it
        is 1 (its rows are contiguous: a slice, a bias along the row) or 0 (one value
        per row: a per-channel operand); None for any other step and for flat and
        scalar operands. The numba generator writes these steps into the loop, so
        it vectorises; an operand with another step is read with a run-time stride."""
        return tuple(st[-1] if p == "strided" and st[-1] in (0, 1) else None
                     for p, st in zip(self.patterns, self.strides))

    @property
    def runtime_strides(self) -> bool:
        """True when some operand is read with a step known only at run time (a
        transposed or permuted view): the loop then does not vectorise."""
        return any(p == "strided" and step is None
                   for p, step in zip(self.patterns, self.inner_steps))


def shapes_of(prog: Program, inputs) -> dict[str, tuple[int, ...]]:
    """The broadcast shape of every program value, from the input shapes (ch. 6)."""
    shapes = {v: tuple(t.shape) for v, t in zip(prog.inputs, inputs)}
    for s in prog.stmts:
        if s.op in REDUCTIONS:
            shapes[s.var] = reduced_shape(shapes[dict(s.args)["x"]])
            continue
        operand_shapes = [shapes[v] for v in prog.operands(s)]
        shapes[s.var] = tuple(torch.broadcast_shapes(*operand_shapes))
    return shapes


def broadcast_strides(shape, stride, out_shape) -> tuple[int, ...]:
    """Element strides of a tensor read as if broadcast to out_shape, 0 where a value
    repeats (ch. 6)."""
    pad = len(out_shape) - len(shape)
    full_shape, full_stride = (1,) * pad + tuple(shape), (0,) * pad + tuple(stride)
    return tuple(0 if n == 1 else st for n, st in zip(full_shape, full_stride))


def contiguous_strides(shape) -> tuple[int, ...]:
    """Element strides of a contiguous tensor of `shape` (ch. 6)."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(strides))


def plan_layout(prog: Program, inputs) -> Layout:
    """Choose flat / scalar / strided indexing per operand and merge dimensions
    (ch. 6)."""
    shapes = shapes_of(prog, inputs)
    out_shapes = tuple(shapes[v] for v in prog.outputs)
    in_shapes = [shapes[v] for v in prog.inputs]
    out_shape = tuple(torch.broadcast_shapes(*out_shapes, *in_shapes))
    flat = contiguous_strides(out_shape)
    strides = [broadcast_strides(t.shape, t.stride(), out_shape) for t in inputs]
    strides += [broadcast_strides(s, contiguous_strides(s), out_shape)
                for s in out_shapes]
    patterns = tuple("scalar" if not any(st) else "flat" if st == flat else "strided"
                     for st in strides)
    shape, merged = merge_dims(out_shape, strides)
    return Layout(out_shape, shape, patterns, merged, out_shapes)


def merge_dims(shape, strides) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Drop size-1 dims and merge neighbours every operand walks contiguously (ch. 6).

    (8, 16, 32) with a per-channel operand of strides (0, 1, 0) stays 3-D, but a plain
    contiguous (8, 16, 32) becomes (4096,): fewer index computations per element.
    """
    keep = [d for d, n in enumerate(shape) if n != 1]
    dims = [[shape[d], [st[d] for st in strides]] for d in keep]
    out: list = []
    for n, sts in dims:
        if out and all(prev == cur * n for prev, cur in zip(out[-1][1], sts)):
            out[-1] = [out[-1][0] * n, sts]
        else:
            out.append([n, sts])
    if not out:
        out = [[1, [0] * len(strides)]]
    new_shape = tuple(n for n, _ in out)
    new_strides = tuple(tuple(sts[k] for _, sts in out) for k in range(len(strides)))
    return new_shape, new_strides
