"""Where a saving comes from: one model's time split by mechanism (chapter 7).

`graphopt.optimize` keeps every stage, and the backend stage's module can be taken
apart again, one mechanism at a time. `variants` builds the chain

    captured ─► graph passes, stage by stage (BN folding, layout, ...)
             ─► library kernels   the backend's kernels on plain weights, each
                                  activation run after its kernel (no post-op)
             ─► prepacked weights  the same kernels on the weights packed once
             ─► post-op fusion     the activation (and residual add) inside the
                                   kernel, through torch's mkldnn ops
             ─► primitives made once  the same oneDNN kernels made once and kept
                                   (`backend.onednn_direct`), and the layout
                                   conversions as oneDNN reorders made once: the
                                   backend's module, fx's forward
             ─► wrapper            the same module behind the wrapper's one guard

where each link adds one mechanism to the one before. Timed in one interleaved run
(`timed`), `split` gives each mechanism its saving as a share of the captured
graph's time, with the spread the book uses: the saving's interquartile range runs
from the first variant's q1 minus the second's q3 to its q3 minus the other's q1,
so it excludes zero exactly when the two timings' IQRs do not overlap
(`Comparison.below_noise`). Each saving is measured with every step before it
applied, in the pipeline's order: a different order would split it differently.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Callable

import torch

from ..backend import onednn
from ..errors import InputError
from ..i18n import N_, _, ljust, pgettext
from ..measure.conditions import load_average
from ..measure.report import Comparison, from_times
from ..passes.activations import ACTIVATIONS
from ..passes.convert_layout import ToLayout
from ..passes.fused_modules import ConvAddReLU, ConvReLU, LinearReLU
from ..passes.prepacked import Prepacked
from .rounds import interleave

# The mechanism each graph stage adds (a stage that changes nothing in a model is
# left out of its chain), and the backend's four links, by their labels. English:
# a chapter compares them; `Step.__str__` shows them in the reader's language.
GRAPH_MECHANISMS = {
    "eliminate_dead_code": N_("dead code"),
    "fold_constants": N_("constant folding"),
    "eliminate_common_subexpressions": N_("common subexpressions"),
    "fold_conv_bn": N_("BN folding"),
    "fuse_attention": N_("attention fusion"),
    "fuse_qkv": N_("QKV fusion"),
    "fuse_patterns": N_("pattern nodes (by reference)"),
    "fuse_elementwise": N_("elementwise groups"),
    "convert_layout": N_("layout (channels-last)"),
    "lower": N_("generated kernels"),
}
BACKEND_MECHANISMS = {
    "library kernels": N_("library kernels (plain weights)"),
    "prepacked weights": N_("prepacked weights"),
    "post-ops fused": N_("post-op fusion"),
    "backend, fx forward": N_("primitives made once"),
    "backend": N_("wrapper (dispatch)"),
}
NONE = ACTIVATIONS["none"]


def mechanism(label: str) -> str:
    """What the link `label` of `variants` adds, in the book's words (ch. 7)."""
    return GRAPH_MECHANISMS.get(label) or BACKEND_MECHANISMS.get(label, label)


def variants(result) -> dict[str, Callable]:
    """{label: callable}: the chain of the module docstring, from a result of
    `graphopt.optimize` that ran the whole pipeline (ch. 7). The first entry,
    "captured", is the base; graph stages keep their names; the backend's links
    are "library kernels", "prepacked weights", "post-ops fused", "backend, fx
    forward" and "backend". Every callable runs the model on its inputs. Where
    oneDNN's own library does not load, "post-ops fused" and "backend, fx forward"
    run the same calls, and the link between them measures nothing."""
    stages = list(result.stages)
    if stages[-1].name != "backend":
        raise InputError("attribution.variants: the result must end with the "
                         "backend stage: call graphopt.optimize(model, *inputs).")
    chain = {"captured": stages[0].module}
    for stage in stages[1:-1]:
        if stage.result is not None and stage.result.changed:
            chain[stage.name] = stage.module
    backend = stages[-1].module
    fused = copy.deepcopy(backend)              # a copy runs fx's forward
    through_torch = torch_ops(copy.deepcopy(backend))
    packed = unfuse_post_ops(torch_ops(copy.deepcopy(backend)))
    plain = drop_packs(unfuse_post_ops(torch_ops(copy.deepcopy(backend))))
    chain.update({"library kernels": plain, "prepacked weights": packed,
                  "post-ops fused": through_torch, "backend, fx forward": fused,
                  "backend": backend})
    return chain


