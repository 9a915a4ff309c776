"""The wrapper's fast path (backend.wrapper, backend.straight_line; chapter 7).

The fast path must answer exactly as the GraphModule's node-by-node run does, on
fresh inputs and repeated calls, and step aside (to the general path, with all its
checks) whenever its one entry guard does not hold: other shapes, strides, dtypes,
autograd, unknown or missing keywords, a weight written in place, a graph edited
and recompiled. Keyword calls with the example's names take the fast path (#21).
Only the `backend` stage's module gets it (#22): every earlier stage runs fx's forward.
"""

import copy
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch import nn
from torch.fx import Interpreter

import graphopt
from graphgen import fx_graphs, run_seeded, state_hash
from graphopt.backend import onednn_direct, wrapper
from graphopt.backend.bindings import BINDINGS
from graphopt.codegen import GeneratedKernel, kernels_for, lower, plan_kind
from graphopt.errors import GraphoptError
from graphopt.models import example
from graphopt.passes.activations import RELU
from graphopt.torch_internals import TorchDispatchMode
from graphopt.verify import random_like

# the fused kernels on small shapes: the policy's small-work rules are off here
pytestmark = pytest.mark.usefixtures("small_work_fused")

MODELS = ("small_resnet", "transformer_block", "mlp", "basic_block")


def _optimized(name):
    model, inputs = example(name)
    return model, inputs, graphopt.optimize(model, *inputs, stats=False).module


def _node_by_node(gm, inputs):
    """The general path: fx's Interpreter calls every module's own forward."""
    with torch.no_grad():
        return Interpreter(gm).run(*inputs)


def _python_calls(fn, *args) -> int:
    """How many Python functions one call runs (deterministic, unlike its time)."""
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return count[0]


def _flat(out):
    return [t for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)]


def _assert_equal(a, b):
    for x, y in zip(_flat(a), _flat(b), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


@pytest.mark.parametrize("name", MODELS)
def test_fast_path_answers_as_the_graph_does(name):
    model, inputs, gm = _optimized(name)
    built = wrapper.wrapper_of(gm)
    assert built is not None and "self." not in built.source
    for args in (inputs, inputs, random_like(inputs, seed=3), random_like(inputs, 4)):
        with torch.no_grad():
            fast = gm(*args)
            eager = model(*args)
        _assert_equal(fast, _node_by_node(gm, args))
        for x, y in zip(_flat(fast), _flat(eager), strict=True):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)


def test_fused_nodes_call_their_kernels_directly():
    _, inputs, gm = _optimized("small_resnet")
    fused = [n for n in gm.graph.nodes if n.op == "call_module"
             and getattr(gm.get_submodule(n.target), "_pack", None) is not None]
    built = wrapper.wrapper_of(gm)
    assert fused and built.direct == len(fused)
    with torch.no_grad():
        gm(*inputs)  # the first call makes the oneDNN primitives (onednn_direct)
        fast = _python_calls(gm, *inputs)
        general = _python_calls(lambda *a: _node_by_node(gm, a), *inputs)
    # one Python frame per direct call (two where a oneDNN primitive made once
    # runs the conv: the plan's call, then the primitive's), a few for the entry
    # (nn.Module's call, the guard) and the exit (pytree): against several per
    # node in fx's general path
    frames = 2 if onednn_direct.supported(RELU) else 1
    assert fast <= frames * built.direct + 16 < general


def test_guard_sends_other_inputs_down_the_general_path():
    _, (x,), gm = _optimized("small_resnet")
    with torch.no_grad():
        reference = _node_by_node(gm, (x,))
        channels_last = x.contiguous(memory_format=torch.channels_last)
        _assert_equal(gm(channels_last), reference)  # other strides: general path
        assert not wrapper.wrapper_of(gm).matches((channels_last,))
        with pytest.raises(GraphoptError):
            gm(x[:1])  # another shape: the general path's ShapeGuard says what to do


