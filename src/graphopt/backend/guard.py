"""The wrapper's entry guard: one generated check of every input (chapter 7).

The graph is specialised to its example inputs, so when the inputs have the recorded
shapes, strides, dtypes and devices, and autograd is not recording, every
intermediate is what it was at optimize time, and each fused node's plan (chosen on
those shapes) still holds. The guard is generated (`wrapper_of(m).guard_source`): one
straight `and` of C-level checks: every tensor at once in C++ (its exact type,
shape, stride, dtype and device: the check torch.compile's own guards make), the
same checks in Python only where it says no, written at the head of the
wrapper's function: no frame, loop, list or dict of its own per call. A flag the
graph was specialised to (`use_cache=False`) must come again with the same value,
as torch.export's own guard wants it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..torch_internals import tensor_guards

SIMPLE = (int, float, bool, str, type(None))


@dataclass(frozen=True)
class Constant:
    """A Python value the graph was specialised to (`use_cache=False`): the guard
    wants the same value again, as torch.export's own guard does (ch. 7)."""

    value: Any


def recorded(x):
    """What the guard checks of one example input, or None where it cannot (ch. 7)."""
    if isinstance(x, torch.Tensor):  # a FakeTensor is one too
        return (x.shape, x.stride(), x.dtype, x.device)
    if type(x) in SIMPLE and not (type(x) is float and math.isnan(x)):
        return Constant(x)  # a flag given by keyword (use_cache=False)
    return None


class Miss:
    """What the wrapper's function returns when its guard fails (ch. 7): the
    wrapper then runs the general path (a model's own output is never this object)."""

    def __repr__(self) -> str:
        return "MISS"


MISS = Miss()


def guard_checks(names: list, guard: list, records: Callable,
                 constant: Callable) -> list:
    """The entry guard's checks as source, one `and` term each (ch. 7).

    Written out rather than looped over so that a call runs no Python frame of
    its own: one C++ check of every tensor (dynamo's `TensorGuards`: exact type,
    shape, stride, dtype, device, and dispatch keys and requires_grad as recorded),
    falling back to the same checks in Python (`type(x) is Tensor and x.shape ==
    shape_0`, ...) for what it refuses (a tensor made under inference_mode); type
    checks ahead of the C++ one cost 0.1 us on a 4 us toy. `records` (autograd's
    inputs and weights) runs only in grad mode; `constant(hint, value)` names a
    value the source reads.
    """
    tensor, type_of = constant("Tensor", torch.Tensor), constant("type_of", type)
    checks, tensors, python = [], [], []
    for i, (x, want) in enumerate(zip(names, guard)):
        if type(want) is Constant:  # a flag the graph is specialised to
            value = want.value
            checks.append(f"{type_of}({x}) is {constant(f'type_{i}', type(value))} and "
                          f"{x} == {constant(f'value_{i}', value)}")
            continue
        shape, stride, dtype, device = (constant(f"{k}_{i}", v) for k, v in zip(
            ("shape", "stride", "dtype", "device"), want))
        tensors.append((x, want))
        python += [f"{type_of}({x}) is {tensor}",
                   f"{x}.shape == {shape} and {x}.stride() == {stride}",
                   f"{x}.dtype is {dtype} and {x}.device == {device}"]
    at_once = tensor_guards([want for _, want in tensors]) if tensors else None
    if at_once is None:
        checks += python
    else:  # the C++ check (type included) first; Python only where it says no
        xs = ", ".join(x for x, _ in tensors)
        # continuation lines under the call: after `if not (` or after `and (`
        pad = "\n" + " " * (17 if checks else 13)
        checks.append(f"({constant('tensors', at_once)}({xs}){pad}or " +
                      f"{pad}and ".join(python) + ")")
    flat = f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"
    grad = constant("grad", torch.is_grad_enabled)
    checks.append(f"not ({grad}() and {constant('records', records)}({flat}))")
    return checks


def guard_function(names: list, guard: list, records: Callable) -> tuple:
    """The entry guard alone as source and function (ch. 7): what `matches` asks;
    the wrapper's function starts with the same checks."""
    namespace = {}

    def constant(hint: str, value) -> str:
        name = hint
        while name in names or name in namespace:
            name += "_"
        namespace[name] = value
        return name

    checks = guard_checks(names, guard, records, constant)
    source = f"def guard({', '.join(names)}):\n    return (" + \
        "\n            and ".join(checks) + ")\n"
    exec(compile(source, "<graphopt guard>", "exec"), namespace)  # noqa: S102
    return source, namespace["guard"]


def parameter_names(codegen, places) -> tuple | None:
    """fx's forward's parameter for each placeholder, in order: () where keywords
    cannot be bound by name, None where the inputs are not one leaf per placeholder
    (ch. 7).

    torch.export's spec is `(args tuple, kwargs dict)`; fx's forward takes
    `orig_args` (the positional names, then the dict's keys) and flattens them in
    that same order, so placeholder i is the parameter named `orig_args[i]`.
    """
    info = getattr(codegen, "pytree_info", None)
    if info is None or info.in_spec is None:  # forward(self, <placeholder targets>)
        targets = tuple(str(p.target) for p in places)
        starred = any(t.startswith("*") for t in targets)
        return () if starred else targets
    spec = info.in_spec
    if spec.type is not tuple or spec.num_children != 2:
        return None
    args, kwargs = spec.children()
    if args.type is not tuple or kwargs.type is not dict:
        return None
    leaves = args.children() + kwargs.children()
    if len(leaves) != len(places) or not all(c.is_leaf() for c in leaves):
        return None
    names = tuple(info.orig_args)
    return names if len(names) == len(places) else ()
