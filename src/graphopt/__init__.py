"""graphopt: how a deep-learning framework sees a model as a graph, and makes it faster.

The data path, in the order the book teaches it:
model -> capture -> GraphModule -> graph passes -> lower (codegen) -> backend
-> interpret/measure -> viz. `optimize` (`optimizer.py`) runs the three stages.
"""

from importlib import import_module

from . import dataflow, errors, models
from .capture import AutogradGraph, annotate, autograd_graph, capture
from .dataflow import levels
from .errors import (
    CaptureError,
    GraphoptError,
    InputError,
    MissingDotError,
    NoGPUError,
    NotEquivalentError,
    UnsupportedOpError,
)
from .interpret import Report, run
from .ops import OpKind, dtype, flops, kind, nbytes, shape
from .viz import draw

__version__ = "0.1.0"

# Names from later chapters resolve on first use, so `import graphopt` stays quick and
# numba or Triton load only when a kernel is generated.
_LAZY = {
    "optimize": "graphopt.optimizer",
    "PIPELINE": "graphopt.optimizer",
    "GRAPH_PASSES": "graphopt.optimizer",
    "verify": "graphopt.verify",
    "equivalent": "graphopt.verify",
    "compare_capture": "graphopt.compare",
    "explore": "graphopt.explorer",
    "measure": "graphopt.measure",
    "codegen": "graphopt.codegen",
    "backend": "graphopt.backend",
    "passes": "graphopt.passes",
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'graphopt' has no attribute {name!r}")
    module = import_module(_LAZY[name])
    return module if module.__name__.endswith("." + name) else getattr(module, name)


__all__ = [
    "AutogradGraph",
    "CaptureError",
    "GraphoptError",
    "InputError",
    "MissingDotError",
    "NoGPUError",
    "NotEquivalentError",
    "OpKind",
    "Report",
    "UnsupportedOpError",
    "annotate",
    "autograd_graph",
    "capture",
    "dataflow",
    "draw",
    "dtype",
    "errors",
    "flops",
    "kind",
    "levels",
    "models",
    "nbytes",
    "run",
    "shape",
    *_LAZY,
]