def test_autograd_takes_the_general_path_and_gets_gradients():
    model, (x,), gm = _optimized("mlp")
    x = x.clone().requires_grad_()
    assert not wrapper.wrapper_of(gm).matches((x,))
    gm(x).sum().backward()
    expected = x.detach().clone().requires_grad_()
    model(expected).sum().backward()
    torch.testing.assert_close(x.grad, expected.grad)


def test_a_weight_written_in_place_is_never_run_stale():
    _, inputs, gm = _optimized("small_resnet")
    with torch.no_grad():
        before = gm(*inputs)
        for t in list(gm.buffers()) + list(gm.parameters()):
            if t.is_floating_point() and t.dim() == 4:  # the conv weights
                t.mul_(0.5)
        after = gm(*inputs)
    _assert_equal(after, _node_by_node(gm, inputs))
    assert not torch.equal(_flat(before)[0], _flat(after)[0])


@pytest.mark.parametrize("name", ["small_resnet", "mlp"])
def test_a_weight_given_new_storage_through_data_is_never_run_stale(name):
    """`p.data = w` keeps the version counter and moves the address; twice before a
    call, the second storage may take the first one's freed address, unless the
    pack keeps it alive. Eager's weights scaled in place are the reference: every
    matrix weight of the optimised graph is the eager one's times a batch norm's
    scale (or itself), so scaling both by 1.5 keeps them in step."""
    model, inputs, gm = _optimized(name)
    with torch.no_grad():
        gm(*inputs)  # packs and primitives made
        weights = [t for t in list(gm.buffers()) + list(gm.parameters())
                   if t.is_floating_point() and t.dim() > 1]
        for factor in (3.0, 0.5):  # no call in between
            for t in weights:
                t.data = t.data * factor
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(1.5)
        torch.testing.assert_close(_flat(gm(*inputs))[0], _flat(model(*inputs))[0],
                                   rtol=1e-4, atol=1e-4)


def test_keyword_calls_and_copies_still_answer():
    model, inputs, gm = _optimized("transformer_block")
    name = next(n.target for n in gm.graph.nodes if n.op == "placeholder")
    with torch.no_grad():
        expected = _node_by_node(gm, inputs)
        copied = copy.deepcopy(gm)
        assert wrapper.wrapper_of(copied) is None  # runs the general path
        _assert_equal(copied(*inputs), expected)
        _assert_equal(gm(**{name: inputs[0]}), expected)  # bound by name: fast


def test_a_shallow_copy_is_a_plain_wrapper_on_the_general_path():
    # the generated entry reads the original's weights: a copy does not take it
    _, inputs, gm = _optimized("add_mul")
    shallow = copy.copy(gm)
    assert type(shallow) is wrapper.Wrapper and type(gm) is not wrapper.Wrapper
    assert wrapper.wrapper_of(shallow) is None and wrapper.wrapper_of(gm) is not None
    with torch.no_grad():
        _assert_equal(shallow(*inputs), gm(*inputs))
        assert _python_calls(shallow, *inputs) > _python_calls(gm, *inputs)


def test_recompile_drops_the_fast_path():
    _, inputs, gm = _optimized("mlp")
    gm.recompile()  # what a graph edit must end with: fx's forward is back
    assert wrapper.wrapper_of(gm) is None
    with torch.no_grad():
        _assert_equal(gm(*inputs), _node_by_node(gm, inputs))


def test_install_again_and_opt_out():
    model, inputs, gm = _optimized("mlp")
    # a Wrapper whose class's call is the generated entry (made for this graph)
    assert isinstance(gm, wrapper.Wrapper) and "tensors(x)" in type(gm).__call__.source
    again = wrapper.install(gm)  # a new wrapper around the same graph module
    assert again.graph_module is gm.graph_module and wrapper.wrapper_of(again)
    assert wrapper.wrapper_of(again) is not wrapper.wrapper_of(gm)
    with torch.no_grad():
        _assert_equal(again(*inputs), _node_by_node(gm, inputs))
        _assert_equal(gm(*inputs), _node_by_node(gm, inputs))
    # the graph passes alone end before the backend stage: fx's forward, no wrapper
    plain = graphopt.optimize(model, *inputs, stats=False,
                              passes=graphopt.GRAPH_PASSES).module
    assert wrapper.wrapper_of(plain) is None
    with torch.no_grad():
        _assert_equal(plain(*inputs), _node_by_node(plain, inputs))
    bound = graphopt.optimize(model, *inputs, stats=False,
                              passes=["fuse_patterns", "backend"]).module
    assert wrapper.wrapper_of(bound) is not None  # the backend stage builds it


