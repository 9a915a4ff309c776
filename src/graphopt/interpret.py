"""An instrumented interpreter: run a graph on real tensors and count what it costs.

Introduced in chapter 1. `run(gm, *inputs)` executes the graph node by node, as fx's
`Interpreter` does (freeing each value after its last use), and records per node:

- bytes read (every tensor the op takes, parameters included) and bytes written (its
  outputs); views move no data, so they count zero;
- kernel launches: the aten operators the node dispatches that do real work (views and
  allocations such as `empty` are not kernels), counted with a TorchDispatchMode;
- wall time;
- live memory: the bytes of every distinct storage still needed after the node ran. The
  peak of that count is the exact peak memory of running this graph (weights excluded:
  they are resident anyway and reported as `param_bytes`).

`Profiler` is that interpreter, the one chapter 1 reads; `FusedProfiler` (which `run`
uses) adds what later chapters' graphs need: launches torch cannot see, tensors passed
between two library kernels, torch.export's guard call and `torch.cond`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.fx import GraphModule, Interpreter, Node

from .capture import check_inputs
from .costs import NodeStats, Report, fmt_bytes
from .ops import kind, op_name
from .torch_internals import (
    HigherOrderOperator,
    TorchDispatchMode,
    disable_current_modes,
    op_schema,
    tree_flatten,
)

__all__ = ["FusedProfiler", "KernelCounter", "NodeStats", "Profiler", "Report",
           "fmt_bytes", "run"]  # costs.py's too

# aten ops that allocate or re-describe memory without computing anything
# (`_unsafe_view`: a view without alias info; reshape's copy is the clone)
_NOT_KERNELS = ("empty", "empty_like", "empty_strided", "new_empty",
                "new_empty_strided", "alias", "lift_fresh", "detach", "_to_copy_noop",
                "set_", "resize_", "_unsafe_view")


class KernelCounter(TorchDispatchMode):
    """Counts aten operators that do work (not views, not allocations) (ch. 1)."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.names: list[str] = []  # the aten kernels counted, in launch order

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        name = op_schema(func).name.split("::")[-1]
        if not func.is_view and name not in _NOT_KERNELS:
            self.count += 1
            self.names.append(name)
            self.counted(result)
        return result

    def counted(self, result) -> None:  # the subclass keeps what each kernel wrote
        pass


class _KernelCounter(KernelCounter):
    """A KernelCounter that also keeps what each kernel wrote (to find tensors passed
    between two kernels) and runs torch.cond's branch (chapters 2, 7)."""

    supports_higher_order_operators = True  # torch.cond graphs (chapter 2) run too

    def __init__(self):
        super().__init__()
        self.higher_order: list = []  # torch.cond and friends met on the way
        self.written: list[torch.Tensor] = []  # what the counted kernels wrote

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if isinstance(func, HigherOrderOperator):
            return self._higher_order(func, args, kwargs or {})
        return super().__torch_dispatch__(func, types, args, kwargs)

    def counted(self, result) -> None:
        self.written += _tensors(result)

    def intermediate_bytes(self, ends) -> int:
        """Bytes of the tensors the kernels passed to each other, not in `ends`."""
        keys = {_storage_key(t) for t in ends}
        return _traffic_bytes(t for t in self.written if _storage_key(t) not in keys)

    def _higher_order(self, func, args, kwargs):
        self.higher_order.append(func)
        if func is torch.ops.higher_order.cond:
            # run the branch the data picks, counting its kernels (the predicate
            # was computed, and counted, by the node before)
            pred, true_fn, false_fn, operands = args
            branch = true_fn if bool(pred) else false_fn
            with self:
                return branch(*operands)
        self.count += 1  # any other higher-order op: one opaque launch
        with disable_current_modes():
            return func(*args, **kwargs)


def _is_guard(n: Node) -> bool:
    # torch.export adds a `_guards_fn` call that checks input shapes; it is not an op
    return n.op == "call_module" and str(n.target).startswith("_guards")


