"""BERT's linears: the fixed policy's GEMM library against MKL's prepacked GEMM.

Run:  python benchmarks/results/cpu_bert_mkl_ab.py THREADS ROUNDS

graphopt.models.example("bert") through every stage (`graphopt.optimize`) twice: the
default policy (oneDNN, bias and activation as post-ops, except where its own rules
pick MKL) and `Policy(gemm_library="mkl")` (MKL's prepacked GEMM, what inductor's
freezing calls, then torch's activation). Outputs checked equal (rtol 1e-4), the
linears each one runs counted, then timed in interleaved rounds
(`graphopt.measure.compare`: median and IQR per call, its verdict and conditions).
"""

import sys
import warnings
from collections import Counter

import numba
import torch

import graphopt
from graphopt.measure import compare
from graphopt.models import example
from graphopt.passes.fused_modules import LinearReLU
from graphopt.policy import Policy


def linear_kernels(module) -> Counter:
    """How many linears run on each library ("onednn", "mkl", "eager")."""
    gm = getattr(module, "graph_module", module)
    return Counter(m.kernel for m in gm.modules() if isinstance(m, LinearReLU))


def main(threads: int, rounds: int) -> None:
    torch.set_num_threads(threads)
    numba.set_num_threads(threads)
    model, inputs = example("bert")
    policies = {"default policy": Policy(), "MKL packed + torch act":
                Policy(gemm_library="mkl")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fns = {k: graphopt.optimize(model, *inputs, stats=False, policy=p).module
               for k, p in policies.items()}
    with torch.no_grad():
        ref, alt = (f(*inputs) for f in fns.values())
        torch.testing.assert_close(alt, ref, rtol=1e-4, atol=1e-4)
        times = compare(fns, *inputs, rounds=rounds, threads=threads)
    for k, f in fns.items():
        t = times[k]
        print(f"{k}: {t.median * 1e3:.2f} ms (IQR {t.iqr * 1e3:.2f}), "
              f"linears {dict(linear_kernels(f))}")
    print(times.verdict("MKL packed + torch act", "default policy"))
    print(times.conditions)

if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