def _groups(gm):
    """node name -> its fused group's module (FusedElementwise or GeneratedKernel)."""
    from graphopt.passes.fuse_elementwise import FusedElementwise
    return {n.name: gm.get_submodule(str(n.target)) for n in gm.graph.nodes
            if n.op == "call_module"
            and isinstance(gm.get_submodule(str(n.target)), FusedElementwise)}


def test_only_the_backend_stage_has_the_wrapper_and_lower_loses_nothing():
    from graphopt.passes.fuse_elementwise import FusedElementwise
    model, inputs = example("add_mul")
    res = graphopt.optimize(model, *inputs, stats=False)
    assert [s.name for s in res.stages][-3:] == ["convert_layout", "lower", "backend"]
    for stage in res.stages[:-1]:  # fx's forward on every stage before `backend`
        assert wrapper.wrapper_of(stage.module) is None, stage.name
    assert wrapper.wrapper_of(res.module) is not None
    assert res.module is res.stages[-1].module
    before, lowered = res.stages[-3].module, res.stages[-2].module
    groups, kernels = _groups(before), _groups(lowered)
    assert groups and kernels.keys() == groups.keys()
    for name, group in groups.items():  # the previous stage keeps its groups
        kernel = kernels[name]
        assert type(group) is FusedElementwise and type(kernel) is GeneratedKernel
        assert kernel is not group and kernel.ops == group.ops
    assert lowered.code == before.code  # the graph's shape is unchanged
    with torch.no_grad():
        for gm in (before, lowered, res.module):
            torch.testing.assert_close(gm(*inputs), model(*inputs))
        counts = [graphopt.run(gm, *inputs).kernels for gm in (before, lowered)]
    assert counts[0] > counts[1] == len(kernels)  # by reference, then one each
    code, state = before.code, state_hash(before)
    again = lower(before)  # called directly: a new module, the given one as it was
    assert again.module is not before and again.rewritten == list(groups)
    assert before.code == code and state_hash(before) == state
    assert all(type(g) is FusedElementwise for g in _groups(before).values())
    assert wrapper.wrapper_of(again.module) is None


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=fx_graphs(max_ops=18))
def test_generated_graphs_answer_alike_on_both_paths(case):
    gm, inputs = case
    opt = graphopt.optimize(gm, *inputs, stats=False).module
    assert wrapper.wrapper_of(opt) is not None
    for args in (inputs, random_like(inputs, seed=5), inputs):
        fast = run_seeded(opt, args)
        torch.manual_seed(1234)  # the same random draws (rand_like) on both paths
        with torch.no_grad():
            general = wrapper.general(opt)(*args)
        _assert_equal(fast, general)


def test_names_that_collide_with_the_wrappers_own_are_renamed():
    # a graph whose nodes are named relu, relu_1, ... as the globals for torch.relu
    # would be: the wrapper must find free names (it once looped forever here)
    def f(x):
        for _ in range(6):
            x = torch.relu(x) - 0.5
        return x

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(4, 5)
    wrapped = wrapper.install(gm, (x,))
    built = wrapper.wrapper_of(wrapped)
    assert built is not None and len(set(built.calls)) == len(built.calls)
    with torch.no_grad():
        _assert_equal(wrapped(x), f(x))
    model, inputs = example("basic_block")
    opt = graphopt.optimize(graphopt.capture(model, *inputs, level="module"),
                            *inputs, stats=False).module
    assert wrapper.wrapper_of(opt) is not None
    with torch.no_grad():
        _assert_equal(opt(*inputs), _node_by_node(opt, inputs))


# ------------------------------------------------ keyword calls take the fast path (#21)

