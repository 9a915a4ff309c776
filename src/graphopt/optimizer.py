"""`graphopt.optimize`: the graph passes, then `lower`, then `backend` (chapters 5-7).

    captured ─► the graph passes (passes.pipeline.PIPELINE, chapters 3-5)
             ─► lower     every fused group becomes one generated kernel (chapter 6)
             ─► backend   library kernels bound, weights prepacked, the wrapper
                          built (chapter 7)

The graph passes decide what is fused; they give the same graphs and counts on
every machine. `lower` and `backend` decide how each fused node runs, by the kernel
policy (`graphopt.policy.Policy`), a value handed to both as an argument: fixed
rules on shapes, dtypes and the libraries installed by default, so they too give
the same result everywhere. With `policy="measured"` the choices are timed on this
machine first (`graphopt.tuning.tune`) and the stages apply that record. Every
stage appears by name in `result.stages`, so a reader sees where a group became
one kernel. The driver that runs and keeps the stages is `graphopt.stages`.

    graphopt.optimize(model, x)                          # everything, fast
    graphopt.optimize(model, x, passes=GRAPH_PASSES)     # the graph passes only
"""

from __future__ import annotations

from typing import Sequence

from .backend import bind_backend
from .backend.blocked import blocked_layout
from .codegen import lower
from .i18n import _
from .passes.pipeline import PASSES
from .policy import Policy, resolve
from .stages import OptimizeResult, as_graph_module, run_stages
from .state import flat_inputs
from .tuning import stage_table, tune

STAGES = {**PASSES, "lower": lower, "backend": bind_backend}
GRAPH_PASSES: tuple[str, ...] = tuple(PASSES)
PIPELINE: tuple[str, ...] = tuple(STAGES)
OPT_IN = {"blocked_layout": blocked_layout}  # stages no default pipeline runs
LAYOUTS = ("channels_last", "blocked")


def with_layout(passes: Sequence, layout: str) -> tuple:
    """`passes` with its layout stages: "channels_last" as they are; "blocked" adds
    `blocked_layout` before `convert_layout` (or before `lower`, `backend`), so the
    regions oneDNN can run blocked are blocked and `convert_layout` runs the rest
    channels-last as before (chapter 7)."""
    if layout not in LAYOUTS:
        raise ValueError(_("layout={layout}: use one of {layouts}").format(
            layout=repr(layout), layouts=LAYOUTS))
    rest = [p for p in passes if p != "blocked_layout"]
    if layout == "channels_last":
        return tuple(rest)
    at = next((rest.index(p) for p in ("convert_layout", "lower", "backend")
               if p in rest), len(rest))
    return tuple(rest[:at]) + ("blocked_layout",) + tuple(rest[at:])


def optimize(model_or_gm, *example_inputs, passes: Sequence | None = None,
             check: bool = False, stats: bool = True, keep_stages: bool = True,
             policy=None, layout: str = "channels_last",
             **example_kwargs) -> OptimizeResult:
    """Optimise a model: every stage of `PIPELINE` by default (chapter 5).

    `passes`: names from `PIPELINE` (the graph passes, "lower", "backend") or your
    own functions `GraphModule -> PassResult`, run in the order given. `policy`
    ("fixed", the default, "measured", or a `graphopt.policy.Policy`) picks the
    kernels of `lower` and `backend`; "measured" first times them here
    (`graphopt.tuning.tune`), and the first stage's notes hold that record's size.
    `result.policy` is the policy applied (`Policy.save` keeps a measured record).
    `layout="blocked"` (opt-in) runs the convolution regions oneDNN can take in its
    blocked layout, the rest channels-last (`with_layout`, `backend/blocked.py`;
    measured slower at batch 1: `benchmarks/results/blocked_layout.md`).
    `check`, `stats` and `keep_stages` are those of the driver
    (`graphopt.stages.run_stages`). `result.module` is the last stage's module;
    after `backend` it runs the wrapper's fast path.

    Nothing is lost: the caller's model and inputs are unchanged, and each stage is
    a new module (`result.stages`). Bounded (fresh process, 2 cores, import
    included): ResNet-18 64x64 788 MiB RSS, 1439 MiB address space, 5 s
    (check=True: 794 MiB, 6 s); BERT 4 layers x 32 tokens 1096 MiB, 1928 MiB, 7 s
    (README: Bounds).
    """
    passes = PIPELINE if passes is None else passes
    if layout != "channels_last":
        passes = with_layout(passes, layout)
    if isinstance(policy, str) and policy == "measured":
        model_or_gm, example_inputs, policy = _measured_first(
            model_or_gm, example_inputs, example_kwargs, passes)
        example_kwargs = {}
    policy = resolve(policy)
    result = run_stages(model_or_gm, *example_inputs, passes=passes, check=check,
                        stats=stats, keep_stages=keep_stages,
                        table={**stage_table(policy), **OPT_IN},
                        **example_kwargs)
    result.policy = policy  # a measured record can be saved and replayed
    return result


def _measured_first(model_or_gm, example_inputs, example_kwargs, passes):
    """(graph module, flat inputs, the measured Policy) for `passes`: the record
    is timed here before the stages run (`tune`); empty where no stage of
    `passes` asks the policy anything (chapter 6)."""
    gm = as_graph_module(model_or_gm, example_inputs, example_kwargs)
    inputs = tuple(flat_inputs(gm, example_inputs, example_kwargs))
    chooses = any(p in ("lower", "backend") for p in passes
                  if isinstance(p, str)) or not isinstance(passes, (list, tuple))
    if not chooses:
        return gm, inputs, Policy.measured()
    return gm, inputs, tune(gm, *inputs,
                            passes=[p for p in passes if p != "blocked_layout"])
