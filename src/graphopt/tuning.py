"""The measured policy's record, made before the stages run (chapters 6, 7).

`tune(model, *x)` answers, on this machine, every question the kernel policy would
otherwise answer by a fixed rule, and returns a `Policy` holding the answers: the
sizes `codegen.calibrate` measures (from which size a generated kernel beats the
group's eager ops, and a parallel loop the serial one), then, for this model's own
shapes, whether eager conv2d beats oneDNN on a 1x1 map, MKL or oneDNN for each
linear, and whether each row kernel should split its rows. It runs the stages
once with a *recording* policy (each question timed, its answer written down, the
row kernels asked at their first call on the example inputs) and throws that
run away. `optimize(..., policy="measured")` calls it first, then runs its stages
under the record: they time nothing, and `Policy.save` / `Policy.load` replay the
same choices later or elsewhere. This is TVM's split: a tuning database made by
measuring, then applied by a pass.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from .backend import bind_backend
from .codegen import calibrate, lower
from .passes.pipeline import PASSES
from .passes.result import PassResult
from .policy import Policy
from .stages import as_graph_module, run_stages
from .state import flat_inputs


def stage_table(policy: Policy) -> dict[str, Callable[..., PassResult]]:
    """The stages by name: the graph passes, then `lower` and `backend` with
    `policy` bound as their argument (chapter 7)."""
    return {**PASSES, "lower": partial(lower, policy=policy),
            "backend": partial(bind_backend, policy=policy)}


def tune(model_or_gm, *example_inputs, passes=None, **example_kwargs) -> Policy:
    """Measure the kernel choices of `passes` (default: every stage) on this
    machine for this model and inputs; the measured `Policy` (chapter 6)."""
    gm = as_graph_module(model_or_gm, example_inputs, example_kwargs)
    inputs = flat_inputs(gm, example_inputs, example_kwargs)
    cal = calibrate.calibration()
    record = {"min_numel": cal.min_numel, "parallel_numel": cal.parallel_numel}
    probe = Policy.measured(record).recording(record)
    table = stage_table(probe)
    # stats=True runs the last stage once on the inputs: each row kernel plans
    # (and, recording, times) at its first call
    run_stages(gm, *inputs, passes=tuple(table) if passes is None else passes,
               table=table, stats=True, keep_stages=False)
    return Policy.measured(record)
