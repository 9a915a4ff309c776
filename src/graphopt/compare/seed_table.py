"""The seed's static-vs-dynamic table, every cell read off a measured row (chapter 2).

Each column stands for a family of capture methods; each line asks one question of
the rows `compare_capture` measured (when is the graph built, what does a `print` do,
what happens to an `if` on a tensor's value).
"""

from __future__ import annotations

from .table import CaptureRow, CaptureTable, Table, dash, fmt_time

_FAMILIES = {  # the column each method stands for in the seed's table
    "eager": "dynamic: eager",
    "torch.export(strict=False)": "static: torch.export",
    "torch.jit.script": "static: TorchScript (deprecated)",
    "torch.compile": "JIT: torch.compile",
}
_FRAMEWORKS = {
    "eager": "PyTorch eager, TensorFlow 2 eager, Chainer",
    "torch.export(strict=False)": "TF 1.x graphs, ONNX, TensorRT, ExecuTorch",
    "torch.jit.script": "TorchScript (PyTorch 1.x deployment)",
    "torch.compile": "torch.compile, tf.function, jax.jit",
}


def static_vs_dynamic(plain: CaptureTable, branching: CaptureTable) -> Table:
    """The seed's static-vs-dynamic table, each cell read off a measured row (ch. 2).

    `plain` compares a model with a `print` in forward (e.g. models.PrintingAddMul) and
    torch.compile included; `branching` compares a model with a data-dependent `if`.
    """
    keys = list(_FAMILIES)
    lines = [
        ("when the graph is built", [_built(plain[k]) for k in keys]),
        ("what an optimiser sees", [_sees(plain[k]) for k in keys]),
        ("print() inside forward", [_prints(plain[k]) for k in keys]),
        ("if on a tensor's value", [_branch(branching[k]) for k in keys]),
        ("frameworks", [_FRAMEWORKS[k] for k in keys]),
    ]
    return Table([""] + [_FAMILIES[k] for k in keys],
                 [[name] + cells for name, cells in lines])


def _built(r: CaptureRow) -> str:
    if r.method == "eager":
        return "while it runs, op by op, on every call"
    if not r.captured:
        return f"never: {r.error_type}"
    if r.method.startswith("torch.compile"):
        return f"at the first call ({fmt_time(r.capture_s)}), again if a guard fails"
    return f"before it runs, once ({fmt_time(r.capture_s)})"


def _sees(r: CaptureRow) -> str:
    if r.method == "eager":
        launches = dash(None if r.kernels is None else len(r.kernels))
        return f"one op at a time: {launches} kernel launches"
    if not r.captured:
        return "nothing"
    if r.kernels is not None:
        return f"the whole graph ({r.nodes} ops), run as {len(r.kernels)} kernel(s)"
    return f"the whole graph ({r.nodes} ops)"


def _prints(r: CaptureRow) -> str:
    when = ("on every call" if r.prints_per_call else
            "only while capturing" if r.prints_at_capture else "never: it was dropped")
    counts = f"{r.prints_at_capture} at capture, {dash(r.prints_per_call)} per call"
    return f"{when} ({counts})"


def _branch(r: CaptureRow) -> str:
    if r.method == "eager":
        return "just works: Python decides each call"
    if not r.captured:
        return f"fails: {r.error_type}"
    if r.graph_breaks:
        return f"{r.graph_breaks} graph break: {len(r.graphs)} graphs, Python decides"
    if r.verdict == "WRONG":
        return "silently wrong for the other branch"
    return "kept in the graph" if r.verdict == "ok" else r.verdict
