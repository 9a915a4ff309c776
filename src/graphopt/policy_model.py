"""Where the kernel policy's thresholds come from: the performance model (chapter 6).

Each size rule of `policy.Policy` answers one question: from what size does a
kernel's gain (dispatches saved, bytes not moved, threads added) repay its extra
fixed cost? The performance model answers it too, from a handful of nominal
constants written below (deterministic: no timing is taken here). `rules()` puts
the two side by side:

- a rule whose threshold lies within a factor of two of the model's break-even is
  *derived*: the model explains it;
- any other rule is a *measured exception*: the model misses something there (a
  cache it does not know, a library's fixed cost it cannot see), and the rule
  follows the measurement, which it carries with it.

The constants are this book's nominal laptop CPU (measured on 2-core EPYC and Xeon
machines with torch 2.13 and numba 0.68; benchmarks/ re-measures them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import policy as P
from .measure.perf_model import Machine, predict
from .passes.convert_layout import MIN_CONVS

NOMINAL_CPU = Machine("nominal laptop CPU, 1 thread", bandwidth_gbps=20,
                      peak_gflops=80, launch_us=0.0, dispatch_us=1.4,
                      asynchronous=False, origin="nominal",
                      note="DRAM copy 20 GB/s, matmul 80 GFLOP/s, one aten op 1.4 us")
CACHE_GBPS = 100          # data that fits the L2 cache moves about 5x faster
L2_BYTES = 1 << 20        # a per-core L2 of 1 MiB (512 KiB-2 MiB on laptops)
KERNEL_CALL_US = 1.2      # a generated kernel's call, before its operands...
OPERAND_US = 1.2          # ...plus a numpy view and a check per tensor it reads
SCALAR_CALL_NS = 17       # a C library tanhf per element, over torch's vector tanh
POOL_WAKE_US = 80         # numba's thread pool woken for one parallel loop
ONEDNN_CALL_US = 25       # oneDNN's fused conv/linear before any arithmetic
FLOAT = 4                 # bytes per float32 element


def _bandwidth(working_set: float) -> float:
    """Bytes per second for data of this size: the cache's below L2, else DRAM."""
    gbps = CACHE_GBPS if working_set <= L2_BYTES else NOMINAL_CPU.bandwidth_gbps
    return gbps * 1e9


def _first_power_of_two(pays) -> int:
    """The smallest 2^k (k = 0..30) where `pays(n)` holds."""
    return next((1 << k for k in range(31) if pays(1 << k)), 1 << 31)


def group_break_even(ops: int, operands: int) -> int:
    """Elements from which a generated kernel of a chain of `ops` elementwise ops
    reading `operands` tensors beats the ops run one by one, one output (ch. 6)."""
    def pays(n: int) -> bool:
        eager_bytes = FLOAT * n * (operands + 2 * ops - 1)  # intermediates round-trip
        fused_bytes = FLOAT * n * (operands + 1)
        bw = _bandwidth(eager_bytes)
        eager = ops * NOMINAL_CPU.dispatch_us * 1e-6 + eager_bytes / bw
        fused = (KERNEL_CALL_US + OPERAND_US * operands) * 1e-6 + fused_bytes / bw
        return fused <= eager
    return _first_power_of_two(pays)


def scalar_math_break_even(ops: int = 9) -> int:
    """Elements from which a group of `ops` holding one scalar-library op (GELU's
    tanh form: 9 ops) loses to torch's vectorised ops: its per-element call cost
    outgrows the dispatches the kernel saves (ch. 6)."""
    saved = (ops * NOMINAL_CPU.dispatch_us - KERNEL_CALL_US - OPERAND_US) * 1e-6
    return _first_power_of_two(lambda n: n * SCALAR_CALL_NS * 1e-9 > saved)


