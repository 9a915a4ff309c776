"""One variant of one model, built and timed in its own spawned process (chapter 7).

A freezing compile made after a plain compile in the same process ran at the plain
one's speed, so no two variants share a process. The parent talks to each worker
through a pipe: "time", "run", "info", "stop".
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import warnings
from typing import Callable

import torch

from .errors import PeerError
from .ort import OrtModel
from .variants import build, check_variant, flat_tensors, time_calls
from .waiting import check_policy, child_env, current


def _serve(conn, factory, variant, threads, wait) -> None:
    """The worker process: build one variant, then answer the parent's requests."""
    _silence_output()
    try:
        torch.manual_seed(0)
        torch.set_num_threads(threads)
        model, inputs = factory()
        start = time.perf_counter()
        with warnings.catch_warnings():  # build() in the parent process shows them
            warnings.simplefilter("ignore")
            fn = build(variant, model, inputs, threads, wait=wait)
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
                reply = _info(fn)
            else:
                break
            conn.send(("ok", reply))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


def _info(fn) -> dict:
    """The settings really in force in this worker process."""
    return {"torch_threads": torch.get_num_threads(), "pid": os.getpid(),
            "wait_policy": current(),
            "onnx_path": getattr(fn, "path", None),
            "ort": fn.settings() if isinstance(fn, OrtModel) else None}


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

    `wait` is how idle threads wait between parallel regions, in torch and in ONNX
    Runtime alike (`waiting.WAIT_POLICIES`): "bounded" (default) spins about a
    millisecond, then sleeps; "passive" sleeps at once; "active" spins.
    """

    def __init__(self, factory: Callable, variant: str, threads: int | None = None,
                 start: bool = True, wait: str = "bounded"):
        check_variant(variant)
        check_policy(wait)
        self.wait_policy = wait
        self.variant = variant
        self.threads = threads or torch.get_num_threads()
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, factory, variant,
                                                      self.threads, wait),
                                 daemon=True)
        with child_env(wait):
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
