"""What both kernel generators share, under the name the book first gives it (ch. 6).

A fused group goes through three steps before a generator writes any code, one file
each:

    op_table.py   OPS: one row per elementwise op, a numba and a Triton template
    program.py    Program, Stmt, Const: the group as straight-line code
    lowering.py   build_program: a group's GraphModule becomes a Program
    layout.py     Layout, plan_layout: how each operand is indexed for one call

This module only re-exports them: chapter 6 and the generators (`cpu`, `triton`,
`reduce_triton`) import them from here, and `common.OPS` is the same dict as
`op_table.OPS`, so a row added through either name reaches every generator.
"""

from .layout import (
    Layout,
    broadcast_strides,
    contiguous_strides,
    merge_dims,
    plan_layout,
    shapes_of,
)
from .lowering import build_program, canonical
from .op_table import ALIASES, OPS, SUPPORTED_HINT, OpSpec
from .program import Const, Program, Stmt

__all__ = ["ALIASES", "OPS", "SUPPORTED_HINT", "Const", "Layout", "OpSpec", "Program",
           "Stmt", "broadcast_strides", "build_program", "canonical",
           "contiguous_strides", "merge_dims", "plan_layout", "shapes_of"]
