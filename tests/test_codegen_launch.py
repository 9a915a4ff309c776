"""Cheap fused calls: plans made once, outputs reused only when safe (chapter 6)."""

import weakref

import pytest
import torch
from torch import fx

import graphopt
from graphopt import codegen
from graphopt.codegen import GeneratedKernel, calibrate, launch, lower
from graphopt.passes import fuse_elementwise
from graphopt.policy import Policy


def lowered(gm, policy=None):
    """fuse_elementwise, then `lower`: each group's node runs its generated kernel."""
    return lower(fuse_elementwise(gm).module, policy=policy).module


def chain(x, y):
    return torch.relu(x * 2.0 + y).abs()


@pytest.fixture
def kernel():
    return codegen.compile_group(fx.symbolic_trace(chain), backend="numba")


def test_one_plan_per_signature(kernel):
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    kernel(x, y)
    kernel(x + 1, y)  # same signature: same plan
    assert len(kernel._plans) == 1
    kernel(torch.randn(4, 5), torch.randn(4, 5))
    kernel(x.t().contiguous().t(), y)  # other strides: a new plan
    assert len(kernel._plans) == 3


def test_an_output_the_caller_holds_is_never_overwritten(kernel):
    x, y = torch.randn(64, 33), torch.randn(64, 33)
    first = kernel(x, y)
    keep = first.clone()
    second = kernel(x * -1.0, y)
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, keep)


@pytest.mark.parametrize("hold", ["view", "numpy", "storage", "weakref", "alias"])
def test_any_remaining_reference_blocks_reuse(kernel, hold):
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    out = kernel(x, y)
    keep = out.clone()
    held = {"view": lambda t: t[1:], "numpy": lambda t: t.numpy(),
            "storage": lambda t: t.untyped_storage(), "weakref": weakref.ref,
            "alias": lambda t: [t]}[hold](out)
    ptr = out.data_ptr()
    del out
    again = kernel(x * 3.0, y)
    assert again.data_ptr() != ptr  # a new buffer: the old one is still visible
    if hold == "view":
        assert torch.equal(held, keep[1:])
    del held


def test_a_dropped_output_is_reused(kernel):
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    ptr = kernel(x, y).data_ptr()
    again = kernel(x, y)
    (plan,) = kernel._plans.values()
    assert again.data_ptr() == ptr and plan.pool.reused >= 1
    torch.testing.assert_close(again, chain(x, y))


def test_fused_node_in_a_graph_reuses_and_stays_correct():
    class M(torch.nn.Module):
        def forward(self, x, b):
            return torch.sigmoid(torch.relu(x * 3.0 + b)) * 2.0 + 1.0

    x, b = torch.randn(32, 64), torch.randn(64)
    # b is broadcast (a strided operand): a policy that lets it run the kernel
    policy = Policy(strided_kernels=True)
    fused = lowered(graphopt.capture(M(), x, b), policy=policy)
    results = [fused(x + k, b) for k in range(4)]  # all held: none overwritten
    for k, r in enumerate(results):
        torch.testing.assert_close(r, M()(x + k, b))
    assert len({r.data_ptr() for r in results}) == 4


def test_the_default_policy_never_calibrates(monkeypatch):
    """Under the fixed policy the eager-below size and the parallel threshold are
    constants; a measured policy reads its record, never the calibration itself."""
    from graphopt import policy

    def refuse(*a, **k):
        raise AssertionError("the fixed policy must not measure")
    monkeypatch.setattr(calibrate, "calibration", refuse)
    assert codegen.min_numel() == policy.MIN_NUMEL
    assert policy.DEFAULT.loop_parallel_numel() == policy.PARALLEL_NUMEL
    x = torch.randn(4, 8)
    fused = lowered(graphopt.capture(lambda t: torch.relu(t * 3.0) + 1.0, x))
    assert graphopt.run(fused, x).kernels == 1  # flat inputs: the kernel
    measured = Policy.measured({"min_numel": 4096, "parallel_numel": 1 << 18})
    assert codegen.min_numel(measured) == 4096  # the record, no calibration run
    assert measured.loop_parallel_numel() == 1 << 18
    assert codegen.min_numel(Policy.measured()) == policy.MIN_NUMEL  # not recorded


