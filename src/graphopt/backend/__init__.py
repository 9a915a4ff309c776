"""The performance backend: library kernels, prepacked weights, the wrapper (ch. 7).

`bind_backend(gm)` is the pipeline's last stage ("backend"): every fused pattern
module gets a library kernel (oneDNN with post-ops, MKL's GEMM, a numba row kernel;
cuDNN and Triton on a GPU), its weight is prepacked once, and the graph gets the
wrapper's fast path. Choices come from the kernel policy (`graphopt.policy`).

Modules, in the order the stage uses them: `single_ops` (lone convs and linears),
`kernels` (the calls bound to each module), `prepack`, `onednn` (oneDNN and MKL
entry points), `rowwise` / `rowwise_numba` (the LayerNorm+Add row kernel),
`patterns_gpu` / `patterns_triton` (cuDNN and Triton), `direct_calls` and
`wrapper` (the straight-line function), `stage` (the stage itself).
"""

from .stage import bind, bind_backend

__all__ = ["bind", "bind_backend"]
