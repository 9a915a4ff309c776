"""Numerical equivalence of two graphs (or models) on the same inputs.

Introduced in chapter 3 and used after every pass in chapters 3-5 and by every test:
a pass is only correct if the optimised graph computes what the original computed.
Tolerances depend on the dtype, because a rewrite such as Conv+BN folding changes the
order of floating-point operations and so the last bits of the result, while integer
and boolean results must match exactly.

`Float64Reference` is `optimize(check=True)`'s second opinion: the captured graph
run in float64, the truth a float32 stage and eager float32 are both judged by."""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import torch
from torch.fx import GraphModule, Interpreter

from .errors import InputError, NotEquivalentError
from .i18n import _
from .ops import is_random, op_name
from .state import copies, preserved
from .torch_internals import buffer_table, parameter_table, tree_flatten, tree_map

# (rtol, atol) per floating dtype; atol is scaled by the largest reference magnitude,
# so a folded conv whose outputs are around 100 is judged like one around 1.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-2, 1e-3), torch.bfloat16: (2e-2, 1e-2),
    torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-9)}


def equivalent(a: Callable, b: Callable, inputs: Any, *, rtol: float | None = None,
               atol: float | None = None, raise_on_mismatch: bool = False) -> bool:
    """True when `a(*inputs)` and `b(*inputs)` agree within dtype-aware tolerances.

    `a` and `b` are GraphModules, models or functions; `inputs` is a tensor, a
    sequence of tensors, or a dict of keyword inputs (`{"input_ids": ids}`). Both run
    from the same state: copies of the inputs, the same random seed (dropout draws
    the same masks), and what a run writes (buffers) is undone, so checking changes
    neither model. With `raise_on_mismatch=True` a disagreement raises
    NotEquivalentError naming the output and the largest difference (ch. 3).
    """
    args, kwargs = ((), inputs) if isinstance(inputs, dict) else (_as_args(inputs), {})
    outs = []
    for f in (a, b):  # same state for both: input copies, same seed, writes undone
        with torch.no_grad(), preserved(f, seed=0):
            outs.append(f(*copies(args), **copies(kwargs)))
    out_a, out_b = outs
    problem = mismatch(out_a, out_b, rtol=rtol, atol=atol)
    if problem is not None and raise_on_mismatch:
        raise NotEquivalentError(_("{reason} Check the last pass that changed the "
                                   "graph.").format(reason=problem))
    return problem is None


def mismatch(out_a: Any, out_b: Any, *, rtol: float | None = None,
             atol: float | None = None) -> str | None:
    """Describe the first difference between two output structures, or None (ch. 3)."""
    (flat_a, a), (flat_b, b) = tree_flatten(out_a), tree_flatten(out_b)
    if len(flat_a) != len(flat_b):
        return _("the outputs differ in structure: {a} vs {b}.").format(a=a, b=b)
    for i, (x, y) in enumerate(zip(flat_a, flat_b)):
        problem = _compare(x, y, rtol, atol)
        if problem is not None:
            return _("output {i}: {reason}").format(i=i, reason=problem)
    return None


def _compare(x: Any, y: Any, rtol: float | None, atol: float | None) -> str | None:
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        return None if x == y else f"{x!r} != {y!r}."
    if x.shape != y.shape:
        return _("shapes differ: {a} vs {b}.").format(a=tuple(x.shape),
                                                      b=tuple(y.shape))
    if x.dtype != y.dtype:
        return _("dtypes differ: {a} vs {b}.").format(a=x.dtype, b=y.dtype)
    if not x.is_floating_point() and not x.is_complex():
        return None if torch.equal(x, y) else _("integer/bool values differ.")
    default_rtol, default_atol = TOLERANCES.get(x.dtype, (1e-4, 1e-5))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    scale = max(1.0, _worst(x.abs()))
    x64, y64 = x.double(), y.double()
    if torch.allclose(x64, y64, rtol=rtol, atol=atol * scale, equal_nan=True):
        return None
    diff = (x64 - y64).abs().nan_to_num(float("inf"))
    worst = int(diff.argmax())
    text = _("max abs difference {diff} at flat index {index} ({a} vs {b}; "
             "rtol={rtol}, atol={atol}).")
    x_at, y_at = float(x64.flatten()[worst]), float(y64.flatten()[worst])
    return text.format(diff=f"{float(diff.max()):.3g}", index=worst, a=f"{x_at:.6g}",
                       b=f"{y_at:.6g}", rtol=rtol, atol=f"{atol * scale:.3g}")


def _as_args(inputs: Any) -> tuple:
    if isinstance(inputs, torch.Tensor):
        return (inputs,)
    if isinstance(inputs, Sequence) and not isinstance(inputs, str):
        return tuple(inputs)
    raise InputError(_("inputs must be a tensor or a sequence of tensors, not a "
                       "{type}.").format(type=type(inputs).__name__))


