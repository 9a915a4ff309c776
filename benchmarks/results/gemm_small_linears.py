"""oneDNN's prepacked linear against MKL's packed GEMM and F.linear on small and
mid-size products, 1 thread (the data behind policy.ONEDNN_GEMM_FLOPS; see
policy.md). Run: python benchmarks/results/gemm_small_linears.py"""

import os

import torch
import torch.nn.functional as F

from graphopt.backend import onednn
from graphopt.measure import compare
from graphopt.passes.activations import ACTIVATIONS

SHAPES = ((64, 128, 128), (64, 128, 256), (64, 128, 512), (64, 128, 1024),
          (64, 512, 128), (128, 128, 128), (128, 256, 256), (128, 256, 768),
          (128, 1024, 256), (32, 256, 256))  # (M, K, N)


def calls(m: int, k: int, n: int) -> dict:
    """The three kernels on one (M, K, N) product with a bias, checked first."""
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    packed, mkl = onednn.pack_linear_weight(w, m), onednn.pack_mkl_linear_weight(w, m)
    fns = {"onednn": lambda: onednn.linear_act(x, packed, b, ACTIVATIONS["none"]),
           "mkl": lambda: onednn.mkl_linear(x, mkl, w, b, m),
           "F.linear": lambda: F.linear(x, w, b)}
    for name, fn in fns.items():
        assert torch.allclose(fn(), F.linear(x, w, b), atol=1e-3, rtol=1e-4), name
    return fns


def main() -> None:
    torch.manual_seed(0)
    print("load", os.getloadavg())
    for m, k, n in SHAPES:
        with torch.no_grad():
            fns = calls(m, k, n)
            c = compare(fns, rounds=15, threads=1)
        times = "  ".join(f"{k_} {c[k_].median * 1e6:7.1f}us" for k_ in fns)
        print(f"M{m} K{k} N{n} {2 * m * k * n / 2**20:5.1f} MFLOP {times} | "
              f"{c.verdict('onednn', 'mkl')}")
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
