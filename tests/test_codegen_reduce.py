"""The row-reduction template: one kernel for elementwise -> reduction -> elementwise.

numba here; Triton with TRITON_INTERPRET=1 in a child process (set before triton is
imported), on tiny sizes. The legality rule is in graphopt.passes.row_reductions
(asked by passes.grouping); the kernels come from the `lower` stage.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import fx, nn

import graphopt
from graphopt import codegen
from graphopt.codegen import GeneratedKernel, lower
from graphopt.errors import UnsupportedOpError
from graphopt.passes import FusedElementwise, fuse_elementwise
from numerics import assert_near_truth

CHILD = os.environ.get("GRAPHOPT_REDUCE_CHILD") == "1"
BACKEND = "triton" if CHILD else "numba"
W, B = torch.randn(37, generator=torch.Generator().manual_seed(1)), \
    torch.randn(37, generator=torch.Generator().manual_seed(2))

CASES = {
    "softmax": lambda x: torch.softmax(x * 2.0, -1),
    "log_softmax": lambda x: F.log_softmax(x, dim=-1) + 1.0,
    "softmax_by_hand": lambda x: (x - x.amax(-1, keepdim=True)).exp()
    / (x - x.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True),
    "layer_norm": lambda x: F.layer_norm(torch.relu(x), [37], W, B, 1e-5) * 0.5,
    "rms_norm": lambda x: F.rms_norm(x, [37], W),
    "gelu_then_norm": lambda x: F.layer_norm(F.gelu(x), [37]),
    "sum_mean": lambda x: x.sum(-1, keepdim=True) * 2.0 - x.mean(-1, keepdim=True),
    "max_min": lambda x: x - x.amax(-1, keepdim=True) + x.amin(-1, keepdim=True),
    "variance_by_hand": lambda x: (x - x.mean(-1, keepdim=True)) * torch.rsqrt(
        ((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + 1e-5),
}
# which one-pass merges each case must get (codegen.reduce_program.rewrite_online)
MERGED = {"softmax": "softmax_sum", "softmax_by_hand": "softmax_sum",
          "layer_norm": "welford_var", "variance_by_hand": "welford_var"}


def run_case(name, x, block=None):
    gm = fx.symbolic_trace(CASES[name])
    kernel = codegen.compile_group(gm, (x,), backend=BACKEND, block=block)
    got = kernel(x)
    assert kernel.backend == BACKEND
    # against float64 within the bound derived for each op (tests/numerics.py), not
    # against torch's float32 softmax / layer norm, which differ between CPUs
    assert_near_truth(got, gm, x)
    return kernel


@pytest.mark.skipif(CHILD, reason="numba only")
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(CASES)), st.lists(st.integers(1, 5), max_size=2),
       st.booleans())
def test_row_kernels_equal_torch(name, lead, transposed):
    x = torch.randn(*lead, 37)
    if transposed and lead:  # a non-contiguous input: read through its strides
        x = torch.randn(37, *lead).movedim(0, -1)
    kernel = run_case(name, x)
    if name in MERGED:
        assert MERGED[name] in [s.op for s in kernel.program.stmts]


@pytest.mark.parametrize("name", ["softmax", "max_min", "layer_norm", "log_softmax"])
def test_nan_and_infinities_behave_as_in_torch(name):
    x = torch.randn(5, 37)
    x[0, 3] = float("nan")      # NaN propagates through max, sum, norm
    x[1] = float("-inf")        # a fully masked row: torch gives NaN
    x[2, :5] = float("-inf")    # a partly masked row: finite
    x[3, 2] = float("inf")
    run_case(name, x, block=16)


@pytest.mark.skipif(CHILD, reason="numba only")
@pytest.mark.parametrize("name", ["softmax", "softmax_by_hand", "log_softmax"])
def test_online_softmax_across_blocks_keeps_torch_semantics(name):
    """Rows of 37 in blocks of 16: the running max and sum cross block borders."""
    x = torch.randn(9, 37) * 20
    x[0, :16] = float("-inf")                  # a masked first block, then finite
    x[1, :32] = float("-inf")                  # two masked blocks
    x[2, :16] = float("-inf")
    x[2, 5] = float("nan")                     # NaN in a masked block: row is NaN
    x[3] = torch.arange(37.0) * 10             # a new max in every block: rescales
    x[4] = -torch.arange(37.0) * 10            # the first block holds the max
    x[5, 36] = float("inf")                    # +inf in the last block: NaN row
    x[6] = float("-inf")
    x[6, 20] = float("nan")                    # only -inf and NaN
    x[7] = torch.linspace(-100, 100, 37)       # exp under- and overflow ranges
    run_case(name, x, block=16)


def test_long_rows_take_several_blocks():
    run_case("softmax", torch.randn(3, 1000) * 30, block=64)
    run_case("layer_norm", torch.randn(2, 37) * 1e3 + 1e4, block=16)  # Welford


@pytest.mark.skipif(CHILD, reason="numba only")
def test_a_softmax_group_is_one_kernel_with_a_one_pass_reduction():
    kernel = run_case("softmax", torch.randn(4, 37))
    src = kernel.source.split("def kernel_serial(")[0]  # the parallel variant
    assert src.count("def kernel(") == 1 and "EXP(" in src
    # float32: the vectorisable exp, not libm's scalar expf
    assert "import exp32 as EXP" in src and "math.exp" not in src
    # one reading pass (online softmax) plus the write pass
    assert src.count("for j0 in range(0, D,") == 1 and "for j in range(D):" in src
    assert "fastmath={'reassoc'}" in src and "nnan" not in src


@pytest.mark.skipif(CHILD, reason="numba only")
def test_reductions_not_over_the_last_dim_are_refused():
    with pytest.raises(UnsupportedOpError, match="last"):
        codegen.compile_group(fx.symbolic_trace(lambda x: x.sum(0, keepdim=True) + 1))
    with pytest.raises(UnsupportedOpError, match="keepdim"):
        codegen.compile_group(fx.symbolic_trace(lambda x: x.sum(-1) + 1))
    gm = fx.symbolic_trace(lambda x, y: (x * y).sum(-1, keepdim=True))
    kernel = codegen.compile_group(gm)  # y broadcasts along the row: legal
    x, y = torch.randn(3, 8), torch.randn(8)
    torch.testing.assert_close(kernel(x, y), gm(x, y))
    gm = fx.symbolic_trace(lambda x, y: x.sum(-1, keepdim=True) + y)
    with pytest.raises(UnsupportedOpError, match="full row"):
        codegen.compile_group(gm, (torch.randn(3, 1), torch.randn(3, 8)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.lin = nn.LayerNorm(64), nn.Linear(64, 64)

    def forward(self, x, r):
        h = self.ln(F.gelu(x) + r)
        return torch.softmax(self.lin(h) * 0.125, dim=-1) + 1.0


@pytest.mark.skipif(CHILD, reason="numba only")
@pytest.mark.parametrize("level", ["module", "aten"])
def test_fuse_elementwise_groups_norm_and_softmax_chains(level):
    x, r = torch.randn(2, 8, 64), torch.randn(2, 8, 64)
    model = Block().eval()
    gm = graphopt.capture(model, x, r, level=level)
    grouped = fuse_elementwise(gm).module
    groups = [m for m in grouped.modules() if isinstance(m, FusedElementwise)]
    assert [g.ops[-1].lower() for g in groups] == ["layernorm" if level == "module"
                                                   else "layer_norm", "add"]
    with torch.no_grad():  # by reference: gelu, add, norm; linear; mul, softmax, add
        torch.testing.assert_close(grouped(x, r), model(x, r))
        assert graphopt.run(grouped, x, r).kernels == 7
    fused = lower(grouped).module
    ops = [g.ops for g in groups]
    groups = [m for m in fused.modules() if isinstance(m, GeneratedKernel)]
    assert [g.ops for g in groups] == ops  # the same groups, each one kernel now
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fused(x, r), model(x, r))
        report = graphopt.run(fused, x, r)
    assert report.kernels == 3  # norm group, linear, softmax group
    assert all(codegen.kernel_of(g).backend == "numba" for g in groups)
    assert sum(p.numel() for p in model.parameters()) == \
        sum(p.numel() for p in Block().parameters())  # caller's model untouched


@pytest.mark.skipif(CHILD, reason="numba only")
def test_intermediate_read_outside_keeps_reduction_out():
    class M(nn.Module):
        def forward(self, x):
            y = x * 2.0
            return torch.softmax(y, -1) + y.sum()  # y.sum(): a full reduction

    x = torch.randn(4, 8)
    fused = fuse_elementwise(graphopt.capture(M(), x, level="aten")).module
    groups = [m.ops for m in fused.modules() if isinstance(m, FusedElementwise)]
    assert all("mul" not in g for g in groups)  # y has a reader outside: not fused
    torch.testing.assert_close(fused(x), M()(x))


@pytest.mark.skipif(CHILD, reason="this is the child")
def test_triton_row_kernels_in_interpreter_subprocess():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "GRAPHOPT_REDUCE_CHILD": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-W", "ignore::RuntimeWarning", __file__], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "5 passed" in r.stdout, r.stdout[-2000:]


@pytest.mark.skipif(CHILD, reason="numba only")
@pytest.mark.parametrize("threshold", ["serial", "measured", "parallel"])
def test_parallel_choice_never_changes_the_answer(monkeypatch, threshold):
    """The fixed policy splits rows from its row_parallel_numel (here forced to
    never, or always); the measured one, while it records, times both variants
    between its thresholds (on scratch outputs): the answer is the same in all
    three."""
    from graphopt.policy import Policy
    x = torch.randn(64, 37) * 5
    measured = Policy.measured({"parallel_numel": x.numel() * 2}).recording({})
    policy = {"serial": Policy(row_parallel_numel=1 << 40),
              "measured": measured,
              "parallel": Policy(row_parallel_numel=1)}[threshold]
    for name in ("softmax", "layer_norm"):
        gm = fx.symbolic_trace(lambda t: CASES[name](t) + 0.0)  # noqa: B023 (traced now)  # a fresh kernel
        kernel = codegen.compile_group(gm, (x,), backend="numba", policy=policy)
        for _ in range(2):  # the planned call and the next one
            assert_near_truth(kernel(x), gm, x)


@pytest.mark.skipif(CHILD, reason="numba only")
def test_the_fixed_policy_never_times_a_row_plan(monkeypatch):
    """Default policy: serial or parallel rows follow the element count alone."""
    import numba

    from graphopt.codegen import reduce_cpu
    from graphopt.policy import ROW_PARALLEL_NUMEL

    def refuse(runs, rounds):
        raise AssertionError("the fixed policy must not time anything")
    monkeypatch.setattr(reduce_cpu, "fastest", refuse)
    for rows in (64, ROW_PARALLEL_NUMEL // 32):
        x = torch.randn(rows, 32)
        gm = fx.symbolic_trace(lambda t: CASES["softmax"](t) + 2.0)
        kernel = codegen.compile_group(gm, (x,), backend="numba")
        assert_near_truth(kernel(x), gm, x)
        (plan,) = kernel._plans.values()
        big = x.numel() >= ROW_PARALLEL_NUMEL and numba.get_num_threads() > 1
        assert plan.parallel == big


@pytest.mark.skipif(CHILD, reason="numba only")
@pytest.mark.parametrize("winner", ["serial", "parallel"])
def test_a_measured_row_plan_runs_the_variant_that_won(monkeypatch, winner):
    """A measured policy that records (as `graphopt.tuning.tune` does) times both
    variants between parallel_numel / 64 and parallel_numel (calibrate.fastest)
    and writes the verdict, forced here both ways, into its record; a policy made
    from that record plans the same variant without timing anything."""
    import numba
    import torch.fx as tfx

    from graphopt.codegen import reduce_cpu
    from graphopt.policy import Policy
    if numba.get_num_threads() < 2:
        pytest.skip("one thread: the plan never times a parallel variant")
    x = torch.randn(64, 37) * 5
    sizes = {"parallel_numel": x.numel() * 2}
    record = dict(sizes)
    timed = []

    def forced(runs, rounds):
        timed.append(sorted(runs))
        return {"serial": 1.0, "parallel": 2.0} if winner == "serial" else \
            {"serial": 2.0, "parallel": 1.0}
    monkeypatch.setattr(reduce_cpu, "fastest", forced)
    gm = tfx.symbolic_trace(lambda t: CASES["softmax"](t) + 1.0)  # a fresh kernel
    kernel = codegen.compile_group(gm, (x,), backend="numba",
                                   policy=Policy.measured(sizes).recording(record))
    for _ in range(2):
        assert_near_truth(kernel(x), gm, x)
    assert timed == [["parallel", "serial"]]  # planned once per signature
    (plan,) = kernel._plans.values()
    assert plan.parallel == (winner == "parallel")
    threads = numba.get_num_threads()
    assert record == {**sizes, f"rows_parallel {x.numel()} 64 {threads}":
                      winner == "parallel"}
    replay = codegen.compile_group(gm, (x,), backend="numba",
                                   policy=Policy.measured(record))
    assert_near_truth(replay(x), gm, x)
    (plan,) = replay._plans.values()
    assert plan.parallel == (winner == "parallel") and len(timed) == 1
