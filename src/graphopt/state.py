"""Nothing lost: the caller's model, inputs and random state survive graphopt (ch. 3).

Capturing, measuring and checking all *run* the model. A run writes state: batch
norm in training mode updates its running statistics, `self.count.add_(1)` bumps a
buffer, a model may write its input in place, dropout draws from the global random
generator. Three tools keep that state the caller's:

- `own_buffers(gm)`: a captured graph gets its own copies of the buffers (and of any
  weight the graph writes), so running it never writes the caller's model;
- `preserved(gm, inputs)`: a run whose writes are undone afterwards (buffers, the
  random generator); the inputs it gets are copies;
- `flat_inputs(gm, args, kwargs)`: keyword inputs (`input_ids=`, `attention_mask=`)
  in the order of the graph's placeholders, for the interpreter.

Copying buffers once at capture is cheaper than saving and restoring them around
every call (one copy instead of two per call), and buffers are small next to the
weights, which are shared: graphopt never writes a weight, passes make new tensors.
"""

from __future__ import annotations

import contextlib
import inspect

import torch
from torch import nn
from torch.fx import GraphModule

from .torch_internals import (
    buffer_table,
    parameter_table,
    tree_flatten_spec,
    tree_map,
)


def own_buffers(gm: nn.Module, written: set[str] = frozenset()) -> nn.Module:
    """Give `gm` copies of its buffers and of the attributes named in `written`.

    Introduced in chapter 3.
    """
    for name, buf in list(gm.named_buffers()):
        _replace(gm, name, buf.detach().clone())
    for name in written:
        obj = _get(gm, name)
        if isinstance(obj, nn.Parameter):
            _replace(gm, name, nn.Parameter(obj.detach().clone(), obj.requires_grad))
        elif isinstance(obj, torch.Tensor) and name not in dict(gm.named_buffers()):
            _replace(gm, name, obj.detach().clone())
    return gm


def _get(root, name):
    obj = root
    for part in name.split("."):
        obj = getattr(obj, part, None)
    return obj


def _replace(root: nn.Module, name: str, value) -> None:
    owner_name, _, attr = name.rpartition(".")
    owner = root.get_submodule(owner_name) if owner_name else root
    buffers, parameters = buffer_table(owner), parameter_table(owner)
    if attr in buffers:
        buffers[attr] = value
    elif attr in parameters:
        parameters[attr] = value
    else:
        setattr(owner, attr, value)


def modes(model) -> list[tuple[nn.Module, bool]]:
    """Every submodule with its train/eval flag, to put back with `restore_modes`.

    Introduced in chapter 3.
    """
    if not isinstance(model, nn.Module):
        return []
    return [(m, m.training) for m in model.modules()]


def restore_modes(saved) -> None:
    """Put back the training flags `modes` saved (ch. 3)."""
    for m, flag in saved:
        m.training = flag


def copies(inputs):
    """Fresh copies of the tensors in `inputs` (a model may write its input) (ch. 3)."""
    return tree_map(
        lambda t: t.clone() if isinstance(t, torch.Tensor) else t, inputs)


@contextlib.contextmanager
def preserved(module: nn.Module, seed: int | None = None):
    """Undo what a run writes: buffers, tensors attributes, the random generator.

    With `seed`, the run starts from `torch.manual_seed(seed)`, so two runs of
    models with dropout draw the same masks and can be compared (ch. 3).
    """
    tensors = _state_tensors(module)
    saved = [t.detach().clone() for t in tensors]
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        try:
            yield
        finally:
            with torch.no_grad():
                for t, s in zip(tensors, saved):
                    if not torch.equal(t, s):
                        t.copy_(s)


def _state_tensors(module) -> list[torch.Tensor]:
    """Buffers and plain tensor attributes: what a forward call may write."""
    if not isinstance(module, nn.Module):
        return []
    seen, out = set(), []
    for _, b in module.named_buffers(remove_duplicate=False):
        if id(b) not in seen:
            seen.add(id(b))
            out.append(b)
    for m in module.modules():
        for v in vars(m).values():
            if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter) \
                    and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


def flat_inputs(gm, args: tuple, kwargs: dict) -> tuple:
    """`args` and `kwargs` as the flat tuple of values the graph's placeholders take.

    Introduced in chapter 3.
    """
    if not kwargs:
        return tuple(args)
    spec = getattr(gm, "_in_spec", None)
    if spec is not None:
        return tuple(tree_flatten_spec((tuple(args), dict(kwargs)), spec))
    forward = gm.forward if isinstance(gm, GraphModule) else gm
    sig = inspect.signature(forward)
    # symbolic_trace renames a specialised argument (scale -> scale_1): it is fixed
    kwargs = {k: v for k, v in kwargs.items()
              if k in sig.parameters or isinstance(v, torch.Tensor)}
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.arguments.values())
