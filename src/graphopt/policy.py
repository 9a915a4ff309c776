"""The kernel policy: which kernel runs a fused node, decided from shapes (chapter 7).

Lowering and the backend make choices a graph alone does not fix: oneDNN or eager
conv2d for a squeeze-and-excitation gate, MKL or oneDNN for a linear, a generated
kernel or the group's own eager ops, a serial or a parallel loop. `Policy` makes
every one of them in one place.

The DEFAULT, `Policy()` ("fixed"), decides from the graph, shapes, dtypes and the
libraries installed only, never from a timing: two machines, or a quiet and a busy
run, give the same graph, kernel counts and notes. Each rule is a small cost model
stated next to its constant with the measurement behind it. `Policy.measured()`
("measured") times the candidates on this machine instead (the calibration of
`codegen.calibrate`, `onednn.mkl_faster`, `onednn.eager_conv_faster`): faster
where the fixed rules guess wrong, but what it picks follows the machine's load.

    graphopt.optimize(model, x)                      # fixed: the same everywhere
    graphopt.optimize(model, x, policy="measured")   # timed here, opt-in

The `lower` and `backend` stages read the policy in force (`current()`; `optimize`
sets it with `using`); `lower` stores it on each generated kernel, so a later call
decides the same way. The graph passes never read it: what they fuse does not depend
on it. This module imports nothing from codegen until a measured choice is asked for.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

# A generated elementwise kernel runs from this many output elements on; below it
# the group's eager ops run. Measured (2 cores, torch 2.13, numba 0.68): the 2-op
# group x * 1.5 + 0.5 took 5.9 us as a serial kernel and 11.2 us eagerly on ONE
# element, 6.5 against 12.6 us on 4096: our per-call cost is below two torch
# dispatches, so the kernel is never slower on flat inputs and the threshold is 0.
MIN_NUMEL = 0
# From this many elements a numba elementwise loop runs on all threads. Waking
# numba's pool cost 73-88 us a call on 2 cores (the parallel 2-op kernel on 1 to
# 4096 elements) where the serial loop took 6 us; serial reached 117 us only at
# 1M elements. Below 1M the hand-off cannot pay.
PARALLEL_NUMEL = 1 << 20
# A row kernel (softmax, layer norm) does several sweeps and exp per element, so its
# crossover is lower: softmax on 2048 x 1024 ran 1.9x faster in parallel while the
# elementwise rule said serial. From 2^17 elements (the LayerNorm+Add kernel's
# threshold, measured ~0.2 ms per launch under load) the rows are split.
ROW_PARALLEL_NUMEL = 1 << 17

# Ops a numba kernel computes by calling the C library's scalar function for every
# element (numba has no vector version of them without SVML; exp and erf have their
# own vectorisable code, sqrt is an LLVM intrinsic). Measured (1 thread, 2-core EPYC,
# torch 2.13, numba 0.68): tanhf costs 17-25 ns an element where torch's vectorised
# tanh costs 2-4 ns; the tanh form of GELU (9 ops) as one kernel took 0.54x eager's
# time on 256 elements, 0.88x on 1024, 1.9x on 4096 and 5.3x on 131072. From 1024
# elements a CPU group holding one of them runs its eager ops.
SCALAR_MATH_OPS = frozenset({"tanh", "log", "sin", "cos"})
SCALAR_MATH_NUMEL = 1 << 10

# A group of fewer than SHORT_GROUP_OPS ops runs its eager ops below SHORT_GROUP_NUMEL
# elements. A generated kernel's call has a fixed cost (a numpy view of each operand,
# numba's dispatch, the output from the pool: 8-15 us through the wrapper) that one
# saved torch dispatch (1.5-5 us) does not repay. Measured at 1 thread (2-core Xeon,
# torch 2.13, numba 0.68, best of 7 rounds): (x + y) * w took 15 us as a kernel and
# 6.7 us eagerly on 16 to 1024 elements, 18.6 against 11.7 on 16384, 27.8 against
# 26.1 on 65536 and 199 against 269 on 262144; three ops or more (relu((x + y) * 2 -
# 1), eight in chapter 6's chain) won at every size from 16 elements. The call's
# cost also grows with each tensor the kernel reads (a numpy view and a check each):
# an elementwise group reading as many tensors as it has ops saves fewer dispatches
# than its call costs, and runs its eager ops below OPERAND_GROUP_NUMEL elements (a
# row kernel's weight and bias are operands too, but it saves more: LayerNorm(gelu(x)
# + r) on 16 x 64 took 16 us as a kernel against 21 eagerly). Measured at 1 thread
# (2-core EPYC, best of 9): rotary embedding's a * b + c * d (3 ops, 4 tensors) took
# 5.9-6.8 us as a kernel against 4.0-5.4 eagerly from 256 to 8192 elements, 10.5
# against 13.4 on 32768; a decomposed layer norm's (x - mean) * rstd * w + b (4 ops,
# 5 tensors) 10.2 against 9.5 on 16384; relu(x * 2 + 1) (3 ops, 1 tensor) 2.4-2.8
# against 6.5-7.4.
SHORT_GROUP_OPS = 3
SHORT_GROUP_NUMEL = 1 << 16
OPERAND_GROUP_NUMEL = 1 << 14

# oneDNN's fused conv and linear kernels (`_convolution_pointwise`,
# `_linear_pointwise`) cost some 25-30 us a call before any arithmetic. Measured at 1
# thread (2-core Xeon, torch 2.13, best of 7 rounds): a 4x16->32 linear+ReLU took 29 us
# where aten's linear and relu took 11 and MKL's GEMM then relu 9; a 3x3 conv+ReLU on
# 1x8x16x16 (0.3 MFLOP) took 50 us against eager's 20, one on 1x64x16x16 (19 MFLOP)
# 164 against 194. Below this many FLOPs (2 per multiply-add) that fixed cost outweighs
# the activation's pass that fusing saves: the pattern runs its library ops unfused.
# It made graphopt.models' mlp, seed_conv_block and transformer_block 1.5x slower
# than eager (benchmarks/slower_than_eager.py). A grouped (depthwise) conv keeps its
# fused kernel at any size: with one input channel per filter its FLOPs are small
# while its output, the pass fusion saves, is full size. MobileNetV3-Small (224x224)
# ran 7% slower with its three sub-2^20 depthwise convs unfused (2.69 against 2.46
# ms at 1 thread, 3.19 against 2.91 at 2; 2-core EPYC, best of 21 interleaved rounds).
SMALL_GEMM_FLOPS = 1 << 20

TINY_MAP = ("a 1x1 input map: eager conv2d, oneDNN's fixed cost per call outweighs "
            "a matrix-vector product (measured 8.6x slower; policy fixed)")
MKL_GEMM = ("MKL's packed GEMM with the bias (policy fixed: BERT's plain linears ran "
            "0.84-0.99x their oneDNN time at 1 and 2 threads)")
MKL_GEMM_GELU = ("MKL's packed GEMM with the bias, then torch's GELU (oneDNN's GELU "
                 "post-op cost 400-600 us a call on BERT against 40-155 us)")
TINY_MAP_MEASURED = ("a 1x1 input map: eager conv2d (then its activation) measured "
                     "faster here than oneDNN's kernel (policy measured)")


@dataclass(frozen=True)
class Policy:
    """How the backend picks kernels (chapter 7). `name` is "fixed" or "measured".

    The numbers are the fixed rules' thresholds (see the module's constants for
    the measurements behind them); a measured policy ignores them and times.
    """

    name: str = "fixed"
    min_numel: int = MIN_NUMEL
    parallel_numel: int = PARALLEL_NUMEL
    row_parallel_numel: int = ROW_PARALLEL_NUMEL
    # Generated kernels on CPU inputs read with a run-time stride (a transposed or
    # permuted view): off, as that loop does not vectorise: relu(x.t() * 2 + b) on
    # 16 x 1024 took 38 us as a kernel against 18 us eagerly. Slices and broadcasts
    # keep the kernel: their steps along a row (1 or 0) are written into its source
    # (codegen.cpu); relu(c) * s + t + r with a per-channel s, t on 16x64x56x56 ran
    # 0.07-0.6x eager's time, gelu(a) * b on two slices as fast as on contiguous
    # inputs (it was 1150 against 37 us before the steps were written in).
    strided_kernels: bool = False
    scalar_math_numel: int = SCALAR_MATH_NUMEL
    small_gemm_flops: int = SMALL_GEMM_FLOPS
    short_group_ops: int = SHORT_GROUP_OPS
    short_group_numel: int = SHORT_GROUP_NUMEL
    operand_group_numel: int = OPERAND_GROUP_NUMEL

    @classmethod
    def measured(cls) -> "Policy":
        """The opt-in policy that times candidates on this machine (not reproducible
        across machines or loads: the timings decide)."""
        return cls(name="measured", strided_kernels=True)

    @property
    def is_measured(self) -> bool:
        return self.name == "measured"

    # -- elementwise groups (codegen.fused, codegen.kernel)
    def kernel_min_numel(self) -> int:
        """Below this many elements a fused group runs its eager ops."""
        if self.is_measured:
            from .codegen.calibrate import calibration
            return calibration().min_numel
        return self.min_numel

    def scalar_math_eager(self, ops, numel: int, device: str) -> str:
        """Why a group runs its eager ops although it has a kernel, or "": on a CPU,
        from `scalar_math_numel` elements, a group that computes an op the kernel
        would call the C library for one element at a time (SCALAR_MATH_OPS)."""
        slow = sorted(SCALAR_MATH_OPS.intersection(ops))
        if not slow or device != "cpu" or numel < self.scalar_math_numel:
            return ""
        return (f"{', '.join(slow)} on {numel} elements: the kernel would call the C "
                f"library's scalar {', '.join(slow)} per element, torch's are "
                f"vectorised (policy {self.name}: from {self.scalar_math_numel})")

    def short_group_eager(self, ops, numel: int, operands: int = 1,
                          rows: bool = False) -> str:
        """Why a short group runs its eager ops, or "": a group of fewer than
        `short_group_ops` ops below `short_group_numel` elements, or an elementwise
        one (not `rows`: no row reduction) reading as many tensor `operands` as it
        has ops below `operand_group_numel`, saves fewer dispatches than its
        kernel's call costs (chapter 6). The measured policy leaves this to its
        measured `kernel_min_numel`."""
        if self.is_measured:
            return ""
        if len(ops) < self.short_group_ops and numel < self.short_group_numel:
            return (f"{len(ops)} ops on {numel} elements: a kernel's fixed cost per "
                    f"call is more than the dispatch it saves (policy {self.name}: "
                    f"groups of fewer than {self.short_group_ops} ops from "
                    f"{self.short_group_numel})")
        if operands >= len(ops) and not rows and numel < self.operand_group_numel:
            return (f"{len(ops)} ops on {numel} elements reading {operands} tensors: "
                    f"a kernel's call costs more with each tensor it reads than the "
                    f"dispatches it saves (policy {self.name}: groups reading as many "
                    f"tensors as they have ops from {self.operand_group_numel})")
        return ""

    def group_eager(self, ops, numel: int, device: str, operands: int = 1,
                    rows: bool = False) -> str:
        """Why a group of `ops` (with a row reduction: `rows`) reading `operands`
        tensors on `numel` elements runs its eager ops by the size rules (scalar
        maths, short groups), or "" (chapter 6). One place for both the per-call
        decision (`codegen.fused`) and `lower`'s note."""
        return self.scalar_math_eager(ops, numel, device) or \
            self.short_group_eager(ops, numel, operands, rows)

    def loop_parallel_numel(self) -> int:
        """From this many elements a numba elementwise loop runs in parallel."""
        if self.is_measured:
            from .codegen.calibrate import calibration
            return calibration().parallel_numel
        return self.parallel_numel

    def rows_parallel(self, numel: int, rows: int, threads: int, timed=None) -> bool:
        """Whether a row kernel splits its rows over threads. `timed()` -> bool
        measures it (asked only by the measured policy, between its thresholds)."""
        if threads < 2 or rows < 2:
            return False
        if not self.is_measured or timed is None:
            return numel >= self.row_parallel_numel
        pn = self.loop_parallel_numel()
        if numel * 64 < pn:
            return False
        return True if numel >= pn else timed()

    # -- pattern modules (passes.fused_modules, bound by backend.prepack)
    def too_small_for_onednn(self, flops: int, grouped: bool = False) -> str:
        """Why a conv or linear pattern of `flops` runs unfused library ops, or "":
        below `small_gemm_flops` oneDNN's fixed cost per call outweighs the fusion
        (chapter 7). A `grouped` (depthwise) conv is exempt (see SMALL_GEMM_FLOPS)."""
        if grouped or flops >= self.small_gemm_flops:
            return ""
        return (f"{flops} FLOPs: oneDNN's fixed cost per call (some 25 us) outweighs "
                f"the fusion below {self.small_gemm_flops} (policy {self.name})")

    def conv_on_tiny_map(self, has_act: bool, timed=None) -> str:
        """Why a conv on a 1x1 map runs eager conv2d (+ its activation), or "".

        Fixed: always eager; one kernel without an activation, two with one.
        Measured: with an activation only where `timed()` says eager won.
        """
        if not self.is_measured:
            return TINY_MAP
        if has_act and not (timed is not None and timed()):
            return ""
        return TINY_MAP_MEASURED

    def linear_on_mkl(self, act_name: str, timed=None) -> str:
        """Why a linear runs MKL's GEMM then `act`, or "" for oneDNN's fused kernel.

        Asked only where MKL is present and `act` is one MKL can take (none, exact
        GELU). Exact GELU always goes to MKL (oneDNN's GELU post-op cost 400-600 us
        on BERT against 40-155 us for torch's); fixed: no activation too.
        """
        if act_name == "gelu":
            return MKL_GEMM_GELU
        if not self.is_measured:
            return MKL_GEMM
        if timed is not None and timed():
            return ("MKL's packed GEMM with the bias, measured faster here than "
                    "oneDNN's kernel (policy measured)")
        return ""

    def describe(self) -> str:
        """One line for `PassResult.notes`: the rules in force."""
        if self.is_measured:
            return ("policy measured: kernel choices timed on this machine "
                    "(they follow its load)")
        return (f"policy fixed: generated kernel from {self.min_numel} elements on "
                f"contiguous rows ({self.short_group_numel} for groups of fewer than "
                f"{self.short_group_ops} ops), eager ops on transposed views; parallel "
                f"loops from {self.parallel_numel} elements ({self.row_parallel_numel} "
                "for row kernels)")


DEFAULT = Policy()
_CURRENT = {"policy": DEFAULT}


def resolve(policy) -> Policy:
    """A Policy from a Policy, "fixed", "measured" or None (the one in force).

    Introduced in chapter 6.
    """
    if policy is None:
        return _CURRENT["policy"]
    if isinstance(policy, Policy):
        return policy
    if policy == "fixed":
        return DEFAULT
    if policy == "measured":
        return Policy.measured()
    raise ValueError(f"policy must be a Policy, 'fixed' or 'measured', not {policy!r}")


def current() -> Policy:
    """The policy passes apply now (DEFAULT unless `using` set another) (ch. 6)."""
    return _CURRENT["policy"]


@contextlib.contextmanager
def using(policy):
    """Apply `policy` ("fixed", "measured" or a Policy) inside the block (ch. 6)."""
    before = _CURRENT["policy"]
    _CURRENT["policy"] = resolve(policy)
    try:
        yield _CURRENT["policy"]
    finally:
        _CURRENT["policy"] = before