class LinearNorms(nn.Module):
    """Eight Linear+LayerNorm blocks: the issue's minimal case, called by keyword."""

    def __init__(self, width=64, depth=8):
        super().__init__()
        self.blocks = nn.Sequential(*[m for _ in range(depth) for m in (
            nn.Linear(width, width), nn.LayerNorm(width))])

    def forward(self, x):
        return self.blocks(x)


def _counted(built, gm):
    """Count calls of `gm` that ran the straight line past its guard (the fast
    path) from now on: in the generated entry (`type(gm).__call__`) or, where the
    entry hands over to `Wrapper.__call__` (keywords, hooks), in `built.run`."""
    entered, run = [0], built.run

    def counting(*args):
        out = run(*args)
        entered[0] += out is not wrapper.MISS
        return out

    built.run = counting
    entry = type(gm).__call__
    if entry is wrapper.Wrapper.__call__:
        return entered
    general, handed = entry.__globals__[entry.general], [False]

    def handing_over(*args, **kwargs):
        handed[0] = True
        return general(*args, **kwargs)

    def counting_entry(self, *args, **kwargs):
        handed[0] = False
        out = entry(self, *args, **kwargs)
        entered[0] += not handed[0]
        return out

    entry.__globals__[entry.general] = handing_over
    type(gm).__call__ = counting_entry
    return entered


def _keyword_case(name):
    if name == "bert":
        pytest.importorskip("transformers")
        model, (ids, mask) = example("bert", seq_len=32)
        kwargs = {"input_ids": ids, "attention_mask": mask}
    else:
        torch.manual_seed(0)
        model, kwargs = LinearNorms().eval(), {"x": torch.randn(4, 64)}
    gm = graphopt.optimize(model, stats=False, **kwargs).module
    return model, kwargs, gm


@pytest.mark.parametrize("name", ["linear_norms", "bert"])
def test_keyword_calls_take_the_fast_path_in_any_order(name):
    model, kwargs, gm = _keyword_case(name)
    built = wrapper.wrapper_of(gm)
    assert built is not None and built.names == tuple(kwargs)
    entered = _counted(built, gm)
    shuffled = dict(reversed(kwargs.items()))
    with torch.no_grad():
        by_name, reordered = gm(**kwargs), gm(**shuffled)
        positional = gm(*kwargs.values())
        eager = model(**kwargs)
    assert entered[0] == 3  # all three calls ran the straight-line function
    _assert_equal(by_name, positional)
    _assert_equal(reordered, positional)
    _assert_equal(by_name, _node_by_node(gm, tuple(kwargs.values())))
    for x, y in zip(_flat(by_name), _flat(eager), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)
    with torch.no_grad():  # the same Python frames, give or take the binding's one
        keyword = _python_calls(lambda: gm(**kwargs))
        fast = _python_calls(lambda: gm(*kwargs.values()))
        slow = _python_calls(lambda: wrapper.general(gm)(**kwargs))
    assert fast <= keyword <= fast + 1 < slow


def test_other_keywords_answer_right_or_say_what_is_wrong():
    model, kwargs, gm = _keyword_case("linear_norms")
    entered = _counted(wrapper.wrapper_of(gm), gm)
    x = kwargs["x"]
    with torch.no_grad():
        with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
            gm(x=x, y=x)  # an extra key: fx's forward names it
        with pytest.raises(TypeError, match="missing 1 required"):
            gm()
        with pytest.raises(TypeError, match="multiple values"):
            gm(x, x=x)
        with pytest.raises(GraphoptError, match="captured for inputs of shape"):
            gm(x=x[:2])  # another shape: the general path's ShapeGuard
        # other strides: the general path, the graph's own answer; eager's kernels
        # round differently on a strided input, so eager is within float32 rounding
        channels = x.t().contiguous().t()
        _assert_equal(gm(x=channels), _node_by_node(gm, (channels,)))
        torch.testing.assert_close(gm(x=channels), model(channels), rtol=1e-4, atol=1e-4)
    assert entered[0] == 0


