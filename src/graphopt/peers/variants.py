"""The variants of a model, each a warmed-up callable on the same inputs (chapter 7).

`build(variant, model, inputs)` gives the callable; `time_calls` times it call by
call; `flat_tensors` puts any variant's output in one order, so every peer can be
checked against eager.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from ..torch_internals import tree_flatten
from .errors import PeerError
from .inductor import compiled
from .ort import onnx_runtime
from .waiting import ort_spins

VARIANTS = ("eager", "graphopt", "inductor", "inductor_freezing", "ort")


def flat_tensors(value) -> list[torch.Tensor]:
    """The tensors in a model's output, in pytree order (the order ONNX export uses)."""
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def check_variant(variant: str) -> None:
    """Raise PeerError unless `variant` is one of VARIANTS."""
    if variant not in VARIANTS:
        raise PeerError(f"unknown variant {variant!r}; choose from "
                        f"{', '.join(VARIANTS)}")


def build(variant: str, model, inputs: Sequence[torch.Tensor],
          threads: int | None = None, wait: str = "passive") -> Callable:
    """The callable for one variant, warmed up (compiled, exported) on `inputs`.

    `wait` says whether ONNX Runtime's threads may spin (`waiting.ort_spins`); torch's
    policy was fixed when this process loaded torch (`waiting.child_env`).
    """
    check_variant(variant)
    if threads:
        torch.set_num_threads(threads)
    model = model.eval()
    if variant == "eager":
        fn = model
    elif variant == "graphopt":
        from ..optimizer import optimize
        fn = optimize(model, *inputs, stats=False).module
    elif variant in ("inductor", "inductor_freezing"):
        fn = compiled(model, freezing=variant == "inductor_freezing")
    else:
        fn = onnx_runtime(model, inputs, threads or torch.get_num_threads(),
                          spin=ort_spins(wait))
    with torch.no_grad():
        fn(*inputs)
    return fn


def time_calls(fn: Callable, inputs, calls: int) -> list[float]:
    """Wall time of `calls` consecutive calls, one per call (seconds)."""
    times = []
    with torch.no_grad():
        for _ in range(calls):
            start = time.perf_counter()
            fn(*inputs)
            times.append(time.perf_counter() - start)
    return times
