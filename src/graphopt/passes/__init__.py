"""Graph optimisation passes on torch.fx, one per file (chapters 3, 4 and 5).

Every pass has one signature: `pass_(gm, inplace=False) -> PassResult`, where
`result.module` is a new GraphModule and `removed`, `added`, `rewritten` name the
nodes that changed. `pipeline.PIPELINE` names them in order; `graphopt.optimize`
runs them as named stages and adds `lower` (chapter 6) and `backend` (chapter 7)
after them.
"""

from .convert_layout import convert_layout
from .eliminate_common_subexpressions import eliminate_common_subexpressions
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_conv_bn import fold_conv_bn
from .fuse_attention import fuse_attention
from .fuse_elementwise import FusedElementwise, fuse_elementwise
from .fuse_patterns import PATTERNS, fuse_patterns
from .fuse_qkv import fuse_qkv
from .result import PassResult

__all__ = [
    "PassResult",
    "convert_layout",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fold_constants",
    "fold_conv_bn",
    "fuse_elementwise",
    "FusedElementwise",
    "fuse_patterns",
    "PATTERNS",
    "fuse_attention",
    "fuse_qkv",
]
