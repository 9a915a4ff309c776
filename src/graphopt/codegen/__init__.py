"""Generated kernels: one fused group becomes one kernel (chapter 6).

    kernel = graphopt.codegen.compile_group(gm, example_inputs, backend="auto")
    print(kernel.source)        # the generated numba or Triton text
    y = kernel(x, w)            # output from a pool reused only when safe, or out=y

`backend="auto"` picks Triton for CUDA tensors and numba for CPU tensors; when neither
can run it runs the group's own GraphModule (the *reference executor*) and says why
with a KernelFallbackWarning. Groups are elementwise chains, or row reductions
(softmax, layer norm, RMSNorm, sums and means over the last dimension) with
elementwise producers and consumers: see `reduce`.

`lower(gm)` is the pipeline's stage: every fused group's node becomes a
`GeneratedKernel`, which runs it as one kernel.

Modules: `lower` (the stage), `op_table`, `program`, `lowering`, `layout` (the op
table, programs, their lowering from a GraphModule, index layouts; re-exported by
`common`), `reduce_program` / `reduce_rows` (row reductions: their statements, one
call's rows; which ones fuse is `passes.row_reductions`), `cpu` / `reduce_cpu`
(numba), `triton` / `reduce_triton` (Triton), `exp_numba` / `erf_numba`
(vectorisable float32 exp and erf), `kernel` (the `Kernel` class), `cache`
(compiled kernels), `fallback` (why a group runs its reference executor), `launch`
(per-signature plans, `LaunchPlan`; safe output reuse), `fused` (`GeneratedKernel`,
a fused node's call: its plan per signature, `plan_of`), `calibrate` (sizes measured
on this machine, for the opt-in measured policy; the default is `graphopt.policy`'s
fixed rules), `interleaved` (the best-per-call timer), `inductor` (torch.compile's
code). Library kernels (oneDNN, MKL, cuDNN) and the wrapper are `graphopt.backend`.
"""

from .calibrate import Calibration, calibration
from .fused import (
    GeneratedKernel,
    kernel_of,
    kernels_for,
    min_numel,
    plan_kind,
    plan_of,
)
from .kernel import (
    BACKENDS,
    CacheInfo,
    Kernel,
    KernelFallbackWarning,
    cache_info,
    clear_cache,
    compile_group,
    numba_available,
)
from .lower import lower

__all__ = ["BACKENDS", "CacheInfo", "Calibration", "GeneratedKernel", "Kernel",
           "KernelFallbackWarning", "cache_info", "calibration", "clear_cache",
           "compile_group", "kernel_of", "kernels_for", "lower", "min_numel",
           "numba_available", "plan_kind", "plan_of"]