def torch_ops(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with each oneDNN primitive made once replaced by torch's mkldnn op,
    which makes it again on every call (`backend.onednn_direct`), and each layout
    conversion's reorder made once by torch's copy (ch. 7)."""
    for module in gm.modules():
        if isinstance(module, ToLayout):
            module.copy = None
        plan = getattr(module, "plan", None)
        through_torch = getattr(getattr(plan, "call", None), "through_torch", None)
        if through_torch is not None:
            module.plan = replace(plan, call=through_torch, kernels=None)
    return gm


def drop_packs(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with every prepacked weight forgotten: each library kernel then reads
    the plain weight and reorders it on every call (ch. 7)."""
    for module in gm.modules():
        if isinstance(module, Prepacked) and module.is_prepacked:
            module._pack = None
    return gm


def unfuse_post_ops(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with each oneDNN kernel's post-op taken out: the same kernel without
    its activation (or residual add), then torch's ops for them (ch. 7)."""
    for module in gm.modules():
        if getattr(module, "kernel", "") != "onednn":
            continue
        if isinstance(module, ConvAddReLU):  # torch's ops run: count what ran
            module.plan = replace(module.plan, call=_conv_then_add_relu, kernels=None)
        elif isinstance(module, (ConvReLU, LinearReLU)):
            module.plan = replace(module.plan, call=_kernel_then_act, kernels=None)
    return gm


def _weight(module, key, weight):
    packed = module.packed(weight, key)
    return weight if packed is None else packed


def _conv(module, x, weight, bias):
    return onednn.conv_act(x, _weight(module, tuple(x.shape), weight), bias,
                           module.padding, module.stride, module.dilation,
                           module.groups, NONE)


def _kernel_then_act(module, x, weight, bias):
    if isinstance(module, ConvReLU):
        return module.act.eager(_conv(module, x, weight, bias))
    rows = x.numel() // x.shape[-1]
    y = onednn.linear_act(x, _weight(module, rows, weight), bias, NONE)
    return module.act.eager(y)


def _conv_then_add_relu(module, x, weight, bias, other):
    return module.act.eager(_conv(module, x, weight, bias) + other)


def timed(timers: dict[str, Callable[[int], list[float]]], rounds: int, calls: int,
          threads: int, settle_s: float = 0.0) -> Comparison:
    """`peers.interleave` as a `Comparison`: each variant's round medians, their
    median and interquartile range (the book's one spread), and the machine's load
    before and after, for `Comparison.conditions` (ch. 7)."""
    before = load_average()
    measured = interleave(timers, rounds, calls, settle_s)
    timings = {k: from_times(k, m.rounds, "cpu", threads) for k, m in measured.items()}
    order = [(r, k) for r in range(rounds) for k in timers]
    return Comparison(timings, order, threads, "cpu", (before, load_average()))


@dataclass(frozen=True)
class Step:
    """One mechanism's saving, as a share of the base's median time."""

    mechanism: str  # `mechanism(label)` of the link
    saved: float    # (median before - median after) / base median
    low: float      # (q1 before - q3 after) / base median
    high: float     # (q3 before - q1 after) / base median

    @property
    def verdict(self) -> str:
        """'saves', 'costs' or 'within noise' (the IQRs overlap)."""
        if self.low > 0:
            return "saves"
        return "costs" if self.high < 0 else "within noise"

    def __str__(self) -> str:
        """One line of the chapter's table, its words in the reader's language."""
        interval = pgettext("saving", "({low} to {high})").format(
            low=f"{self.low:.1%}", high=f"{self.high:.1%}")
        return (ljust(_(self.mechanism), 32) + f"{self.saved:>7.1%}  {interval}  "
                + _VERDICT_WORDS[self.verdict]())


# a saving's verdict in the reader's language (read at each call: GRAPHOPT_LANG)
_VERDICT_WORDS = {
    "saves": lambda: pgettext("saving", "saves"),
    "costs": lambda: pgettext("saving", "costs"),
    "within noise": lambda: pgettext("saving", "within noise"),
}


def split(times: Comparison, chain: list[str]) -> list[Step]:
    """Each link of `chain` (labels of `times`, the base first) with the saving
    of its mechanism over the link before (ch. 7)."""
    if len(chain) < 2:
        raise InputError("attribution.split: a chain needs a base and one step.")
    base = times[chain[0]].median
    steps = []
    for before, after in zip(chain, chain[1:]):
        a, b = times[before], times[after]
        steps.append(Step(mechanism(after), (a.median - b.median) / base,
                          (a.q1 - b.q3) / base, (a.q3 - b.q1) / base))
    return steps


def total(times: Comparison, first: str, last: str) -> Step:
    """The whole saving from `first` to `last`, as one step (ch. 7)."""
    return split(times, [first, last])[0]


def against_range(step: Step, low: float, high: float) -> str:
    """Where a saving's interval lies against a claimed range [low, high]:
    'within', 'above', 'below' or 'not separable from' (ch. 7)."""
    if low <= step.low and step.high <= high:
        return "within"
    if step.low > high:
        return "above"
    if step.high < low:
        return "below"
    return "not separable from"


def largest(steps: list[Step]) -> tuple[Step, list[Step]]:
    """The step with the largest saving, and the steps it cannot be told apart
    from (their intervals overlap its interval) (ch. 7)."""
    top = max(steps, key=lambda s: s.saved)
    ties = [s for s in steps if s is not top and s.high >= top.low]
    return top, ties
