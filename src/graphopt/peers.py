"""The peers graphopt is measured against: eager, torch.compile, ONNX Runtime (ch. 7).

Every variant of a model becomes a plain callable on the same inputs, so one timing
loop serves them all:

    eager               the model itself, op by op
    graphopt            graphopt.optimize(model, *inputs).module
    inductor            torch.compile(model)
    inductor_freezing   torch.compile with inductor's freezing: weights become
                        constants, BN folded, conv weights prepacked (blocked layout)
    ort                 torch.onnx.export(..., dynamo=True) + an ONNX Runtime session
                        with every graph optimisation (ORT_ENABLE_ALL)

Two measuring pitfalls decide the shape of this module (TOOLCHAIN.md):

- a freezing compile made after a plain compile in the same process ran at the plain
  one's speed. So `Worker` builds ONE variant in its OWN process (spawned, not forked)
  and times it when asked; the parent asks each worker in turn, round after round, so
  the variants are interleaved while none shares a process with another;
- ONNX Runtime's intra-op threads spin after each run and steal the cores from
  whatever is timed next: sessions are made with `session.intra_op.allow_spinning=0`.

All variants get the same intra-op thread count (`threads`), stated by `info()`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import multiprocessing
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten

from .errors import GraphoptError

VARIANTS = ("eager", "graphopt", "inductor", "inductor_freezing", "ort")

# ONNX Runtime's graph optimisation levels, weakest first (chapter 7 times each one)
ORT_LEVELS = ("disable_all", "basic", "extended", "layout", "all")


class PeerError(GraphoptError, RuntimeError):
    """A peer could not be built or run (the message says which and what to try)."""


def flat_tensors(value) -> list[torch.Tensor]:
    """The tensors in a model's output, in pytree order (the order ONNX export uses)."""
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


# ---------------------------------------------------------------- ONNX Runtime

def ort_version() -> str:
    """'onnxruntime 1.32.0' (or that it is missing), for the header of a measurement."""
    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime not installed"
    return f"onnxruntime {onnxruntime.__version__}"


@dataclass
class OrtModel:
    """An ONNX Runtime session that takes and returns torch tensors, like the model."""

    session: object
    path: str
    input_names: list[str]
    threads: int
    level: str

    def __call__(self, *args) -> list[torch.Tensor]:
        feed = {n: a.detach().cpu().numpy() for n, a in zip(self.input_names, args)}
        return [torch.from_numpy(o) for o in self.session.run(None, feed)]

    def settings(self) -> dict:
        """The thread settings the session really runs with (read back from ORT)."""
        opts = self.session.get_session_options()
        return {"intra_op_threads": opts.intra_op_num_threads,
                "allow_spinning": opts.get_session_config_entry(
                    "session.intra_op.allow_spinning"),
                "level": str(opts.graph_optimization_level).rsplit(".", 1)[-1]}

    def nodes(self) -> int:
        """Node count of the graph ONNX Runtime loaded (before its own optimiser)."""
        import onnx
        return len(onnx.load(self.path, load_external_data=False).graph.node)


def export_onnx(model, args: Sequence[torch.Tensor], path: str) -> str:
    """`torch.onnx.export(model, args, path, dynamo=True)`, progress prints hidden."""
    with _quiet(), torch.no_grad():
        torch.onnx.export(model, tuple(args), path, dynamo=True)
    return path


def ort_session(path: str, threads: int | None = None, level: str = "all",
                optimized_path: str | None = None) -> OrtModel:
    """An InferenceSession on one process's fair share of cores, spinning turned off.

    `level` is one of ORT_LEVELS; `optimized_path` saves the graph after ONNX Runtime's
    optimiser (chapter 7 counts its nodes: what ORT fused).
    """
    import onnxruntime as ort

    if level not in ORT_LEVELS:
        raise PeerError(f"level must be one of {', '.join(ORT_LEVELS)}, not {level!r}")
    threads = threads or torch.get_num_threads()
    opts = ort.SessionOptions()
    name = ("ORT_DISABLE_ALL" if level == "disable_all"
            else f"ORT_ENABLE_{level.upper()}")
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, name)
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3  # errors only: not the note on saving NCHWc graphs
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if optimized_path:
        opts.optimized_model_filepath = optimized_path
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return OrtModel(session, path, names, threads, level)