def _tensors(value) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _opaque(t: torch.Tensor) -> bool:
    # oneDNN's prepacked weights (chapter 4) have a layout of their own and no storage
    return t.layout is not torch.strided


def _storage_key(t: torch.Tensor) -> tuple:
    if _opaque(t):
        return ("opaque", id(t))
    return (t.device.type, t.untyped_storage().data_ptr())


def _storage_bytes(t: torch.Tensor) -> int:
    if _opaque(t):
        return t.numel() * t.element_size()
    return t.untyped_storage().nbytes()


def _distinct_bytes(tensors) -> int:
    seen: dict[tuple, int] = {}
    for t in tensors:
        seen[_storage_key(t)] = _storage_bytes(t)
    return sum(seen.values())


def _traffic_bytes(tensors) -> int:
    """Bytes an op reads or writes: each distinct tensor once, at its own size.

    Memory held is counted per storage (`_distinct_bytes`), but traffic is per tensor:
    reading one third of a buffer (a `chunk`) moves one third of it. A broadcast view
    (stride 0) cannot move more than its storage holds.
    """
    seen: dict[tuple, int] = {}
    for t in tensors:
        if _opaque(t):
            seen[(_storage_key(t),)] = _storage_bytes(t)
            continue
        key = (_storage_key(t), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        seen[key] = min(t.numel() * t.element_size(), t.untyped_storage().nbytes())
    return sum(seen.values())


def _ours(n: Node, gm: GraphModule) -> bool:
    """Is `n` a call to one of graphopt's own fused modules (chapters 4 and 6)?"""
    if n.op != "call_module":
        return False
    return type(gm.get_submodule(str(n.target))).__module__.startswith("graphopt.")


class Profiler(Interpreter):
    """An fx Interpreter that records a NodeStats per op node it runs (chapter 1)."""

    def __init__(self, gm: GraphModule):
        super().__init__(gm, garbage_collect_values=True)
        self.stats: list[NodeStats] = []
        self.peak = 0

    def run_node(self, n: Node) -> Any:
        if n.op in ("placeholder", "get_attr", "output"):
            result = super().run_node(n)
            if n.op == "placeholder":
                self.peak = max(self.peak, self.live_bytes(extra=_tensors(result)))
            return result
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        inputs = self.operands(n, args, kwargs)
        counter = self.counter()
        start = time.perf_counter()
        with counter:
            result = getattr(self, n.op)(n.target, args, kwargs)
        elapsed = time.perf_counter() - start
        outputs = _tensors(result)
        kernels = self.kernels(n, args, counter)
        # A view returns its input and runs nothing. An in-place op (relu_) also returns
        # its input, but its kernel did read and write it.
        read = {_storage_key(t) for t in inputs}
        moves_nothing = kernels == 0 and all(_storage_key(t) in read for t in outputs)
        # Peak is read after the op ran and before fx frees its dead inputs: the op's
        # inputs and its outputs are all in memory at that moment.
        live = self.live_bytes(extra=outputs)
        self.peak = max(self.peak, live)
        self.stats.append(NodeStats(
            name=n.name, op=op_name(n), kind=kind(n),
            shape=tuple(result.shape) if isinstance(result, torch.Tensor) else None,
            bytes_read=0 if moves_nothing else _traffic_bytes(inputs),
            bytes_written=0 if moves_nothing else _traffic_bytes(outputs),
            kernels=kernels, time_s=elapsed, live_bytes=live))
        return result

    def operands(self, n: Node, args, kwargs) -> list[torch.Tensor]:
        """The tensors a node reads: its arguments and, for a module, its weights."""
        inputs = _tensors((args, kwargs))
        if n.op == "call_module":
            module = self.fetch_attr(str(n.target))
            # BN's step counter is bookkeeping, not read by the kernel (aten graphs
            # agree: it is an unused get_attr there)
            inputs += list(module.parameters()) + [
                b for name, b in module.named_buffers()
                if not name.endswith("num_batches_tracked")]
        return inputs

    def counter(self) -> KernelCounter:  # counts one node's kernels
        return KernelCounter()

    def kernels(self, n: Node, args, counter) -> int:  # those the counter saw
        return counter.count

    def live_bytes(self, extra=()) -> int:
        """Bytes of the distinct storages held by live values (weights excluded)."""
        tensors = [
            t for n, v in self.env.items() if n.op != "get_attr" for t in _tensors(v)
        ]
        return _distinct_bytes(tensors + list(extra))


class FusedProfiler(Profiler):
    """The Profiler for every chapter's graphs: fused nodes, guards, torch.cond.

    Counts a fused node's launches torch cannot see (chapters 6, 7), the tensor two
    library kernels pass through memory (chapter 7), and steps over torch.export's
    guard call (chapter 2); its counter runs torch.cond's branch (chapter 2).
    """

    def run_node(self, n: Node) -> Any:
        if _is_guard(n) or n.op in ("placeholder", "get_attr", "output"):
            return Interpreter.run_node(self, n) if _is_guard(n) else \
                super().run_node(n)  # a guard is a shape check, not an op
        result = super().run_node(n)
        passed = self.passed_between(n, self.seen[1] + _tensors(result))
        if passed:  # written by one kernel, read back by the next
            s = self.stats[-1]
            s.bytes_read, s.bytes_written = s.bytes_read + passed, \
                s.bytes_written + passed
        return result

    def operands(self, n: Node, args, kwargs) -> list[torch.Tensor]:
        inputs = super().operands(n, args, kwargs)
        self.seen = args, inputs
        return inputs

    def counter(self) -> KernelCounter:
        self.last_counter = _KernelCounter()
        return self.last_counter

    def kernels(self, n: Node, args, counter) -> int:
        declared = self.declared_kernels(n, args)
        return counter.count if declared is None else declared

    def declared_kernels(self, n: Node, args=()) -> int | None:
        """Kernels a node launched that torch cannot see (numba, Triton): its plan's
        count for these inputs (a bound module's `plan`, else `meta["graphopt_plan"]`
        from the `lower` stage), else what the module says (`graphopt_kernels`)."""
        module = n.op == "call_module"
        target = self.module.get_submodule(str(n.target)) if module else n.target
        plan = getattr(target, "plan", None) if module else None  # Plan, or a method
        plan = plan if hasattr(plan, "hidden_kernels") else n.meta.get("graphopt_plan")
        if plan is not None:
            return plan.hidden_kernels(target, *args)
        return getattr(target, "graphopt_kernels", None)

    def passed_between(self, n: Node, ends) -> int:
        """Bytes one of graphopt's fused modules passes from one library kernel to
        the next (MKL's GEMM, then torch's GELU): written, then read back."""
        counter = self.last_counter
        if counter.count > 1 and _ours(n, self.module) and \
                self.declared_kernels(n, self.seen[0]) is None:
            return counter.intermediate_bytes(ends)
        return 0


def run(gm: GraphModule, *inputs) -> Report:
    """Run `gm` on `inputs`: bytes, kernels, time and peak memory per node (ch. 1)."""
    gm = getattr(gm, "graph_module", gm)  # the backend's wrapper: its graph module
    if not isinstance(gm, GraphModule):
        raise TypeError(
            f"run takes a torch.fx.GraphModule, not a {type(gm).__name__}; "
            "capture the model first: gm = graphopt.capture(model, x).")
    check_inputs(gm, inputs)
    profiler = FusedProfiler(gm)
    with torch.no_grad():
        outputs = profiler.run(*inputs)
    params = {_storage_key(t): _storage_bytes(t)
              for t in list(gm.parameters()) + list(gm.buffers())}
    return Report(outputs=outputs, nodes=profiler.stats, peak_bytes=profiler.peak,
                  param_bytes=sum(params.values()))

