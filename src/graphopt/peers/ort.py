"""ONNX Runtime as a peer: export, a session on a fair share of cores (chapter 7).

`torch.onnx.export(..., dynamo=True)` writes the model; an InferenceSession runs it
with the graph optimisation level asked for (ORT_LEVELS, weakest first) and one
process's share of the cores. Spinning is off unless asked for: after a run ORT's
threads spin for tens of milliseconds and steal the cores from whatever is timed
next (`waiting.py`). `optimized_op_counts` shows what ORT fused.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Sequence

import torch

from .errors import PeerError
from .quiet import quiet

# ONNX Runtime's graph optimisation levels, weakest first (chapter 7 times each one)
ORT_LEVELS = ("disable_all", "basic", "extended", "layout", "all")


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
    with quiet(), torch.no_grad():
        torch.onnx.export(model, tuple(args), path, dynamo=True)
    return path


def ort_session(path: str, threads: int | None = None, level: str = "all",
                optimized_path: str | None = None, spin: bool = False,
                profile_prefix: str | None = None) -> OrtModel:
    """An InferenceSession on one process's fair share of cores; `spin` lets its
    intra-op threads spin between runs (give the cores a `waiting.SETTLE_S` pause
    before timing anything else); `profile_prefix` turns on ORT's profiler, writing
    `<prefix>_<date>.json` (`ort_profile.ort_runs` reads it).

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
    opts.add_session_config_entry("session.intra_op.allow_spinning", str(int(spin)))
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if optimized_path:
        opts.optimized_model_filepath = optimized_path
    if profile_prefix:
        opts.enable_profiling, opts.profile_file_prefix = True, profile_prefix
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return OrtModel(session, path, names, threads, level)


def onnx_runtime(model, args: Sequence[torch.Tensor], threads: int | None = None,
                 level: str = "all", folder: str | None = None,
                 spin: bool = False) -> OrtModel:
    """Export `model` to ONNX, open it in ONNX Runtime (the file goes to `folder`)."""
    folder = folder or tempfile.mkdtemp(prefix="graphopt-onnx-")
    path = export_onnx(model, args, os.path.join(folder, "model.onnx"))
    return ort_session(path, threads, level, spin=spin)


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
