"""The pass pipeline: the graph passes by name, in their order (chapters 3-5).

    captured ─► eliminate_dead_code ─► fold_constants ─► eliminate_common_subexpressions
             ─► fold_conv_bn ─► fuse_attention ─► fuse_qkv ─► fuse_patterns
             ─► fuse_elementwise ─► convert_layout

These are the graph passes: each rewrites the graph and nothing else, so what they
give (graphs, kernel counts, bytes, notes) is the same on every machine. This file
is their table; `graphopt.optimize(model, x, passes=PIPELINE)` runs them (the
driver, which keeps every stage, is `graphopt.stages`), and by default two more
stages after them, `lower` (chapter 6) and `backend` (chapter 7).
"""

from __future__ import annotations

from typing import Callable

from ..errors import GraphoptError
from .convert_layout import convert_layout
from .eliminate_common_subexpressions import eliminate_common_subexpressions
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_conv_bn import fold_conv_bn
from .fuse_attention import fuse_attention
from .fuse_elementwise import fuse_elementwise
from .fuse_patterns import fuse_patterns
from .fuse_qkv import fuse_qkv
from .result import PassResult

PASSES: dict[str, Callable[..., PassResult]] = {
    "eliminate_dead_code": eliminate_dead_code,
    "fold_constants": fold_constants,
    "eliminate_common_subexpressions": eliminate_common_subexpressions,
    "fold_conv_bn": fold_conv_bn,
    "fuse_attention": fuse_attention,  # before fuse_elementwise takes its mul/add
    "fuse_qkv": fuse_qkv,  # before the backend stage packs the one wide weight
    "fuse_patterns": fuse_patterns,
    "fuse_elementwise": fuse_elementwise,
    "convert_layout": convert_layout,  # last: it places the kernels' data, not the ops
}

# The default order. Dead code goes first: a dead reader makes its input look like a
# multi-consumer node, which blocks fusion. Folding comes next (it turns constant
# subexpressions into buffers that CSE can then share), Conv+BN before pattern fusion
# so Conv+ReLU patterns see the folded conv, and pattern fusion before elementwise
# fusion, which would otherwise take the ReLU a pattern needs. Each pass erases what
# it replaced (and weights only those nodes read), so no cleanup pass is needed last.
PIPELINE: tuple[str, ...] = tuple(PASSES)


class UnknownPassError(GraphoptError, ValueError):
    """A pass name that the pipeline does not know (ch. 5)."""
