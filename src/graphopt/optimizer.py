"""`graphopt.optimize`: the graph passes, then `lower`, then `backend` (chapters 5-7).

    captured ─► the graph passes (passes.pipeline.PIPELINE, chapters 3-5)
             ─► lower     every fused group becomes one generated kernel (chapter 6)
             ─► backend   library kernels bound, weights prepacked, the wrapper
                          built (chapter 7)

The graph passes decide what is fused; they give the same graphs and counts on
every machine. `lower` and `backend` decide how each fused node runs, by the kernel
policy (`graphopt.policy`): fixed rules on shapes, dtypes and the libraries
installed by default, so they too give the same result everywhere; with
`policy="measured"` they time candidates on this machine. Every stage appears by
name in `result.stages`, so a reader sees where a group became one kernel.

    graphopt.optimize(model, x)                          # everything, fast
    graphopt.optimize(model, x, passes=GRAPH_PASSES)     # the graph passes only
"""

from __future__ import annotations

from typing import Sequence

from .backend import bind_backend
from .codegen import lower
from .passes.pipeline import PASSES, OptimizeResult
from .passes.pipeline import optimize as run_passes
from .policy import using

STAGES = {**PASSES, "lower": lower, "backend": bind_backend}
GRAPH_PASSES: tuple[str, ...] = tuple(PASSES)
PIPELINE: tuple[str, ...] = tuple(STAGES)


def optimize(model_or_gm, *example_inputs, passes: Sequence | None = None,
             check: bool = False, stats: bool = True, keep_stages: bool = True,
             policy=None, **example_kwargs) -> OptimizeResult:
    """Optimise a model: every stage of `PIPELINE` by default (chapter 5).

    `passes`: names from `PIPELINE` (the graph passes, "lower", "backend") or your
    own functions `GraphModule -> PassResult`, run in the order given. `policy`
    ("fixed", the default, "measured", or a `graphopt.policy.Policy`) picks the
    kernels of `lower` and `backend`. `check`, `stats` and `keep_stages` are those
    of the pass pipeline (`passes.pipeline.optimize`). `result.module` is the last
    stage's module; after `backend` it runs the wrapper's fast path.

    Nothing is lost: the caller's model and inputs are unchanged, and each stage is
    a new module (`result.stages`). Bounded (fresh process, 2 cores, import
    included): ResNet-18 64x64 788 MiB RSS, 1439 MiB address space, 5 s
    (check=True: 794 MiB, 6 s); BERT 4 layers x 32 tokens 1096 MiB, 1928 MiB, 7 s
    (README: Bounds).
    """
    with using("fixed" if policy is None else policy):
        return run_passes(model_or_gm, *example_inputs,
                          passes=PIPELINE if passes is None else passes,
                          check=check, stats=stats, keep_stages=keep_stages,
                          table=STAGES, **example_kwargs)
