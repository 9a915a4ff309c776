"""Kernel launches per call: eager's aten operators and inductor's generated calls.

Chapter 2 compares the two counts: `(x + y) * w` launches 2 kernels eagerly and 1 once
torch.compile has fused it.
"""

from __future__ import annotations

import re

import torch

from ..interpret import _KernelCounter
from ..torch_internals import dynamo_reset


def eager_kernels(model, *inputs) -> list[str] | None:
    """The aten operators eager mode dispatches for one call: one kernel launch each.

    Chapter 2 compares this count with `inductor_launches` of the compiled model.

    Counts as `graphopt.run` does (views and allocations are not kernels). Returns
    None for a model that calls a higher-order operator such as torch.cond: the ops
    inside it run out of the counter's sight.
    """
    counter = _KernelCounter()
    with torch.no_grad(), counter:
        model(*inputs)
    if counter.higher_order:
        # torch.cond runs through TorchDynamo in eager mode; under a dispatch mode that
        # leaves dynamo's caches unusable for the next torch.export: start it afresh
        dynamo_reset()
        return None
    return counter.names


_LAUNCH = re.compile(r"^\s*(?:\w+ = )?(extern_kernels\.\w+|torch\.ops\.\w+\.\w+"
                     r"|cpp_fused_\w+|triton_\w+|aten\.\w+)(?:\.default)?(?:\.run)?\(")


def inductor_launches(sources: list[str]) -> list[str]:
    """The kernels inductor's generated code launches per call, in order (chapter 2).

    Its `call()` function calls each fused kernel (`cpp_fused_*` on CPU, `triton_*` on
    GPU) and each library kernel (`extern_kernels.addmm`, aten fallbacks) once.
    """
    launches = []
    for source in sources:
        body = source[source.find("def call("):]
        body = body[:body.find("\nrunner = ")] if "\nrunner = " in body else body
        launches += [m.group(1) for line in body.splitlines()
                     if (m := _LAUNCH.match(line))]
    return launches
