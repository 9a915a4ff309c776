"""The explorer's engine: every combination of passes, computed once and cached.

Chapter 3 introduces the explorer (`graphopt.explore`, in `widget.py`); this is the
part that makes it quick. Every combination of passes is a node of a prefix tree. The
ticked passes run in the order the explorer lists them (the order of `passes=`, else
`graphopt.PIPELINE`), so the graph for {fold_conv_bn, fuse_elementwise} is
fuse_elementwise applied to the graph for {fold_conv_bn}: each combination costs one
pass application, cached under `frozenset(passes)`. Many combinations end in the same
graph (DCE on a graph with nothing dead): equal graphs share one drawing, one count
and one timing per device. Bytes, kernels and peak memory come from the pipeline's own
`graphopt.run` statistics (deterministic); only `Engine.measure` times real runs, with
the book's one timing method (`graphopt.measure.compare`): every graph warmed up, then
timed in interleaved rounds together with the baseline, which is timed twice so the
run measures its own noise.
"""

from __future__ import annotations

import copy
import itertools
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from ..errors import InputError


def _pipeline():
    """The real pipeline, imported late: the passes load when an explorer is made."""
    from .. import optimizer
    return optimizer.optimize, tuple(optimizer.PIPELINE)


# How many optimised modules the live engine keeps (besides the capture). Each holds
# a copy of the weights: keeping all 2^passes of them ran ResNet-18 out of memory.
# The rest keep their numbers and drawing and are rebuilt from a parent on demand.
MAX_MODULES = 4
# The GPU whose time the explorer predicts with the book's performance model
# (`measure.perf_model`, published figures): shown on every machine, labelled
# "predicted, not measured", next to the time measured on the chosen device.
PREDICTED_GPU = "H100"


@dataclass
class Result:
    """One combination of passes: its deterministic costs; its graph on demand."""

    passes: tuple[str, ...]  # in the order they ran
    nodes: int  # operator nodes the interpreter ran (the boxes of the drawing)
    kernels: int
    bytes_moved: int
    peak_bytes: int
    signature: str = ""  # equal for equal graphs, whatever path produced them
    step: object = None  # the last pass's notes, as `.notes` (None for the capture)
    io_nodes: int = 0  # placeholders, weights and the output: drawn, not run
    engine: Engine | None = field(default=None, repr=False, compare=False)
    predicted: float | None = None  # seconds on PREDICTED_GPU, by the perf model

    @property
    def module(self) -> torch.fx.GraphModule:
        """The graph, kept in the engine's small cache or rebuilt from its parent."""
        return self.engine.module(self.passes)


@dataclass
class Measured:
    """One timing run of the explorer: graphs timed together in interleaved rounds."""

    device: str
    timings: dict = field(default_factory=dict)  # signature -> measure.Timing
    threads: int = 1
    rounds: int = 0
    noise: float = 0.0  # relative: how far two timings of the SAME graph differ
    within_noise: dict = field(default_factory=dict)  # signature -> bool vs baseline
    peaks: dict = field(default_factory=dict)  # signature -> CUDA allocator peak (B)


_PLAIN = (int, float, str, bool, tuple, type(None))

# The explorer compares graphs, not machines: one thread. On a machine whose cores
# are shared (a site build, a class server), a tiny graph on two OpenMP threads
# measures the barrier waiting for a descheduled thread: 48 ms instead of 0.2 ms here.
THREADS = 1


def signature(gm: torch.fx.GraphModule) -> str:
    """What makes two graphs cost the same: code, submodule settings, weight shapes.

    Many combinations of passes end in the same graph (DCE on a graph with nothing
    dead, CSE with no duplicates): they share one drawing, one cost and one timing.
    A GraphModule is its code; bookkeeping attributes that torch sets on some and not
    others (`validate_inputs` on a fresh capture) must not make equal graphs differ.
    """
    gm = getattr(gm, "graph_module", gm)  # the backend's wrapper: its graph module
    parts = []
    for name, m in gm.named_modules():
        inner = getattr(m, "gm", m)
        code = inner.code if isinstance(inner, torch.fx.GraphModule) else ""
        attrs = [] if isinstance(m, torch.fx.GraphModule) else sorted(
            (k, v) for k, v in vars(m).items()
            if not k.startswith("_") and isinstance(v, _PLAIN))
        parts.append(f"{name}:{type(m).__name__}:{attrs}\n{code}")
    tensors = itertools.chain(gm.named_parameters(), gm.named_buffers())
    parts += [f"{n}:{tuple(t.shape)}:{t.dtype}" for n, t in tensors]
    return "\n".join(parts)


