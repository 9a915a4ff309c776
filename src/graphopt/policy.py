"""The kernel policy: which kernel runs a fused node, as a value (chapters 6, 7).

Lowering and the backend make choices a graph alone does not fix (oneDNN, MKL or
eager conv2d for a conv; MKL or oneDNN for a linear; a generated kernel or a group's
eager ops; a serial or a parallel loop). A `Policy` value makes every one of them;
`lower` and `backend` take it as an argument. Nothing here is global.

The DEFAULT, `Policy()` ("fixed"), decides from the graph, shapes, dtypes and
libraries only, never a timing (data: `benchmarks/results/policy.md`). A measured
policy carries a record (`choices`) of what `graphopt.tuning.tune` timed here, applied
by lookup (`save`, `load`: JSON); a question it lacks gets the fixed rule's answer.
This module imports only `graphopt.i18n`: its reasons are notes, shown translated.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path

from .i18n import _, note

# The fixed rules' thresholds (see benchmarks/results/policy.md for the data).
MIN_NUMEL = 0                    # a generated kernel from this many elements
PARALLEL_NUMEL = 1 << 20         # an elementwise loop on all threads from here
ROW_PARALLEL_NUMEL = 1 << 17     # a row kernel splits its rows from here
SCALAR_MATH_OPS = frozenset({"tanh", "log", "sin", "cos"})  # libm, one at a time
SCALAR_MATH_NUMEL = 1 << 10      # ...so eager ops from here on a CPU
SHORT_GROUP_OPS = 3              # groups of fewer ops...
SHORT_GROUP_NUMEL = 1 << 16      # ...run their eager ops below this size
OPERAND_GROUP_NUMEL = 1 << 14    # as many tensors as ops: eager below this size
SMALL_GEMM_FLOPS = 1 << 20       # oneDNN's fixed cost outweighs fusion below this
ONEDNN_GEMM_FLOPS = 1 << 24      # ...and MKL's shorter call wins below this
GEMM_LIBRARIES = ("onednn", "mkl")  # who runs a float32 linear from SMALL_GEMM_FLOPS
MKL_ACTS = ("none", "gelu")      # what may follow MKL's GEMM as torch's own kernel
TINY_MAP = note("a 1x1 input map: eager conv2d, oneDNN's fixed cost per call outweighs"
                " a matrix-vector product (measured 8.6x slower; policy fixed)")
TINY_MAP_MEASURED = note("a 1x1 input map: eager conv2d (then its activation) "
                         "measured faster here than oneDNN's kernel (policy measured)")


class PolicyError(ValueError):
    """A policy that cannot be made or read; the message says what to do (ch. 6)."""


@dataclass(frozen=True)
class Policy:
    """How `lower` and `backend` pick kernels (chapters 6, 7), as a value.

    `name` is "fixed" or "measured". The numbers are the fixed rules' thresholds;
    `choices` is a measured policy's record, sorted (key, answer) pairs. `recorder`
    is set only while `graphopt.tuning` measures: a question missing from the
    record is then timed and its answer written there.
    """

    name: str = "fixed"
    min_numel: int = MIN_NUMEL
    parallel_numel: int = PARALLEL_NUMEL
    row_parallel_numel: int = ROW_PARALLEL_NUMEL
    strided_kernels: bool = False  # kernels on transposed views (do not vectorise)
    scalar_math_numel: int = SCALAR_MATH_NUMEL
    small_gemm_flops: int = SMALL_GEMM_FLOPS
    onednn_gemm_flops: int = ONEDNN_GEMM_FLOPS
    gemm_library: str = "onednn"  # or "mkl": the earlier rule (see linear_kernel)
    pointwise_gemm: bool = False  # 1x1 convs as MKL GEMMs: opt-in (conv_as_gemm)
    short_group_ops: int = SHORT_GROUP_OPS
    short_group_numel: int = SHORT_GROUP_NUMEL
    operand_group_numel: int = OPERAND_GROUP_NUMEL
    choices: tuple = ()
    recorder: dict | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.gemm_library not in GEMM_LIBRARIES:
            raise PolicyError(_("gemm_library must be one of {libraries}, not {value}")
                              .format(libraries=GEMM_LIBRARIES,
                                      value=repr(self.gemm_library)))

    @classmethod
    def measured(cls, choices=None) -> "Policy":
        """A measured policy with the record `choices` (a dict or pairs) (ch. 6)."""
        return cls(name="measured", strided_kernels=True,
                   choices=tuple(sorted(dict(choices or {}).items())))

    is_measured = property(lambda self: self.name == "measured")

    @cached_property
    def record(self) -> dict:
        """The measured choices as a dict (empty for the fixed policy)."""
        return dict(self.choices)

    def recording(self, recorder: dict) -> "Policy":
        """This policy, timing what its record lacks into `recorder` (tuning only)."""
        return replace(self, recorder=recorder)

    def _answer(self, key: str, timed, fixed):
        """The record's answer to `key`; else, while tuning, `timed()`'s (written
        to the recorder); else the fixed rule's, `fixed`."""
        if key in self.record:
            return self.record[key]
        if self.recorder is not None and timed is not None:
            self.recorder[key] = answer = bool(timed())
            return answer
        return fixed

    # -- elementwise groups (codegen.lower, codegen.fused, codegen.kernel)
    def kernel_min_numel(self) -> int:
        """Below this many elements a fused group runs its eager ops (ch. 6)."""
        return self.record.get("min_numel", self.min_numel)

    def loop_parallel_numel(self) -> int:
        """From this many elements a numba elementwise loop runs in parallel."""
        return self.record.get("parallel_numel", self.parallel_numel)

    def scalar_math_eager(self, ops, numel: int, device: str) -> str:
        """Why a group runs its eager ops although it has a kernel, or "": on a CPU,
        from `scalar_math_numel` elements, a group that computes an op the kernel
        would call the C library for one element at a time (SCALAR_MATH_OPS)."""
        slow = ", ".join(sorted(SCALAR_MATH_OPS.intersection(ops)))
        if not slow or device != "cpu" or numel < self.scalar_math_numel:
            return ""
        return note("{ops} on {numel} elements: the kernel would call the C library's "
                    "scalar {ops} per element, torch's are vectorised (policy {name}: "
                    "from {scalar_math_numel})", **vars(self), ops=slow, numel=numel)

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
            return note("{n} ops on {numel} elements: a kernel's fixed cost per "
                        "call is more than the dispatch it saves (policy {name}: "
                        "groups of fewer than {short_group_ops} ops from "
                        "{short_group_numel})", **vars(self), n=len(ops), numel=numel)
        if operands >= len(ops) and not rows and numel < self.operand_group_numel:
            return note("{n} ops on {numel} elements reading {operands} tensors: a "
                        "kernel's call costs more with each tensor it reads than the "
                        "dispatches it saves (policy {name}: groups reading as many "
                        "tensors as they have ops from {operand_group_numel})",
                        **vars(self), n=len(ops), numel=numel, operands=operands)
        return ""

    def group_eager(self, ops, numel: int, device: str, operands: int = 1,
                    rows: bool = False) -> str:
        """Why a group of `ops` (with a row reduction: `rows`) reading `operands`
        tensors on `numel` elements runs its eager ops by the size rules (scalar
        maths, short groups), or "" (chapter 6). One place for both the per-call
        decision (`codegen.fused`) and `lower`'s note."""
        return self.scalar_math_eager(ops, numel, device) or \
            self.short_group_eager(ops, numel, operands, rows)

    def rows_parallel(self, numel: int, rows: int, threads: int, timed=None) -> bool:
        """Whether a row kernel splits its rows over threads (chapter 6). Fixed:
        from `row_parallel_numel`. Measured: the record's answer; while tuning,
        `timed()` -> bool is asked between numel `loop_parallel_numel() / 64` and
        `loop_parallel_numel()` (below: serial, above: parallel)."""
        fixed = threads >= 2 and rows >= 2 and numel >= self.row_parallel_numel
        if not self.is_measured or threads < 2 or rows < 2:
            return fixed
        pn = self.loop_parallel_numel()
        if numel * 64 < pn or numel >= pn:
            return numel >= pn
        return self._answer(f"rows_parallel {numel} {rows} {threads}", timed, fixed)

    # -- pattern modules (backend.prepack)
    def too_small_for_onednn(self, flops: int, grouped: bool = False) -> str:
        """Why a conv or linear pattern of `flops` runs unfused library ops, or "":
        below `small_gemm_flops` oneDNN's fixed cost per call outweighs the fusion
        (chapter 7). A `grouped` (depthwise) conv is exempt: its output, the pass
        fusion saves, is full size while its FLOPs are few."""
        if grouped or flops >= self.small_gemm_flops:
            return ""
        return note("{flops} FLOPs: oneDNN's fixed cost per call (some 25 us) "
                    "outweighs the fusion below {small_gemm_flops} (policy {name})",
                    **vars(self), flops=flops)

    def conv_on_tiny_map(self, has_act: bool, timed=None, key: str = "") -> str:
        """Why a conv on a 1x1 map runs eager conv2d (+ its activation), or ""
        (chapter 7). Fixed: always eager. Measured: without an activation eager;
        with one, where the record (for the conv's `key`) says eager won."""
        if not self.is_measured:
            return TINY_MAP
        if has_act and not self._answer(f"tiny_map_eager {key}", timed, True):
            return ""
        return TINY_MAP_MEASURED

    def mkl_call_shorter(self, flops: int | None) -> bool:
        """Below `onednn_gemm_flops` MKL's shorter call beats torch's op (ch. 7)."""
        return flops is not None and flops < self.onednn_gemm_flops

    def conv_as_gemm(self, flops: int | None, act_name: str, mkl: bool) -> str:
        """Why a pointwise conv (1x1 kernel, stride 1, no padding, one group) runs
        MKL's packed GEMM over its channels, then `act_name` in place, or "" (ch. 7):
        where MKL runs (`mkl`), below `onednn_gemm_flops`, as a linear does, and
        only with `pointwise_gemm`: not faster end to end (policy.md)."""
        if not (self.pointwise_gemm and mkl and self.mkl_call_shorter(flops)):
            return ""
        then = "" if act_name == "none" else note(", then {act} in place",
                                                 act=act_name)
        return note("a 1x1 conv is a GEMM: MKL's packed GEMM over the channels with "
                    "the bias{then} ({flops} FLOPs, below {onednn_gemm_flops}: "
                    "MKL's shorter call beats oneDNN's fused conv; policy {name})",
                    **vars(self), then=then, flops=flops)

    def linear_kernel(self, flops: int | None, act_name: str, mkl: bool,
                      timed=None, key: str = "",
                      made_once: bool = False) -> tuple[str, str]:
        """(kernel, rule) for a float32 linear of `flops` then `act_name`; `mkl`:
        whether MKL's packed GEMM can run here, `made_once`: whether oneDNN's
        primitives are (ch. 7). kernel: "onednn" (bias and activation as post-ops:
        one kernel), "mkl" (the GEMM with the bias, then torch's activation) or
        "eager"; rule: "small" (below `small_gemm_flops`: MKL, else eager), "mid"
        (below `onednn_gemm_flops`: MKL's shorter call), "made once" (there: the
        primitive's call is shorter still), "fixed" (by `gemm_library`; policy.md)
        or "measured" (the record's answer for `key`)."""
        small = self.too_small_for_onednn(flops) if flops is not None else ""
        if small:
            return ("mkl" if mkl else "eager"), "small"
        if not mkl or act_name not in MKL_ACTS:
            return "onednn", "fixed"
        mid = self.mkl_call_shorter(flops)  # ...than torch's op: not a primitive's
        on_mkl = self.gemm_library == "mkl" or (mid and not made_once)
        if self.is_measured:
            on_mkl = self._answer(f"mkl_faster {key}", timed, on_mkl)
            return ("mkl" if on_mkl else "onednn"), "measured"
        if mid and self.gemm_library != "mkl":
            return ("onednn", "made once") if made_once else ("mkl", "mid")
        return ("mkl" if on_mkl else "onednn"), "fixed"

    def describe(self) -> str:
        """One line for `PassResult.notes`: the rules in force (chapter 6)."""
        if self.is_measured:
            return note("policy measured: {n} kernel choices timed on this machine "
                        "before the stages (they follow its load)", n=len(self.choices))
        return note("policy fixed: generated kernel from {min_numel} elements on "
                    "contiguous rows ({short_group_numel} for groups of fewer than "
                    "{short_group_ops} ops), eager ops on transposed views; parallel "
                    "loops from {parallel_numel} elements ({row_parallel_numel} for "
                    "row kernels)", **vars(self))

    # -- the record on disk
    def to_json(self) -> str:
        """The policy, its record included, as JSON (chapter 6)."""
        data = asdict(self)
        data.pop("recorder")
        data["choices"] = dict(self.choices)
        return json.dumps(data, indent=1, sort_keys=True)

    def save(self, path) -> Path:
        """Write `to_json()` to `path`; `Policy.load(path)` reads it back (ch. 6)."""
        (path := Path(path)).write_text(self.to_json())
        return path

    @classmethod
    def from_json(cls, text: str) -> "Policy":
        """The policy `to_json` wrote (chapter 6)."""
        try:
            data = json.loads(text)
        except ValueError as e:
            raise PolicyError(_("not a saved policy ({error}); write one with "
                                "Policy.save(path)").format(error=e)) from e
        known = {f.name for f in fields(cls)} - {"recorder"}
        if not isinstance(data, dict) or set(data) - known:
            raise PolicyError(_("a saved policy holds the fields {fields}; write one "
                                "with Policy.save(path)").format(fields=sorted(known)))
        data["choices"] = tuple(sorted(dict(data.get("choices", {})).items()))
        return cls(**data)

    @classmethod
    def load(cls, path) -> "Policy":
        """The policy saved at `path` (`Policy.save`), applied as recorded (ch. 6)."""
        return cls.from_json(Path(path).read_text())


DEFAULT = Policy()


def resolve(policy) -> Policy:
    """A Policy from a Policy, "fixed" or None (the default) (chapter 6).

    "measured" needs its record first: `graphopt.optimize(..., policy="measured")`
    measures it before the stages, `graphopt.tuning.tune(model, *x)` returns it.
    """
    if policy is None or policy == "fixed":
        return DEFAULT
    if isinstance(policy, Policy):
        return policy
    if policy == "measured":
        raise PolicyError(_(
            "a measured policy is made by measuring first: pass "
            "policy='measured' to graphopt.optimize (it times before its stages), "
            "or policy=graphopt.tuning.tune(model, *x) here"))
    raise PolicyError(_("policy must be a Policy, 'fixed' or 'measured', not {value}")
                      .format(value=repr(policy)))