def random_like(inputs: Any, seed: int = 0) -> tuple | dict:
    """Fresh random inputs like `inputs`: same shapes, dtypes and ranges (seeded).

    A pass right only on the example inputs is wrong: check on new data too (ch. 3).
    Integer inputs (token ids) are drawn from the example's [min, max]; 0/1 masks
    stay masks; non-negative floats (images) stay in [min, max]; other floats are
    standard normal. Non-tensors are passed through.
    """
    gen = torch.Generator().manual_seed(seed)
    if isinstance(inputs, dict):
        return {k: _fresh(v, gen) for k, v in inputs.items()}
    return tuple(_fresh(x, gen) for x in _as_args(inputs))


def _fresh(x: Any, gen: torch.Generator) -> Any:
    if not isinstance(x, torch.Tensor) or x.numel() == 0:
        return x
    if x.dtype == torch.bool:
        return torch.randint(0, 2, x.shape, generator=gen).bool()
    if x.is_complex():
        return torch.randn(x.shape, generator=gen, dtype=x.dtype)
    lo, hi = float(x.min()), float(x.max())
    if not x.is_floating_point():
        return torch.randint(int(lo), int(hi) + 1, x.shape, generator=gen).to(x.dtype)
    if bool(((x == 0) | (x == 1)).all()):  # a float mask stays a mask
        return torch.randint(0, 2, x.shape, generator=gen).to(x.dtype)
    if lo >= 0:
        u = torch.rand(x.shape, generator=gen, dtype=torch.float64)
        return (lo + (hi - lo) * u).to(x.dtype)
    return torch.randn(x.shape, generator=gen, dtype=x.dtype)


# ------------------------------------------------------------------ float64 truth

# How many times the float32 error bound a stage may make (see Float64Reference).
KAPPA = 4.0
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_U32 = 2.0 ** -24  # float32's unit roundoff: one rounding moves a value this much


class Float64Reference:
    """The captured graph's float32 and float64 answers, to judge a stage by (ch. 3).

    Two float32 answers can part by more than float32's tolerance though both are
    as far from the truth (float64): a folded conv-BN rounds each folded weight,
    which eager never does. Per output, with E eager float32's largest error
    against float64, B the stage before's, and D float64's when every floating
    constant moves by one float32 rounding (x (1 +- 2^-24), seeded signs: what
    rounding a folded weight can do), a stage passes where, elementwise,

        |stage - float64| <= max(KAPPA * (E + D), B) + rtol * |float64| + atol * scale

    (rtol, atol, scale as in `mismatch`; KAPPA = 4: room to round elsewhere). A
    wrongly folded batch norm is thousands of roundings off: it fails. Where
    float64 cannot judge (random draws, a model that cannot be copied or cast,
    outputs not floating point), today's comparison stands.
    """

    def __init__(self, gm: GraphModule):
        self.gm, self.twin, self.answers = gm, None, {}

    def recheck(self, key, args: tuple, stage_out: Any, problem: str, *,
                before_out: Any = None, rtol: float | None = None,
                atol: float | None = None) -> str | None:
        """Float64's verdict on a stage `mismatch` rejected with `problem`: None
        where the rule above holds, else why not (`problem` where float64 cannot
        judge). `key` names the input set (cached); `before_out`: None for eager."""
        if key not in self.answers:
            self.answers[key] = self._answers(args)
        if self.answers[key] is None:
            return problem
        eager, exact, nudged = self.answers[key]
        before = eager if before_out is None else before_out
        flat = [tree_flatten(o)[0] for o in (stage_out, eager, exact, nudged, before)]
        if len({len(f) for f in flat}) != 1:
            return problem
        for i, leaves in enumerate(zip(*flat)):
            verdict = _judge(*leaves, rtol, atol)
            if verdict is not None:
                return _("output {i}: {reason}").format(i=i, reason=verdict)
        return None

    def _answers(self, args: tuple):
        if self.twin is None:  # twice: the truth, and its constants nudged
            twins = [float64_twin(self.gm) for _ in range(2)]
            self.twin = False if None in twins else (twins[0], nudged(twins[1]))
        if self.twin is False:  # no twin: today's comparison
            return None
        try:
            exact, moved = (_run(t, _to_double(args)) for t in self.twin)
            return _run(self.gm, args), exact, moved
        except Exception:  # an op with no float64 kernel: today's comparison
            return None


