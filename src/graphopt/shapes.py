"""Shapes and bytes: what capture recorded about each node's value (chapter 1).

`shape(node)`, `dtype(node)` and `nbytes(node)` read the metadata capture stores in
`node.meta`, so a learner never digs in it. `ops` re-exports them with the operator
kinds; they live here because they need nothing else from the package.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.fx import Node

from .torch_internals import tensor_metadata


def tensor_meta(node: Node) -> Any:
    """The metadata capture recorded for the value (a TensorMetadata or a tuple).

    Introduced in chapter 1.
    """
    if "tensor_meta" in node.meta:
        return node.meta["tensor_meta"]
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return tensor_metadata(val)
    return None


def shape(node: Node) -> tuple[int, ...] | None:
    """The output shape of a node, or None when its output is not a single tensor.

    Introduced in chapter 1.
    """
    meta = tensor_meta(node)
    return tuple(meta.shape) if hasattr(meta, "shape") else None


def dtype(node: Node) -> torch.dtype | None:
    """The output dtype of a node, or None when its output is not a single tensor.

    Introduced in chapter 1.
    """
    meta = tensor_meta(node)
    return meta.dtype if hasattr(meta, "dtype") else None


def nbytes(node: Node) -> int:
    """Bytes of the node's output tensor(s), from the shapes recorded at capture.

    Introduced in chapter 1.
    """
    return _meta_bytes(tensor_meta(node))


def _meta_bytes(meta: Any) -> int:
    if meta is None:
        return 0
    if hasattr(meta, "shape"):
        itemsize = torch.empty((), dtype=meta.dtype).element_size()
        return math.prod(meta.shape) * itemsize
    if isinstance(meta, (tuple, list)):
        return sum(_meta_bytes(m) for m in meta)
    if isinstance(meta, dict):
        return sum(_meta_bytes(m) for m in meta.values())
    return 0