class CachedByDefault(nn.Module):
    """Returns a cache unless told `use_cache=False`, as Hugging Face models do."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, mask=None, use_cache=True):
        y = self.lin(x) * mask
        return (y, y.sum()) if use_cache else y


def test_a_flag_given_by_keyword_is_guarded_like_a_shape():
    model, x, mask = CachedByDefault().eval(), torch.randn(2, 4), torch.ones(2, 4)
    gm = graphopt.optimize(model, x=x, mask=mask, use_cache=False, stats=False).module
    built = wrapper.wrapper_of(gm)
    assert built is not None and built.guard[2] == wrapper.Constant(False)
    entered = _counted(built, gm)
    with torch.no_grad():
        fast = gm(use_cache=False, mask=mask, x=x)
        assert entered[0] == 1
        _assert_equal(fast, _node_by_node(gm, (x, mask, False)))
        torch.testing.assert_close(fast, model(x, mask, False))
        assert not built.matches((x, mask, True)) and not built.matches((x, mask, 0))
        with pytest.raises(GraphoptError):  # the graph was specialised to False
            gm(x=x, mask=mask, use_cache=True)
    assert entered[0] == 1


# ------------------------------------------ never slower than eager by design (#21)

def test_a_one_op_model_runs_one_python_frame_per_call():
    # eager runs nn.Module's call (2 frames) and forward; the wrapper costs less:
    # its generated entry alone, the guard and the straight line in it, with the
    # output returned as is (no pytree frames) and nothing of fx's machinery
    model, inputs, gm = _optimized("scalar_constants")
    built = wrapper.wrapper_of(gm)
    assert built.source.splitlines()[-1] == "    return add"
    assert built.guard_source.count(".shape ==") == len(inputs)
    assert "if not ((tensors(x)" in built.source  # the same checks, C++ first
    # the exact type is the C++ check's: Python asks it only in the fallback
    assert built.source.count("type_of(x) is Tensor") == 1
    assert "torch_add(x, " in built.source  # torch's binding, not the overload
    with torch.no_grad():
        gm(*inputs)
        assert _python_calls(gm, *inputs) == 1
        assert _python_calls(wrapper.Wrapper.__call__, gm, *inputs) == 2
        assert _python_calls(model, *inputs) == 3
        # the lambda, matches, the generated guard: no loop, no frame per input
        assert _python_calls(lambda: built.matches(inputs)) == 3


def test_hooks_and_autograd_are_honoured_by_the_direct_entry():
    _, inputs, gm = _optimized("mlp")
    entered = _counted(wrapper.wrapper_of(gm), gm)
    seen = []
    handle = gm.register_forward_hook(lambda m, a, out: seen.append(out))
    with torch.no_grad():
        out = gm(*inputs)  # nn.Module's call runs the hook, its forward the fast path
    handle.remove()
    assert len(seen) == 1 and seen[0] is out and entered[0] == 1
    with torch.enable_grad():
        assert gm(*inputs).requires_grad and entered[0] == 1  # weights need grad


def test_a_forward_replaced_by_hand_is_never_bypassed():
    _, inputs, gm = _optimized("mlp")
    # fx's own class of this graph module (the wrapper patches none)
    type(gm.graph_module).forward = lambda self, x: x * 0  # not through recompile
    with torch.no_grad():
        assert torch.equal(gm(*inputs), inputs[0] * 0)
    assert wrapper.wrapper_of(gm) is None


def test_an_input_named_like_a_builtin_keeps_the_guard_working():
    """The guard is generated Python: an input named `type` must not shadow the
    builtin it calls (fx renames such a placeholder `type_1`; the guard binds its
    own helpers under names apart as well)."""
    class M(torch.nn.Module):
        def forward(self, type):
            return torch.relu(type) * 2.0

    x = torch.randn(4, 8)
    gm = graphopt.optimize(M(), x, stats=False).module
    built = wrapper.wrapper_of(gm)
    assert built is not None and built.check(x)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), M()(x))
        assert not built.check(torch.randn(4, 9))  # another shape: general path


# ------------------------------ fused groups called straight from the wrapper (#21)

def _fused_groups(gm):
    return [m for m in gm.modules() if isinstance(m, GeneratedKernel)]


def _counts(gm, inputs):
    with torch.no_grad():
        r = graphopt.run(gm, *inputs)
    return r.kernels, r.bytes_moved, r.peak_bytes


@pytest.mark.parametrize("name", ["add_mul", "mlp"])
def test_tiny_models_answer_alike_on_the_direct_path(name):
    model, inputs, gm = _optimized(name)
    counts = _counts(gm, inputs)
    reference = _node_by_node(gm, inputs)
    other = tuple(t.t().contiguous().t() for t in inputs)  # other strides: general
    assert not wrapper.wrapper_of(gm).matches(other)
    with torch.no_grad():
        for args in (inputs, inputs, random_like(inputs, seed=5), other):
            torch.testing.assert_close(gm(*args), model(*args), rtol=1e-5, atol=1e-6)
        _assert_equal(gm(*inputs), reference)
        _assert_equal(gm(*inputs), reference)
    with torch.enable_grad():  # grad mode: add_mul's fast path, mlp's weights record
        torch.testing.assert_close(gm(*inputs), model(*inputs), rtol=1e-5, atol=1e-6)
        wanting = tuple(t.clone().requires_grad_() for t in inputs)
        gm(*wanting).sum().backward()  # autograd: the general path, with gradients
        expected = tuple(t.clone().requires_grad_() for t in inputs)
        model(*expected).sum().backward()
    for a, b in zip(wanting, expected):
        torch.testing.assert_close(a.grad, b.grad)
    assert _counts(gm, inputs) == counts  # what the interpreter counts is unchanged


def test_a_fused_group_is_one_direct_call_of_its_plan():
    _, inputs, gm = _optimized("add_mul")
    built = wrapper.wrapper_of(gm)
    (group,) = _fused_groups(gm)
    assert built.direct == 1 and built.calls["k_fused_mul"] is not group.forward
    with torch.no_grad():
        gm(*inputs)
        # entry, guard, function, the bound call, then the plan's own few frames:
        # through FusedElementwise.forward and run_fused's signature it was 27
        assert _python_calls(gm, *inputs) <= 16
        assert kernels_for(group, inputs) == 1 and _counts(gm, inputs)[0] == 1
        # what ran is read off the plan: no call writes a flag into the module
        assert "_graphopt_ran" not in vars(group)


def test_inference_mode_gets_a_plan_of_its_own():
    model, inputs, gm = _optimized("add_mul")
    with torch.inference_mode():  # bound first here: pooled inference tensors
        _assert_equal(gm(*inputs), model(*inputs))
    with torch.no_grad():
        out = gm(*inputs)
        assert not out.is_inference()  # else no in-place write outside the mode
        out.add_(1)


def test_the_direct_call_follows_a_backend_switched_by_hand():
    model, inputs, gm = _optimized("add_mul")
    (group,) = _fused_groups(gm)
    with torch.no_grad():
        gm(*inputs)
        group.backend = "reference"  # chapter 6 switches a group to its eager ops
        _assert_equal(gm(*inputs), model(*inputs))
        assert plan_kind(group, inputs) == "reference"  # its eager ops ran
        assert _counts(gm, inputs)[0] == 2
        del group.backend
        gm(*inputs)
        assert plan_kind(group, inputs) != "reference"
        assert _counts(gm, inputs)[0] == 1


class ScaleShift(nn.Module):
    """A fused group that reads weights: x * scale + shift, then relu."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(8) + 0.5)
        self.shift = nn.Parameter(torch.randn(8))

    def forward(self, x):
        return torch.relu(x * self.scale + self.shift)


