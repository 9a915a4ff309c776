"""The performance backend: library kernels, prepacked weights, the wrapper (ch. 7).

`bind_backend(gm)` is the pipeline's last stage ("backend"): every fused pattern
module gets a library kernel (oneDNN with post-ops, MKL's GEMM, a numba row kernel;
cuDNN and Triton on a GPU) as ONE plan (`plan.Plan`: its guard, its call, its kernel
count), its weight is prepacked once, and the graph is wrapped in a module with the
fast path (`wrapper.Wrapper`). Choices come from the kernel policy
(`graphopt.policy`).

Modules, in the order the stage uses them: `single_ops` (lone convs and linears),
`prepack`, `onednn` (oneDNN and MKL entry points), `rowwise` / `rowwise_numba` (the
LayerNorm+Add row kernel), `patterns_gpu` / `patterns_triton` (cuDNN and Triton),
`plan` (each node's plan), `guard` and `straight_line` (the wrapper's entry guard
and function), `wrapper` (the module), `stage` (the stage itself).
"""

from .stage import bind, bind_backend

__all__ = ["bind", "bind_backend"]
