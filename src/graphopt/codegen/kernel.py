"""The `Kernel` of one fused group: choose a backend, generate, plan, launch (ch. 6).

    kernel = graphopt.codegen.compile_group(gm, example_inputs, backend="auto")
    print(kernel.source)        # the generated numba or Triton text
    y = kernel(x, w)            # a fresh (or safely reused) output, or out=y

`backend="auto"` picks Triton for CUDA tensors and numba for CPU tensors; when neither
can run (numba or Triton missing, a dtype the generators do not cover, inputs that need
autograd) it runs the group's own GraphModule, the *reference executor*, and says why
with a KernelFallbackWarning (the reasons: `fallback`). Generated kernels are shared
through the kernel cache (`cache`); the program and layout a kernel is generated
from come from `lowering` and `layout` (row reductions: `reduce_rows`).
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule

from ..errors import GraphoptError, InputError, NoGPUError
from ..i18n import N_, _
from ..policy import resolve
from . import cpu, reduce_cpu, reduce_triton
from . import triton as triton_gen

# re-exported: codegen/__init__ imports the cache's public names from here
from .cache import (  # noqa: F401
    _CACHE,
    _GENERATION,
    _STATS,
    CacheInfo,
    Compiled,
    cache_info,
    clear_cache,
    compiled,
)
from .fallback import KernelFallbackWarning, input_problem, triton_for
from .launch import LaunchPlan, OutputPool, Plans, check_out, signature
from .layout import Layout, plan_layout
from .lowering import build_program
from .program import Program
from .reduce_program import is_row_program
from .reduce_rows import plan_rows

BACKENDS = ("auto", "numba", "triton", "reference")
# (backend, has row reductions) -> source generator
_GENERATORS = {("numba", False): cpu.generate, ("numba", True): reduce_cpu.generate,
               ("triton", False): triton_gen.generate,
               ("triton", True): reduce_triton.generate}


@functools.cache
def numba_available() -> tuple[bool, str]:
    """Whether numba can be imported here, and if not, why (chapter 6); asked once,
    since `find_spec` searches sys.path on every call until numba is imported."""
    if importlib.util.find_spec("numba") is None:
        return False, N_("numba is not installed (pip install numba)")
    return True, ""


@dataclass
class Kernel:
    """A fused group's generated kernel; call it like the group's GraphModule
    (chapter 6)."""

    gm: GraphModule
    requested: str = "auto"
    block: int | None = None           # Triton BLOCK; None picks one per launch
    policy: object = None              # graphopt.policy.Policy; None: the default
    program: Program = field(init=False)
    fallbacks: int = 0                 # calls that ran the reference executor
    _spec: Compiled | None = field(default=None, init=False, repr=False)
    _layout: Layout | None = field(default=None, init=False, repr=False)
    _seen: dict = field(default_factory=dict, init=False, repr=False)
    # how the kernel runs each input signature (`Plans`; a fused node keeps its own,
    # whether to run the kernel at all: fused.py's `plan_of`)
    _plans: Plans = field(default_factory=Plans, init=False, repr=False)

    def __post_init__(self):
        if self.requested not in BACKENDS:
            raise ValueError(_("backend must be one of {backends}, not {value}").format(
                backends=BACKENDS, value=repr(self.requested)))
        self.program = build_program(self.gm)

    # -- what the reader looks at
    @property
    def source(self) -> str:
        """The generated source of the most recent specialisation."""
        if self._spec is None:
            example = _examples_from_meta(self.gm)
            if example is None:
                raise GraphoptError(_(
                    "no kernel generated yet: pass example_inputs to compile_group or "
                    "call the kernel once, then read .source."))
            self.specialize(example)
        return self._spec.source

    @property
    def backend(self) -> str:
        """'numba', 'triton' or 'reference' for the most recent specialisation."""
        return self._spec.backend if self._spec is not None else self.requested

    @property
    def layout(self) -> Layout | None:
        """How the last inputs were indexed (flat / scalar / strided per operand)."""
        return self._layout

    def __repr__(self) -> str:
        ops = ", ".join(s.op for s in self.program.stmts)
        return f"Kernel(backend={self.backend!r}, ops=[{ops}])"

    # -- generating and running
    def specialize(self, inputs, backend: str | None = None) -> Compiled:
        """Generate (or fetch from the cache) the kernel for these inputs' layout."""
        wanted = len(self.program.inputs) - len(self.program.constants)
        if len(inputs) != wanted:
            raise InputError(_("this group takes {wanted} tensor input(s) (its "
                               "placeholders), got {got}.").format(
                wanted=wanted, got=len(inputs)))
        inputs = list(inputs) + self.program.constants
        backend = backend or _resolve(self.requested, inputs)[0]
        if backend is None or backend == "reference":
            raise GraphoptError(_("no generated kernel for the reference executor."))
        # same shapes and strides as a previous call: skip planning (a dict lookup)
        seen = (_GENERATION[0], backend, triton_gen.interpreting(),
                tuple((t.shape, t.stride(), t.dtype) for t in inputs))
        if seen in self._seen:
            self._spec, self._layout = self._seen[seen]
            _STATS["hits"] += 1
            return self._spec
        rows = is_row_program(self.program)
        layout = (plan_rows if rows else plan_layout)(self.program, inputs)
        dtype = inputs[0].dtype
        dims = len(layout.lead) if rows else len(layout.shape)
        key = (backend, self.program.text(), str(dtype), layout.patterns,
               dims if backend == "triton" else layout.inner_steps if not rows
               else None,
               triton_gen.interpreting() if backend == "triton" else None)
        spec = _CACHE.get(key)
        if spec is None:
            _STATS["misses"] += 1
            gen = _GENERATORS[(backend, rows)]
            source = gen(self.program, layout, dtype)
            spec = _CACHE[key] = Compiled(backend, source, key)
        else:
            _STATS["hits"] += 1
        self._spec, self._layout = spec, layout
        self._seen[seen] = (spec, layout)
        return spec

    def __call__(self, *inputs, out=None):
        sig = signature(inputs)
        plan = self._plans.fresh().get(sig)
        if plan is None:
            plan = self.plan(inputs, sig)
        return plan.run(inputs, out)

    def plan(self, inputs, sig=None) -> LaunchPlan:
        """Decide once, for this input signature, how every later call runs."""
        sig = signature(inputs) if sig is None else sig
        everything = list(inputs) + self.program.constants
        backend, reason = _resolve(self.requested, everything)
        if backend == "reference" or backend is None:
            plan = self._reference_plan(reason if backend is None else "")
        else:
            plan = self._kernel_plan(list(inputs), backend)
        if self.requested != "triton" or not triton_gen.interpreting():
            self._plans.fresh()[sig] = plan  # TRITON_INTERPRET may change
        return plan

    def _reference_plan(self, reason: str) -> LaunchPlan:
        def run(inputs, out):
            if reason:
                self.fallbacks += 1
                warnings.warn(_("graphopt.codegen: running the group's reference "
                                "executor instead of a generated kernel because "
                                "{reason}.").format(reason=reason),
                              KernelFallbackWarning, stacklevel=3)
            return self.gm(*inputs)
        return LaunchPlan("reference", run)

    def _kernel_plan(self, inputs, backend: str) -> LaunchPlan:
        spec = self.specialize(inputs, backend)
        layout, prog = self._layout, self.program
        like = inputs[0] if inputs else prog.constants[0]
        pool = OutputPool(layout.out_shapes, like.dtype, like.device)
        consts = prog.constants
        if layout.numel == 0:
            launch = None
        elif backend == "numba":
            planner = reduce_cpu.plan if is_row_program(prog) else cpu.plan
            launch = planner(compiled(spec, prog), prog, layout,
                             inputs + consts, pool.take()[0],
                             self._parallel_rule(planner))
        else:
            block, fn = self.block, compiled(spec, prog)
            launcher = reduce_triton.launch if is_row_program(prog) \
                else triton_gen.launch
            launch = lambda ins, outs, arrays: launcher(  # noqa: E731
                fn, prog, layout, ins, outs, block)

        def run(inputs, out):
            if out is None:
                outputs, arrays = pool.take()
            else:
                outputs, arrays = check_out(out, layout.out_shapes, like), None
            if launch is not None:
                spec.calls += 1
                launch(list(inputs) + consts if consts else inputs, outputs, arrays)
            return prog.pack(outputs)
        return LaunchPlan(backend, run, pool, getattr(launch, "parallel", None))

    def _parallel_rule(self, planner):
        """What the numba planner gets: the policy for row kernels (which decide per
        row count), the elementwise loop's parallel threshold otherwise."""
        policy = resolve(self.policy)
        return policy if planner is reduce_cpu.plan else policy.loop_parallel_numel()