def _frozen_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of `gm` that owns its weights, none of them needing a gradient."""
    from ..passes.result import working_copy
    frozen = working_copy(gm, inplace=False, share_weights=False)
    frozen.requires_grad_(False)
    return frozen


class Engine:
    """Computes and caches every combination of passes for one model and its inputs."""

    def __init__(self, model, inputs, passes=None, kwargs=None, policy="fixed"):
        self.optimize, pipeline = _pipeline()
        # the kernel policy of `lower` and `backend`, handed to every optimize call
        # (the prefetching thread's included): a value, not a global
        self.policy = policy
        passes = pipeline if passes is None else tuple(dict.fromkeys(passes))
        unknown = [p for p in passes if p not in pipeline]
        if unknown:
            raise InputError(f"unknown pass name(s) {', '.join(map(repr, unknown))}; "
                             f"choose among graphopt.PIPELINE: {', '.join(pipeline)}.")
        self.passes = tuple(passes)  # the order they are listed and run in
        kwargs = dict(kwargs or {})
        self.model_name = type(model).__name__
        self.hits = self.misses = 0
        self._results: dict[frozenset, Result] = {}
        self._by_signature: dict[str, Result] = {}
        self._svgs: dict[str, str] = {}
        self.shown: dict = {}  # drawings with titles and outlines (changes.drawings)
        self.measured: dict[str, Measured] = {}  # device -> the latest timing run
        self._on_device: OrderedDict[tuple[str, str], torch.nn.Module] = OrderedDict()
        self._modules: OrderedDict[str, torch.fx.GraphModule] = OrderedDict()
        self.max_modules = MAX_MODULES
        self._lock = threading.RLock()
        res = self.optimize(model, *inputs, passes=[], **kwargs)
        # always kept: every graph starts here. The explorer's own frozen copy of the
        # weights (capture shares the caller's, which must keep their gradients):
        # passes share frozen weights, so every stage stores only what it changed
        self.captured = _frozen_copy(res.stages[0].module)
        # the captured graph takes every input positionally, keywords included, so
        # each later pass and timing call passes one flat tuple
        self.inputs = _flat(self.captured, tuple(inputs), kwargs)
        self._store((), self.captured, res.stages[0].stats)

    def key(self, passes) -> frozenset:
        passes = frozenset(passes)
        unknown = passes - set(self.passes)
        if unknown:
            raise InputError(f"pass(es) {sorted(unknown)} are not toggleable here; "
                             f"this explorer has {', '.join(self.passes)}.")
        return passes

    def ordered(self, passes) -> tuple[str, ...]:
        return tuple(p for p in self.passes if p in passes)

    def combinations(self) -> list[frozenset]:
        """Every subset of the passes, smallest first (parents before children)."""
        return [frozenset(c) for r in range(len(self.passes) + 1)
                for c in itertools.combinations(self.passes, r)]

    def cached(self, passes) -> bool:
        return self.key(passes) in self._results

    def result(self, passes) -> Result:
        """The graph and costs after `passes`, run in listed order on the capture."""
        k = self.key(passes)
        hit = self._results.get(k)
        if hit is not None:
            self.hits += 1
            return hit
        with self._lock:
            if k in self._results:
                self.hits += 1
                return self._results[k]
            self.misses += 1
            order = self.ordered(k)
            module, step = self._apply(order)
            return self._store(order, module, None, step)

    def _apply(self, order):
        """One pass on the parent's graph: the same stage optimize() builds in order."""
        parent = self.result(order[:-1]).module
        res = self.optimize(parent, *self.inputs, passes=[order[-1]], stats=False,
                            policy=self.policy)
        last = res.stages[-1]
        notes = tuple(getattr(last.result, "notes", None) or ())
        return last.module, SimpleNamespace(notes=notes)  # not the PassResult: its
        # module would stay alive with it

    def module(self, passes) -> torch.fx.GraphModule:
        """The graph for `passes`: from the cache of the last few used, else rebuilt
        from its parent (one pass). Equal graphs share one entry."""
        r = self.result(passes)
        if not r.passes:
            return self.captured
        with self._lock:
            gm = self._modules.get(r.signature)
            if gm is None:
                gm, _ = self._apply(r.passes)
                self._keep(r.signature, gm)
            self._modules.move_to_end(r.signature)
            return gm

    def _keep(self, sig, gm) -> None:
        self._modules[sig] = gm
        while len(self._modules) > self.max_modules:
            self._modules.popitem(last=False)  # the least recently used

    def _store(self, order, module, stats, step=None) -> Result:
        sig = signature(module)
        same = self._by_signature.get(sig)
        if same is not None:
            r = Result(tuple(order), same.nodes, same.kernels, same.bytes_moved,
                       same.peak_bytes, sig, step, same.io_nodes, self,
                       same.predicted)
        else:
            counted, predicted = _run_stats(module, self.inputs)
            stats = stats or counted
            r = Result(tuple(order), int(stats.nodes), int(stats.kernels),
                       int(stats.bytes_moved), int(stats.peak_bytes), sig, step,
                       _io_nodes(module), self, predicted)
            self._by_signature[sig] = r
        self._results[frozenset(order)] = r
        if order:
            self._keep(sig, module)
        return r

    def svg(self, passes) -> str:
        """The drawing of the graph for `passes`, as SVG text (cached per graph)."""
        r = self.result(passes)
        if r.signature not in self._svgs:
            from ..viz import draw
            # No title: equal graphs then draw equally, and the static fragment
            # stores each distinct drawing once.
            self._svgs[r.signature] = draw(r.module).svg()
        return self._svgs[r.signature]

    # ---- timing
    def time(self, passes, device="cpu") -> float | None:
        """The measured median time in seconds, or None when not measured yet."""
        t = self.timing(passes, device)
        return None if t is None else t.median

    def timing(self, passes, device="cpu"):
        """The `measure.Timing` of the graph for `passes`, or None when not measured."""
        run = self.measured.get(device)
        return None if run is None else run.timings.get(self.result(passes).signature)

    def within_noise(self, passes, device="cpu") -> bool | None:
        """True when this graph's time cannot be told apart from the baseline's."""
        run = self.measured.get(device)
        sig = self.result(passes).signature
        return None if run is None or sig not in run.timings else run.within_noise[sig]

    def measure(self, passes, device="cpu", budget_s=0.5, progress=None) -> float:
        """Time the graph for `passes` and the baseline together; its median (s)."""
        self.measure_all([(), passes], device, budget_s, progress=progress)
        return self.time(passes, device)

    def measure_all(self, combos, device="cpu", budget_s=0.5, rounds=9,
                    threads=THREADS, progress=None) -> Measured:
        """Time the distinct graphs of `combos` and the baseline in the same rounds.

        `graphopt.measure.compare` warms every graph up first (no cold first
        combination), then interleaves the rounds, so a burst of load hits all graphs
        alike. The baseline is timed twice, under two labels: this run's noise is
        the larger of how far those two medians differ and the baseline's relative
        interquartile range, and a graph whose median differs from the baseline's by
        no more than that has "no measurable change". Equal graphs are timed once
        and share the time.
        Every graph runs on `threads` torch (and numba) threads, stated with the time.
        """
        from .. import measure
        sigs = list(dict.fromkeys([self.result(()).signature] +
                                  [self.result(k).signature for k in combos]))
        base = sigs[0]
        fns = {f"g{i}": self._runner(s, device) for i, s in enumerate(sigs)}
        fns["again"] = fns["g0"]  # the baseline a second time: the run's own noise
        if progress is not None:
            progress(0, len(fns))
        with self._lock, torch.no_grad():
            cmp = measure.compare(fns, rounds=rounds, warmup=3, threads=threads,
                                  min_run_time=budget_s, device=device)
        a, b = cmp["g0"].median, cmp["again"].median
        # one number a reader can check: the larger of the baseline's own spread
        # (interquartile range / median) and how far its two timings differ
        noise = max(abs(a - b) / min(a, b), cmp["g0"].spread) if min(a, b) else 0.0
        run = Measured(device, threads=cmp.threads, rounds=rounds, noise=noise)
        for i, s in enumerate(sigs):
            t = cmp[f"g{i}"]
            close = abs(t.median - a) <= noise * a
            run.timings[s], run.within_noise[s] = t, (s == base or close)
            if device.startswith("cuda"):  # the caching allocator's peak, one call
                run.peaks[s] = self.cuda_peak(s, device)
        self.measured[device] = run
        if progress is not None:
            progress(len(fns), len(fns))
        return run

    def cuda_peak(self, sig, device="cuda") -> int:
        """Peak bytes the CUDA caching allocator held during one call of the graph
        (`max_memory_allocated` after `reset_peak_memory_stats`), inputs included."""
        from ..measure import peak_memory
        module, args = self._placed(self._by_signature[sig], device)
        with self._lock, torch.no_grad():
            return peak_memory(getattr(module, "forward", module), *args)

    def _runner(self, sig, device):
        module, args = self._placed(self._by_signature[sig], device)
        # forward, not __call__: a fresh capture carries torch.export's input-checking
        # hook (which also rejects flattened keyword inputs) and later stages do not;
        # timing the hook would charge the baseline for Python the passes never touch
        forward = getattr(module, "forward", module)
        return lambda: forward(*args)

    def _placed(self, r: Result, device):
        if device == "cpu":
            return r.module, self.inputs
        if device.startswith("cuda") and not torch.cuda.is_available():
            from ..errors import NoGPUError
            raise NoGPUError("CUDA was asked for but torch sees no GPU; time on 'cpu'.")
        if (r.signature, device) not in self._on_device:
            with warnings.catch_warnings():  # deepcopy of an exported graph warns
                warnings.simplefilter("ignore", FutureWarning)
                moved = copy.deepcopy(r.module).to(device)
            self._on_device[(r.signature, device)] = moved
            while len(self._on_device) > self.max_modules:  # bounded as `_modules`
                self._on_device.popitem(last=False)
        args = tuple(x.to(device) if isinstance(x, torch.Tensor) else x
                     for x in self.inputs)
        return self._on_device[(r.signature, device)], args


def _flat(gm, args: tuple, kwargs: dict) -> tuple:
    """Positional and keyword inputs as the flat tuple the graph's placeholders take."""
    if not kwargs:
        return args
    from ..state import flat_inputs
    return tuple(flat_inputs(gm, args, kwargs))


def _io_nodes(gm) -> int:
    """Placeholders, weights and the output: drawn as boxes, never run."""
    return sum(n.op in ("placeholder", "get_attr", "output") for n in gm.graph.nodes)


def _run_stats(module, inputs):
    """Nodes, kernels, bytes moved and peak memory, counted as the pipeline does,
    and the time the performance model predicts from the same run for PREDICTED_GPU.
    """
    from ..interpret import run
    from ..measure.perf_model import GPUS, predict_run
    from ..stages import Stats
    from ..state import copies, preserved
    with preserved(module):  # what the pipeline's stage_stats does, keeping the report
        report = run(module, *copies(tuple(inputs)))
    stats = Stats(nodes=len(report.nodes), kernels=report.kernels,
                  bytes_moved=report.bytes_moved, peak_bytes=report.peak_bytes)
    return stats, predict_run(GPUS[PREDICTED_GPU], module, report).seconds