def parallel_break_even(threads: int = 2, bytes_per_element: int = 2 * FLOAT) -> int:
    """Elements from which a parallel elementwise loop repays waking the pool: the
    time it saves (all but 1/threads of the serial loop) exceeds the wake-up
    (ch. 6)."""
    def pays(n: int) -> bool:
        serial = n * bytes_per_element / _bandwidth(n * bytes_per_element)
        return serial * (1 - 1 / threads) > POOL_WAKE_US * 1e-6
    return _first_power_of_two(pays)


def onednn_break_even_flops() -> int:
    """FLOPs below which oneDNN's fixed cost per call exceeds the arithmetic itself,
    so the activation pass its fusion saves (smaller still) cannot repay it
    (ch. 6)."""
    per_call = predict(NOMINAL_CPU, kernels=0).seconds + ONEDNN_CALL_US * 1e-6
    return _first_power_of_two(
        lambda flops: flops / (NOMINAL_CPU.peak_gflops * 1e9) >= per_call)


@dataclass(frozen=True)
class Rule:
    """One threshold of the fixed policy beside the model's break-even (ch. 6)."""

    name: str        # the Policy field (or constant) it sets
    threshold: int   # what the policy uses
    model: int       # what the model derives
    unit: str
    data: str        # the measurement behind the threshold

    @property
    def derived(self) -> bool:
        return abs(math.log2(max(self.threshold, 1) / max(self.model, 1))) <= 1

    @property
    def verdict(self) -> str:
        if self.derived:
            return "derived: within 2x of the model's break-even"
        return "measured exception: the rule follows " + self.data


def rules(policy: P.Policy = P.DEFAULT) -> list[Rule]:
    """Every size rule of the fixed policy, with the model's break-even (ch. 6)."""
    return [
        Rule("min_numel (3+ ops, 1 tensor)", max(policy.min_numel, 1),
             group_break_even(3, 1), "elements",
             "relu(x * 2 + 1) 2.4-2.8 us as a kernel vs 6.5-7.4 eager (2-core EPYC)"),
        Rule("short_group_numel (2 ops, 3 tensors)", policy.short_group_numel,
             group_break_even(2, 3), "elements",
             "(x + y) * w: 27.8 us as a kernel vs 26.1 eager at 65,536 elements, "
             "199 vs 269 at 262,144 (2-core Xeon, 1 thread)"),
        Rule("operand_group_numel (3 ops, 4 tensors)", policy.operand_group_numel,
             group_break_even(3, 4), "elements",
             "rotary a * b + c * d: 5.9-6.8 us vs 4.0-5.4 eager up to 8192, 10.5 vs "
             "13.4 at 32,768 (2-core EPYC, 1 thread)"),
        Rule("scalar_math_numel (tanh GELU, 9 ops)", policy.scalar_math_numel,
             scalar_math_break_even(9), "elements",
             "tanh GELU as one kernel: 0.88x eager on 1024, 1.9x on 4096"),
        Rule("parallel_numel (2 threads)", policy.parallel_numel,
             parallel_break_even(2), "elements",
             "serial 117 us at 1M elements where waking the pool cost 73-88 us: "
             "the data sat in the L3 cache, faster than the model's DRAM"),
        # a row kernel sweeps its row several times and computes exp: about four
        # times an elementwise loop's work per element
        Rule("row_parallel_numel (2 threads)", policy.row_parallel_numel,
             parallel_break_even(2, bytes_per_element=8 * FLOAT), "elements",
             "softmax on 2048 x 1024 ran 1.9x faster in parallel; the LayerNorm+Add "
             "kernel's own crossover was 2^17 (~0.2 ms per launch under load)"),
        Rule("small_gemm_flops", policy.small_gemm_flops,
             onednn_break_even_flops(), "FLOPs",
             "4x16->32 linear+ReLU 29 us fused vs 11 us aten (2-core Xeon)"),
        Rule("MIN_CONVS (convert_layout)", MIN_CONVS, 1, "convs",
             "a two-conv BasicBlock ran 1.02-1.11x the stage before with its "
             "layout converted; the model counts no cost for a layout change"),
    ]