def float64_twin(gm: GraphModule) -> GraphModule | None:
    """A deep copy of `gm` that computes in float64, or None where it cannot (ch. 3).

    Floating constants and the floating dtypes the graph names (`aten.to(x,
    torch.float32)`) become float64; integer and boolean ones (token ids) stay."""
    if any(_draws(n) for n in gm.graph.nodes):
        return None  # float64 draws other random numbers: no twin
    try:
        # not gm.meta: torch.export's program there holds a second copy of the model
        twin = copy.deepcopy(gm, {id(gm.meta): {}}).double()
        for module in twin.modules():
            for name, value in list(vars(module).items()):
                if isinstance(value, torch.Tensor) and value.dtype in _FLOATS:
                    setattr(module, name, value.double())
        for node in twin.graph.nodes:
            node.args, node.kwargs = _to_double(node.args), _to_double(node.kwargs)
    except Exception:  # a model that cannot be copied or cast
        return None
    return twin


def nudged(twin: GraphModule, seed: int = 0) -> GraphModule:
    """The float64 `twin` with every floating constant moved by one float32
    rounding, x (1 +- 2^-24), signs drawn with `seed`; in place (chapter 3)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in {id(t): t for m in twin.modules() for t in [
                *vars(m).values(), *parameter_table(m).values(),
                *buffer_table(m).values()]
                if isinstance(t, torch.Tensor) and t.is_floating_point()}.values():
            r = torch.randint(0, 2, t.shape, generator=gen, dtype=t.dtype)
            t.mul_(1 + _U32 * (2 * r - 1))
    return twin


def _draws(node) -> bool:
    """Whether `node` draws random numbers: a dropout in eval mode (BERT's, exported
    as `aten.dropout(x, 0.1, False)`) or with p=0 draws none."""
    if not is_random(node):
        return False
    if op_name(node) != "dropout" or node.op == "call_module":
        return True
    given = dict(zip(("input", "p", "train"), node.args), **node.kwargs)
    train = given.get("train", given.get("training", True))
    return train is not False and given.get("p", 0.5) != 0


def _to_double(tree):
    """Floating tensors and dtypes in `tree` as float64; everything else as is."""
    def cast(x):
        if isinstance(x, torch.Tensor) and x.dtype in _FLOATS:
            return x.double()
        return torch.float64 if isinstance(x, torch.dtype) and x in _FLOATS else x
    return tree_map(cast, tree)


def _run(gm: GraphModule, args: tuple):
    with torch.no_grad(), preserved(gm, seed=0):
        return Interpreter(gm).run(*copies(args))


def _judge(stage, eager, exact, moved, before, rtol, atol) -> str | None:
    """One output against float64 by the rule of `Float64Reference`, or None."""
    leaves = (stage, eager, exact, moved, before)
    if not (all(isinstance(t, torch.Tensor) for t in leaves) and stage.dtype in
            _FLOATS and eager.dtype is before.dtype is stage.dtype and exact.dtype is
            moved.dtype is torch.float64 and len({t.shape for t in leaves}) == 1):
        return _compare(eager, stage, rtol, atol)  # no float64 answer: as today
    rtol = TOLERANCES[stage.dtype][0] if rtol is None else rtol
    atol = TOLERANCES[stage.dtype][1] if atol is None else atol
    scale = max(1.0, _worst(exact.abs()))
    e, b = _worst(_error(eager, exact)), _worst(_error(before, exact))
    d = _worst(_error(moved, exact)) * torch.finfo(stage.dtype).eps / 2 / _U32  # D
    off_stage = _error(stage, exact)
    allowed = max(KAPPA * (e + d), b) + rtol * exact.abs().nan_to_num(0.0) + \
        atol * scale
    excess = off_stage - allowed
    if not bool((excess > 0).any()):
        return None
    j = int(excess.flatten().argmax())
    off, value, truth = (float(t.flatten()[j]) for t in (off_stage, stage, exact))
    return _("{off} from float64 at flat index {index} ({value} vs float64's {exact}), "
             "where eager float32 is at most {e} from float64, float32 constants move "
             "it {d}, the stage before is {b} off; allowed max({kappa} x ({e} + {d}), "
             "{b}) + rtol={rtol} x |float64| + atol={atol}.").format(
        off=f"{off:.3g}", index=j, value=f"{value:.6g}", exact=f"{truth:.6g}",
        e=f"{e:.3g}", d=f"{d:.3g}", b=f"{b:.3g}", kappa=f"{KAPPA:g}", rtol=rtol,
        atol=f"{atol * scale:.3g}")


def _worst(err: torch.Tensor) -> float:
    """The largest finite value of `err` (0 for none)."""
    return float(err.nan_to_num(0.0, 0.0, 0.0).max()) if err.numel() else 0.0


def _error(x: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|x - exact| in float64, 0 where both are the same inf or both NaN."""
    x64 = x.double()
    same = (x64 == exact) | (torch.isnan(x64) & torch.isnan(exact))
    return torch.where(same, 0.0, (x64 - exact).abs().nan_to_num(float("inf")))