def onnx_runtime(model, args: Sequence[torch.Tensor], threads: int | None = None,
                 level: str = "all", folder: str | None = None) -> OrtModel:
    """Export `model` to ONNX, open it in ONNX Runtime (the file goes to `folder`)."""
    folder = folder or tempfile.mkdtemp(prefix="graphopt-onnx-")
    path = export_onnx(model, args, os.path.join(folder, "model.onnx"))
    return ort_session(path, threads, level)


def optimized_op_counts(path: str, threads: int | None = None,
                        level: str = "all") -> dict[str, int]:
    """Op types in the graph ONNX Runtime runs after optimising at `level`.

    The exporter has already folded constants (BN into conv): these are ORT's own steps.
    """
    import onnx

    out = path[:-5] + f".{level}.onnx"
    ort_session(path, threads, level, optimized_path=out)
    counts: dict[str, int] = {}
    for node in onnx.load(out, load_external_data=False).graph.node:
        # ORT's own kernels live in other domains: com.microsoft.nchwc.Conv is the
        # blocked-layout (NCHWc) conv, com.microsoft.FusedConv a conv + activation
        op = node.op_type if node.domain in ("", "ai.onnx") else \
            f"{node.domain}.{node.op_type}"
        counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


# ---------------------------------------------------------------- torch.compile

def compiled(model, freezing: bool = False) -> Callable:
    """torch.compile(model) (inductor); `freezing` folds and prepacks the weights.

    Freezing is read when the first call compiles, so that call happens here, inside
    the config patch. Make each configuration in its own process (`Worker`).
    """
    import torch._inductor.config as inductor_config

    fn = torch.compile(model)
    return _CompiledOnce(fn, freezing, inductor_config)


class _CompiledOnce:
    def __init__(self, fn, freezing, config):
        self.fn, self.freezing, self.config, self.ready = fn, freezing, config, False

    def __call__(self, *args):
        if not self.ready:
            with self.config.patch(freezing=self.freezing), _quiet():
                out = self.fn(*args)
            self.ready = True
            return out
        return self.fn(*args)


# ---------------------------------------------------------------- variants

def build(variant: str, model, inputs: Sequence[torch.Tensor],
          threads: int | None = None) -> Callable:
    """The callable for one variant, warmed up (compiled, exported) on `inputs`."""
    if variant not in VARIANTS:
        raise PeerError(f"unknown variant {variant!r}; choose from "
                        f"{', '.join(VARIANTS)}")
    if threads:
        torch.set_num_threads(threads)
    model = model.eval()
    if variant == "eager":
        fn = model
    elif variant == "graphopt":
        from .passes.pipeline import optimize
        fn = optimize(model, *inputs, stats=False).module
    elif variant in ("inductor", "inductor_freezing"):
        fn = compiled(model, freezing=variant == "inductor_freezing")
    else:
        fn = onnx_runtime(model, inputs, threads or torch.get_num_threads())
    with torch.no_grad():
        fn(*inputs)
    return fn


def time_calls(fn: Callable, inputs, calls: int) -> list[float]:
    """Wall time of `calls` consecutive calls, one per call (seconds)."""
    times = []
    with torch.no_grad():
        for _ in range(calls):
            start = time.perf_counter()
            fn(*inputs)
            times.append(time.perf_counter() - start)
    return times


@contextlib.contextmanager
def _quiet():
    """Hide export/compile chatter (progress prints, warnings) nobody asked for."""
    # "torchvision is not installed. Skipping ...", the exporter's own constant
    # folder's "Evaluation failed: ..." (it then keeps the node, which is correct)
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


# ---------------------------------------------------------------- one process each

def _serve(conn, factory, variant, threads) -> None:
    """The worker process: build one variant, then answer the parent's requests."""
    _silence_output()
    try:
        torch.manual_seed(0)
        torch.set_num_threads(threads)
        model, inputs = factory()
        start = time.perf_counter()
        with warnings.catch_warnings():  # build() in the parent process shows them
            warnings.simplefilter("ignore")
            fn = build(variant, model, inputs, threads)
        conn.send(("ok", time.perf_counter() - start))
    except Exception as e:  # report to the parent, which raises PeerError
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    while True:
        try:
            op, arg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):  # the parent is gone (or
            return                                      # interrupted us): stop
        try:
            if op == "time":
                reply = time_calls(fn, inputs, arg)
            elif op == "run":
                with torch.no_grad():
                    reply = [t.clone() for t in flat_tensors(fn(*arg))]
            elif op == "info":
                reply = {"torch_threads": torch.get_num_threads(), "pid": os.getpid(),
                         "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                         "onnx_path": getattr(fn, "path", None),
                         "ort": fn.settings() if isinstance(fn, OrtModel) else None}
            else:
                break
            conn.send(("ok", reply))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