def test_a_weight_that_changes_dtype_behind_the_guard_is_replanned():
    model, x = ScaleShift().eval(), torch.randn(4, 8)
    gm = graphopt.optimize(model, x, stats=False).module
    assert wrapper.wrapper_of(gm).direct == len(_fused_groups(gm)) == 1
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x))
        for p in gm.parameters():  # the guard checks inputs, not weights
            p.data = p.data.double()
        want = torch.relu(x * model.scale.double() + model.shift.double())
        with pytest.warns(graphopt.codegen.KernelFallbackWarning):
            torch.testing.assert_close(gm(x), want)


def test_a_dtype_change_through_to_drops_the_fast_path():
    """`.double()` converts every weight behind the input guard, and the function was
    written for float32 weights (BERT's then raised in its attention); `.float()`
    and `.to("cpu")` change nothing, and keep it."""
    model, inputs = example("bert", seq_len=16)
    gm = graphopt.optimize(model, *inputs, stats=False).module
    with torch.no_grad():
        gm(*inputs)
        assert gm.float().to("cpu") is gm and wrapper.wrapper_of(gm) is not None
        want = copy.deepcopy(model).double()(*inputs)[0]
        got = _flat(gm.double()(*inputs))[0]
    assert wrapper.wrapper_of(gm) is None and type(gm) is wrapper.Wrapper
    assert got.dtype is torch.float64
    torch.testing.assert_close(got, want)


