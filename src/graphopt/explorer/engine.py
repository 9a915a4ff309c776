"""The explorer's engine: every combination of passes, computed once and cached.

Chapter 3 introduces the explorer (`graphopt.explore`, in `widget.py`); this is the
part that makes it quick. Every combination of passes is a node of a prefix tree. The
passes always run in pipeline order, so the graph for {fold_conv_bn, fuse_elementwise}
is fuse_elementwise applied to the graph for {fold_conv_bn}: each combination costs one
pass application, cached under `frozenset(passes)`. Many combinations end in the same
graph (DCE on a graph with nothing dead): equal graphs share one drawing, one count
and one timing per device. Bytes, kernels and peak memory come from the pipeline's own
`graphopt.run` statistics (deterministic); only `Engine.measure` times real runs.
"""

from __future__ import annotations

import copy
import itertools
import statistics
import threading
import time
import warnings
from dataclasses import dataclass

import torch

from ..errors import InputError


def _pipeline():
    """The real pipeline, imported late: the passes load when an explorer is made."""
    from ..passes import pipeline
    return pipeline.optimize, tuple(pipeline.PIPELINE)


@dataclass
class Result:
    """One combination of passes: its graph and its deterministic costs."""

    passes: tuple[str, ...]  # in pipeline order
    module: torch.fx.GraphModule
    nodes: int
    kernels: int
    bytes_moved: int
    peak_bytes: int
    signature: str = ""  # equal for equal graphs, whatever path produced them


_PLAIN = (int, float, str, bool, tuple, type(None))


def signature(gm: torch.fx.GraphModule) -> str:
    """What makes two graphs cost the same: code, submodule settings, weight shapes.

    Many combinations of passes end in the same graph (DCE on a graph with nothing
    dead, CSE with no duplicates): they share one drawing, one cost and one timing.
    """
    parts = []
    for name, m in gm.named_modules():
        inner = getattr(m, "gm", m)
        code = inner.code if isinstance(inner, torch.fx.GraphModule) else ""
        attrs = sorted((k, v) for k, v in vars(m).items()
                       if not k.startswith("_") and isinstance(v, _PLAIN))
        parts.append(f"{name}:{type(m).__name__}:{attrs}\n{code}")
    tensors = itertools.chain(gm.named_parameters(), gm.named_buffers())
    parts += [f"{n}:{tuple(t.shape)}:{t.dtype}" for n, t in tensors]
    return "\n".join(parts)


class Engine:
    """Computes and caches every combination of passes for one model and its inputs."""

    def __init__(self, model, inputs, passes=None):
        self.optimize, pipeline = _pipeline()
        passes = pipeline if passes is None else tuple(passes)
        unknown = [p for p in passes if p not in pipeline]
        if unknown:
            raise InputError(f"unknown pass name(s) {', '.join(map(repr, unknown))}; "
                             f"choose among graphopt.PIPELINE: {', '.join(pipeline)}.")
        self.passes = tuple(p for p in pipeline if p in passes)  # pipeline order
        self.inputs = tuple(inputs)
        self.model_name = type(model).__name__
        self.hits = self.misses = 0
        self._results: dict[frozenset, Result] = {}
        self._by_signature: dict[str, Result] = {}
        self._svgs: dict[str, str] = {}
        self._times: dict[tuple[str, str], float] = {}
        self._on_device: dict[tuple[str, str], torch.nn.Module] = {}
        self._lock = threading.RLock()
        res = self.optimize(model, *self.inputs, passes=[])
        self._store((), res.stages[0].module, res.stages[0].stats)

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
        """The graph and costs after `passes` (in pipeline order) ran on the capture."""
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
            parent = self.result(order[:-1])
            # One pass on the parent's graph: the same stage optimize() builds in order.
            # Costs are counted below, once per distinct graph.
            res = self.optimize(parent.module, *self.inputs, passes=[order[-1]],
                                stats=False)
            return self._store(order, res.stages[-1].module, None)

    def _store(self, order, module, stats) -> Result:
        sig = signature(module)
        same = self._by_signature.get(sig)
        if same is not None:
            r = Result(tuple(order), module, same.nodes, same.kernels, same.bytes_moved,
                       same.peak_bytes, sig)
        else:
            if stats is None:
                stats = _run_stats(module, self.inputs)
            r = Result(tuple(order), module, int(stats.nodes), int(stats.kernels),
                       int(stats.bytes_moved), int(stats.peak_bytes), sig)
            self._by_signature[sig] = r
        self._results[frozenset(order)] = r
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

    def time(self, passes, device="cpu") -> float | None:
        """The measured median time in seconds, or None when not measured yet."""
        return self._times.get((self.result(passes).signature, device))

    def measure(self, passes, device="cpu", budget_s=0.5, progress=None) -> float:
        """Time the graph for `passes` on `device`: warm-up, then the median of runs.

        Stops after `budget_s` seconds of timed runs (at least 3 runs), so a busy
        machine makes a measurement noisier, not longer.
        """
        sig = self.result(passes).signature
        module, args = self._placed(passes, device)
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

        def call() -> float:
            start = time.perf_counter()
            module(*args)
            sync()
            return time.perf_counter() - start

        with self._lock, torch.no_grad():
            # Warm up: the first calls pay for lazy initialisation (allocator, oneDNN
            # primitives, CUDA context) that later calls do not.
            first = min(call() for _ in range(3))
            repeats = max(3, min(200, int(budget_s / max(first, 1e-6))))
            times, start = [], time.perf_counter()
            while len(times) < repeats:
                times.append(call())
                if progress is not None:
                    progress(len(times), repeats)
                if len(times) >= 3 and time.perf_counter() - start > budget_s:
                    break
            if progress is not None:
                progress(repeats, repeats)
        self._times[(sig, device)] = statistics.median(times)
        return self._times[(sig, device)]

    def _placed(self, passes, device):
        r = self.result(passes)
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
        args = tuple(x.to(device) for x in self.inputs)
        return self._on_device[(r.signature, device)], args


def _run_stats(module, inputs):
    """Nodes, kernels, bytes moved and peak memory, counted as the pipeline does."""
    # the very numbers optimize() puts on a Stage
    from ..passes.pipeline import stage_stats
    return stage_stats(module, inputs)