def _resolve(requested: str, inputs) -> tuple[str | None, str]:
    """The backend that can run these inputs, or (None, why not) for a fallback."""
    if requested == "reference":
        return "reference", ""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    problem = input_problem(tensors)
    if problem:
        if requested != "auto":
            raise InputError(_("backend={backend} cannot run these inputs: "
                               "{reason}.").format(backend=repr(requested),
                                                   reason=problem))
        return None, problem
    device = tensors[0].device.type
    if device == "cuda" or requested == "triton":
        return triton_for(device, requested)
    if requested == "auto" or requested == "numba":
        ok, why = numba_available()
        if ok:
            return "numba", ""
        if requested == "numba":
            raise GraphoptError(_(why))
        return None, _(why)
    return None, _("no backend runs {device} tensors").format(device=device)


def _examples_from_meta(gm: GraphModule):
    """Meta tensors shaped like the placeholders, when capture recorded their shapes."""
    examples = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val", node.meta.get("tensor_meta"))
        if val is None or not hasattr(val, "shape"):
            return None
        stride = val.stride() if callable(getattr(val, "stride", None)) else val.stride
        examples.append(torch.empty_strided(tuple(val.shape), tuple(stride),
                                            dtype=val.dtype, device="meta"))
    return examples


def compile_group(gm: GraphModule, example_inputs=None, backend: str = "auto",
                  block: int | None = None, policy=None) -> Kernel:
    """Generate the kernel of one fused elementwise group (chapter 6).

    `gm` is any small GraphModule of elementwise ops (a FusedElementwise's `.gm`, a
    traced function, an aten-level capture). With `example_inputs` the source is
    generated right away; otherwise on first call. Unsupported ops raise
    UnsupportedOpError naming the op. `policy` (a `graphopt.policy.Policy`; None: the
    default, fixed one) picks serial or parallel loops.
    """
    kernel = Kernel(gm, backend, block, policy)
    if example_inputs is not None:
        inputs = list(example_inputs)
        try:
            chosen, _why = _resolve(backend, inputs + kernel.program.constants)
        except NoGPUError:
            chosen = "triton"  # the source can be generated and read without a GPU
        if chosen not in (None, "reference"):
            kernel.specialize(inputs, chosen)
    return kernel