def _silence_output() -> None:
    """Point the worker's stdout/stderr at /dev/null: compilers and exporters print
    from C++ too, and a notebook kernel would show that in whatever cell runs then.
    Errors still reach the parent through the pipe. GRAPHOPT_WORKER_OUTPUT=1 keeps it.
    """
    if os.environ.get("GRAPHOPT_WORKER_OUTPUT", "0") not in ("", "0"):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(null, fd)
    os.close(null)


class Worker:
    """One variant of one model, built and timed in its own spawned process.

    `factory` is a picklable function returning (model, inputs), e.g.
    `functools.partial(graphopt.models.example, "resnet18")`; the worker calls it, so
    the model is built fresh there. `start=False` lets several workers build at once:
    create them all, then call `wait()` on each.

    `spin=False` (default) starts the process with OMP_WAIT_POLICY=PASSIVE: torch's
    OpenMP threads then sleep at a barrier instead of spinning, as ONNX Runtime's do
    with allow_spinning=0. On a loaded machine spinning threads that wait for a
    descheduled partner made eager ResNet-18 ten times slower; with both peers
    passive they are compared on the same terms.
    """

    def __init__(self, factory: Callable, variant: str, threads: int | None = None,
                 start: bool = True, spin: bool = False):
        if variant not in VARIANTS:
            raise PeerError(f"unknown variant {variant!r}; choose from "
                            f"{', '.join(VARIANTS)}")
        self.variant = variant
        self.threads = threads or torch.get_num_threads()
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, factory, variant,
                                                      self.threads), daemon=True)
        with _omp_wait_policy("ACTIVE" if spin else "PASSIVE"):
            self._proc.start()
        child.close()
        self.build_s: float | None = None
        if start:
            self.wait()

    def wait(self) -> "Worker":
        """Block until the variant is built (compiled, exported); raise if it failed."""
        if self.build_s is None:
            self.build_s = self._reply()
        return self

    def _reply(self):
        try:
            status, value = self._conn.recv()
        except EOFError:
            raise PeerError(f"the {self.variant} worker died (out of memory, or a "
                            "crash in a compiler); run build() in this process to see "
                            "the traceback") from None
        if status == "error":
            self.close()
            raise PeerError(f"{self.variant}: {value}")
        return value

    def _ask(self, op, arg=None):
        self.wait()
        self._conn.send((op, arg))
        return self._reply()

    def time(self, calls: int) -> list[float]:
        """Seconds per call for `calls` consecutive calls on the example inputs."""
        return self._ask("time", calls)

    def run(self, *args) -> list[torch.Tensor]:
        """The variant's outputs (flat list of tensors) on `args`."""
        return self._ask("run", args)

    def info(self) -> dict:
        """Thread counts actually in force in the worker (torch, and ORT's session)."""
        return self._ask("info")

    def close(self) -> None:
        if self._proc.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(("stop", None))
            self._proc.join(timeout=10)
            if self._proc.is_alive():
                self._proc.kill()
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextlib.contextmanager
def _omp_wait_policy(policy: str):
    """OMP_WAIT_POLICY for a child started inside (read once, when its torch loads)."""
    old = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = policy
    try:
        yield
    finally:
        if old is None:
            del os.environ["OMP_WAIT_POLICY"]
        else:
            os.environ["OMP_WAIT_POLICY"] = old


# ---------------------------------------------------------------- interleaved rounds

@dataclass
class Measured:
    """Median over rounds of each round's median call time, and the spread of rounds."""

    median: float
    low: float
    high: float
    rounds: list[float]

    @property
    def spread(self) -> float:
        """(slowest round - fastest round) / median."""
        return (self.high - self.low) / self.median if self.median else 0.0


def interleave(timers: dict[str, Callable[[int], list[float]]], rounds: int,
               calls: int) -> dict[str, Measured]:
    """Round after round, time each variant in turn: load drifts hit all alike."""
    per_round: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            per_round[name].append(statistics.median(timer(calls)))
    return {k: Measured(statistics.median(v), min(v), max(v), v)
            for k, v in per_round.items()}


__all__ = ["Measured", "ORT_LEVELS", "OrtModel", "PeerError", "VARIANTS", "Worker",
           "build", "compiled", "export_onnx", "flat_tensors", "interleave",
           "onnx_runtime", "optimized_op_counts", "ort_session", "ort_version",
           "time_calls"]