def test_the_pools_one_loop_check_agrees_with_unshared():
    from graphopt.codegen import launch
    pool = launch.OutputPool([(4,), (2, 2)], torch.float32, "cpu")
    bufs, _ = pool.take()
    assert not launch._free(pool.bufs, pool._base)  # `bufs` holds them
    assert launch._free(pool.bufs, pool._base) == launch.unshared(pool.bufs, True)
    del bufs
    assert launch._free(pool.bufs, pool._base) and launch.unshared(pool.bufs, True)
    view = pool.bufs[1][0]
    assert not launch._free(pool.bufs, pool._base)  # a view still sees the buffer
    del view
    assert pool.take()[0][0] is pool.bufs[0] and pool.reused == 1


def test_optimize_reads_the_graph_of_an_optimized_module():
    """A Wrapper given back to optimize (the explorer chains passes so) is its graph
    module, not a model to capture again (which would trace the fast path)."""
    model, inputs = example("basic_block")
    first = graphopt.optimize(model, *inputs).module
    assert wrapper.wrapper_of(first) is not None
    again = graphopt.optimize(first, *inputs, passes=[], stats=False).module
    assert getattr(again, "graph_module", again).code == first.graph_module.code


# ------------------------------------- the guard's one C++ check of every tensor

def _three_inputs():
    model, inputs, gm = _optimized("add_mul")
    return model, inputs, gm, wrapper.wrapper_of(gm)


def test_the_guard_checks_every_tensor_in_one_call_and_falls_back_in_python():
    _, inputs, gm, built = _three_inputs()
    assert "tensors(x, y, w)" in built.guard_source  # one C++ call for all three
    assert built.source.count(".shape ==") == len(inputs)  # the Python fallback
    x, y, w = inputs
    with torch.inference_mode():  # other dispatch keys: C++ says no, Python yes
        assert built.matches((x, y, w))
        inference = torch.randn(x.shape)
    assert built.matches((inference, y, w))


@pytest.mark.parametrize("other", [2.0, None, "x", torch.randn(1, 4)])
def test_a_non_tensor_or_another_shape_gets_the_general_paths_error(other):
    _, (x, y, w), gm, built = _three_inputs()
    entered = _counted(built, gm)
    with torch.no_grad():
        assert not built.matches((other, y, w))
        with pytest.raises(Exception) as general:
            wrapper.general(gm)(other, y, w)
        with pytest.raises(type(general.value)):
            gm(other, y, w)
    assert entered[0] == 0


@pytest.mark.parametrize("case", ["stride", "requires_grad", "dtype", "subclass"])
def test_an_input_the_guard_refuses_takes_the_general_path(case):
    model, inputs, gm, built = _three_inputs()
    entered = _counted(built, gm)
    x, y, w = inputs
    other = {"stride": lambda: torch.randn(x.shape[::-1]).t(),
             "requires_grad": lambda: x.clone().requires_grad_(),
             "dtype": lambda: x.double(),
             "subclass": lambda: nn.Parameter(x.clone(), requires_grad=False)}[case]()
    if case == "stride":
        assert other.shape == x.shape and other.stride() != x.stride()
    with torch.enable_grad():
        out = gm(other, y, w)
        assert out.requires_grad == (case == "requires_grad")
        if case == "requires_grad":  # autograd recorded it: gradients flow
            out.sum().backward()
            again = other.detach().requires_grad_()
            model(again, y, w).sum().backward()
            torch.testing.assert_close(other.grad, again.grad)
    torch.testing.assert_close(out, model(other, y, w))
    assert entered[0] == 0
    with torch.no_grad():  # under no_grad a tensor needing grad is fine as it is
        gm(other, y, w)
    assert entered[0] == (case == "requires_grad")


