"""The seed's static-vs-dynamic table, every cell read off a measured row (chapter 2).

Each column stands for a family of capture methods; each line asks one question of
the rows `compare_capture` measured (when is the graph built, what does a `print` do,
what happens to an `if` on a tensor's value).
"""

from __future__ import annotations

from ..i18n import N_, _, pgettext
from .table import CaptureRow, CaptureTable, Table, dash, fmt_time

_FAMILIES = {  # the column each method stands for in the seed's table
    "eager": N_("dynamic: eager"),
    "torch.export(strict=False)": N_("static: torch.export"),
    "torch.jit.script": N_("static: TorchScript (deprecated)"),
    "torch.compile": N_("JIT: torch.compile"),
}
_FRAMEWORKS = {
    "eager": N_("PyTorch eager, TensorFlow 2 eager, Chainer"),
    "torch.export(strict=False)": N_("TF 1.x graphs, ONNX, TensorRT, ExecuTorch"),
    "torch.jit.script": N_("TorchScript (PyTorch 1.x deployment)"),
    "torch.compile": "torch.compile, tf.function, jax.jit",  # names only
}


def static_vs_dynamic(plain: CaptureTable, branching: CaptureTable) -> Table:
    """The seed's static-vs-dynamic table, each cell read off a measured row (ch. 2).

    `plain` compares a model with a `print` in forward (e.g. models.PrintingAddMul) and
    torch.compile included; `branching` compares a model with a data-dependent `if`.
    The words are in the reader's language (GRAPHOPT_LANG).
    """
    keys = list(_FAMILIES)
    lines = [
        (_("when the graph is built"), [_built(plain[k]) for k in keys]),
        (_("what an optimiser sees"), [_sees(plain[k]) for k in keys]),
        (_("print() inside forward"), [_prints(plain[k]) for k in keys]),
        (_("if on a tensor's value"), [_branch(branching[k]) for k in keys]),
        (_("frameworks"), [_(_FRAMEWORKS[k]) for k in keys]),
    ]
    return Table([""] + [_(_FAMILIES[k]) for k in keys],
                 [[name] + cells for name, cells in lines])


def _built(r: CaptureRow) -> str:
    if r.method == "eager":
        return _("while it runs, op by op, on every call")
    if not r.captured:
        # a context: "never: ..." alone would match any such English line
        return pgettext("capture table", "never: {error}").format(error=r.error_type)
    if r.method.startswith("torch.compile"):
        return _("at the first call ({time}), again if a guard fails").format(
            time=fmt_time(r.capture_s))
    return _("before it runs, once ({time})").format(time=fmt_time(r.capture_s))


def _sees(r: CaptureRow) -> str:
    if r.method == "eager":
        launches = dash(None if r.kernels is None else len(r.kernels))
        return _("one op at a time: {launches} kernel launches").format(
            launches=launches)
    if not r.captured:
        return _("nothing")
    if r.kernels is not None:
        return _("the whole graph ({nodes} ops), run as {kernels} kernel(s)").format(
            nodes=r.nodes, kernels=len(r.kernels))
    return _("the whole graph ({nodes} ops)").format(nodes=r.nodes)


def _prints(r: CaptureRow) -> str:
    counts = {"capture": r.prints_at_capture, "call": dash(r.prints_per_call)}
    if r.prints_per_call:
        return _("on every call ({capture} at capture, {call} per call)").format(
            **counts)
    if r.prints_at_capture:
        return _("only while capturing ({capture} at capture, {call} per call)"
                 ).format(**counts)
    return _("never: it was dropped ({capture} at capture, {call} per call)").format(
        **counts)


def _branch(r: CaptureRow) -> str:
    if r.method == "eager":
        return _("just works: Python decides each call")
    if not r.captured:
        return pgettext("capture table", "fails: {error}").format(error=r.error_type)
    if r.graph_breaks:
        return _("{breaks} graph break: {graphs} graphs, Python decides").format(
            breaks=r.graph_breaks, graphs=len(r.graphs))
    if r.verdict == "WRONG":
        return _("silently wrong for the other branch")
    return _("kept in the graph") if r.verdict == "ok" else r.shown_verdict