def test_calibration_path_can_be_set(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHOPT_CALIBRATION", str(tmp_path / "c.json"))
    assert calibrate._path() == tmp_path / "c.json"


def test_calibration_is_measured_cached_and_consistent(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibrate, "SIZES", (1, 64, 4096))
    monkeypatch.setattr(calibrate, "_MEMO", {})
    c = calibrate.calibration()
    assert (tmp_path / "graphopt_calibration.json").exists()
    assert len(c.eager_us) == len(c.serial_us) == len(c.parallel_us) == 3
    assert all(t > 0 for t in c.eager_us + c.serial_us + c.parallel_us)
    # the sizes follow from the timings by the documented rule
    assert c == calibrate._decide({"eager": list(c.eager_us),
                                   "serial": list(c.serial_us),
                                   "parallel": list(c.parallel_us)})
    monkeypatch.setattr(calibrate, "_MEMO", {})
    assert calibrate.calibration() == c  # read back from disk, not measured again


def test_decide_rule():
    rows = {"eager": [10, 10, 10, 50], "serial": [5, 12, 8, 40],
            "parallel": [30, 30, 9, 20]}
    c = calibrate._decide(rows)
    assert c.min_numel == 0  # the kernel already wins on one element
    assert c.parallel_numel == calibrate.SIZES[3]
    rows = {"eager": [4, 4, 10, 50], "serial": [5, 5, 8, 40],
            "parallel": [30, 30, 9, 20]}
    assert calibrate._decide(rows).min_numel == calibrate.SIZES[2]


def test_auto_below_threshold_runs_reference_and_counts_eager_kernels():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 3.0) + 1.0

    x = torch.randn(4, 8)
    fused = lowered(graphopt.capture(M(), x), policy=Policy(min_numel=10_000))
    (group,) = [m for m in fused.modules() if isinstance(m, GeneratedKernel)]
    assert graphopt.run(fused, x).kernels == 3  # the reference: three eager ops
    assert codegen.kernel_of(group) is None     # nothing compiled for tiny inputs
    fused2 = lowered(graphopt.capture(M(), x), policy=Policy(min_numel=0))
    assert graphopt.run(fused2, x).kernels == 1


def test_unshared_baseline():
    pool = launch.OutputPool([(4,)], torch.float32, "cpu")
    bufs, arrays = pool.take()
    assert not launch.unshared(pool.bufs, True)  # `bufs` above still holds them
    del bufs, arrays
    assert launch.unshared(pool.bufs, True)


def test_measuring_leaves_the_kernel_cache_alone(monkeypatch):
    monkeypatch.setattr(calibrate, "SIZES", (1, 64))
    before = codegen.cache_info()
    calibrate.measure(rounds=1)
    assert codegen.cache_info() == before


def test_inference_mode_gets_its_own_plan(kernel):
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    with torch.inference_mode():
        kernel(x, y)
    out = kernel(x, y)  # outside inference mode: a normal tensor, usable in place
    out.add_(1.0)
    assert not out.is_inference()


def test_a_fused_node_holds_its_kernels_plan_and_forgets_it_on_clear_cache():
    """The node's cache (run the kernel or not) holds the Kernel's own plan (how),
    one object; `clear_cache` empties both, so the node plans and compiles again."""
    from graphopt.codegen import fused as fused_mod

    x = torch.randn(64, 32)
    gm = lowered(graphopt.capture(lambda t: torch.relu(t * 3.0) + 1.0, x),
                 policy=Policy(min_numel=0))
    (group,) = [m for m in gm.modules() if isinstance(m, GeneratedKernel)]
    gm(x)
    (node_plan,) = fused_mod._STATE[group].plans.values()
    (kernel_plan,) = codegen.kernel_of(group)._plans.values()
    assert node_plan is kernel_plan and node_plan.kind == "numba"
    codegen.clear_cache()
    torch.testing.assert_close(gm(x), torch.relu(x * 3.0) + 1.0)
    assert codegen.cache_info().misses == 1  # generated again for the node
    (again,) = fused_mod._STATE[group].plans.values()
    assert again is not node_plan