def test_without_the_cpp_check_the_guard_is_the_python_one(monkeypatch):
    from graphopt.backend import guard

    monkeypatch.setattr(guard, "tensor_guards", lambda records: None)
    model, inputs, gm, built = _three_inputs()
    assert "tensors(" not in built.source and "x.shape == " in built.source
    x, y, w = inputs
    with torch.no_grad():
        _assert_equal(gm(*inputs), model(*inputs))
        assert not built.matches((x.double(), y, w))
        assert built.matches(inputs)


# ----------------- torch's Python bindings call the very overload the graph names

class _Seen(TorchDispatchMode):
    """Records each aten overload that runs."""

    def __init__(self, seen):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("overload", sorted(BINDINGS, key=str))
def test_each_binding_dispatches_to_its_overload(overload):
    function, keywords = BINDINGS[overload]
    x, y, n = torch.randn(3, 4), torch.randn(3, 4), torch.arange(12).view(3, 4)
    cases = [(x,)] if overload == torch.ops.aten.relu.default else [
        (x, y), (x, 2.0), (x, 3), (n, 2.5), (n, 2)]
    for args in cases:
        kwargs = {k: 2 for k in keywords}
        seen = []
        with _Seen(seen):
            ours = function(*args, **kwargs)
        assert seen == [overload], (args, seen)
        theirs = overload(*args, **kwargs)
        assert torch.equal(ours, theirs) and ours.dtype == theirs.dtype


# ---------------------- a group left on its own ops is written into the function

def test_a_group_on_its_own_ops_is_written_inline_and_its_backend_checked():
    model, inputs, gm = _optimized("add_mul")
    (group,) = _fused_groups(gm)
    group.eager_why = "few elements"  # as `lower` decides on small sizes
    gm = wrapper.install(gm)
    built = wrapper.wrapper_of(gm)
    assert "k_fused" not in built.source and built.direct == 1
    assert "torch_add(x, y)" in built.source and "torch_mul(" in built.source
    assert "group_fused_mul.backend == 'auto'" in built.source
    with torch.no_grad():
        gm(*inputs)
        assert _python_calls(gm, *inputs) == 1  # its entry alone: no group call
    entered = _counted(built, gm)
    with torch.no_grad():
        _assert_equal(gm(*inputs), model(*inputs))
        assert entered[0] == 1
        for backend, kernels in (("reference", 2), ("numba", 1)):
            group.backend = backend  # chapter 6's switch: the general path obeys
            _assert_equal(gm(*inputs), _node_by_node(gm, inputs))
            assert entered[0] == 1 and _counts(gm, inputs)[0] == kernels
        del group.backend
        gm(*inputs)
    assert entered[0] == 2


class ScaledSum(nn.Module):
    """A group with a Python number and a list among its ops' arguments."""

    def forward(self, x, y):
        return torch.sum(torch.relu(x * 2.5 + y), dim=[1], keepdim=True)


@pytest.mark.parametrize("name", ["scaled_sum", "shape_loop"])
def test_any_group_on_its_own_ops_answers_alike_inline(name):
    if name == "scaled_sum":
        model, inputs = ScaledSum().eval(), (torch.randn(4, 8), torch.randn(4, 8))
        gm = graphopt.optimize(model, *inputs, stats=False).module
    else:
        model, inputs, gm = _optimized(name)
    for group in _fused_groups(gm):
        group.eager_why = "few elements"
    gm = wrapper.install(gm)
    built = wrapper.wrapper_of(gm)
    with torch.no_grad():
        _assert_equal(gm(*inputs), _node_by_node(gm, inputs))
        torch.testing.assert_close(gm(*inputs), model(*inputs))
    assert built.source.count(".backend == 'auto'") == len(_fused_groups(gm)) > 0
