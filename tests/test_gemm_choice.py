"""Which kernel runs a linear: the policy's GEMM rule, by shape and library (ch. 7).

`Policy.linear_kernel` decides from the linear's FLOPs, its activation and whether
MKL is installed, never from a timing: below `small_gemm_flops` MKL's GEMM (else
the eager ops); below `onednn_gemm_flops` MKL's GEMM, whose call is shorter; from
there oneDNN on its blocked prepacked weight with the bias and the activation as
post-ops, one kernel (`gemm_library="mkl"`: the earlier rule,
MKL's packed GEMM then torch's activation where MKL can take it). These tests hold
the rule, the bound kernels' results (against F.linear + bias + activation, QKV
fused included) and the kernels counted per linear.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphopt
from graphopt.backend import onednn
from graphopt.passes.fused_modules import LinearReLU
from graphopt.policy import DEFAULT, Policy, PolicyError

needs_onednn = pytest.mark.skipif(not onednn.available(), reason="no oneDNN")
needs_mkl = pytest.mark.skipif(not onednn.mkl_available(), reason="no MKL here")
BIG = DEFAULT.small_gemm_flops  # from here a linear is not "small"
HUGE = DEFAULT.onednn_gemm_flops  # from here oneDNN's post-ops beat MKL's shorter call


def _never():
    raise AssertionError("the fixed policy must not time anything")


# ------------------------------------------------------------------ the rule itself

@pytest.mark.parametrize("flops, act, mkl, want", [
    (BIG - 1, "none", True, ("mkl", "small")),
    (BIG - 1, "gelu", True, ("mkl", "small")),
    (BIG - 1, "relu", False, ("eager", "small")),
    (BIG, "none", True, ("mkl", "mid")),
    (HUGE - 1, "gelu", True, ("mkl", "mid")),
    (HUGE, "none", True, ("onednn", "fixed")),
    (HUGE, "gelu", True, ("onednn", "fixed")),
    (BIG, "relu", True, ("onednn", "fixed")),  # MKL cannot take ReLU as a post-op
    (BIG, "gelu", False, ("onednn", "fixed")),  # no MKL installed
    (None, "gelu", True, ("onednn", "fixed")),  # unknown size: no size rule
])
def test_default_rule_picks_by_size_and_library(flops, act, mkl, want):
    assert DEFAULT.gemm_library == "onednn"
    assert DEFAULT.linear_kernel(flops, act, mkl, timed=_never) == want


@pytest.mark.parametrize("flops, act, want", [
    (BIG - 1, "none", ("mkl", "small")),
    (BIG, "none", ("onednn", "made once")),
    (HUGE - 1, "gelu", ("onednn", "made once")),
    (HUGE, "none", ("onednn", "fixed")),
])
def test_a_primitive_made_once_takes_the_mid_band_from_mkl(flops, act, want):
    """MKL's call is shorter than torch's oneDNN op, not than a primitive made once
    (`backend.onednn_direct`): there oneDNN runs the band MKL took."""
    assert DEFAULT.linear_kernel(flops, act, True, timed=_never, made_once=True) == \
        want
    assert Policy(gemm_library="mkl").linear_kernel(
        BIG, act, True, timed=_never, made_once=True) == ("mkl", "fixed")


@pytest.mark.parametrize("flops, act, mkl, want", [
    (BIG, "none", True, ("mkl", "fixed")),
    (BIG, "gelu", True, ("mkl", "fixed")),
    (BIG, "relu", True, ("onednn", "fixed")),  # MKL cannot take ReLU as a post-op
    (BIG, "gelu", False, ("onednn", "fixed")),  # no MKL installed
    (BIG - 1, "relu", True, ("mkl", "small")),
])
def test_the_earlier_mkl_rule_is_a_setting(flops, act, mkl, want):
    assert Policy(gemm_library="mkl").linear_kernel(flops, act, mkl,
                                                    timed=_never) == want


def test_measured_policy_reads_its_record_and_a_bad_library_is_refused():
    key = "w(24, 16) x(2, 5, 16)"
    for answer, kernel in ((True, "mkl"), (False, "onednn")):
        policy = Policy.measured({f"mkl_faster {key}": answer})
        assert policy.linear_kernel(BIG, "gelu", True, timed=_never, key=key) == \
            (kernel, "measured")
    # a question the record lacks gets the fixed rule's answer
    assert Policy.measured().linear_kernel(HUGE, "none", True, key="other") == \
        ("onednn", "measured")
    assert Policy.measured().linear_kernel(BIG, "none", True, key="other") == \
        ("mkl", "measured")
    with pytest.raises(PolicyError, match="gemm_library must be one of"):
        Policy(gemm_library="openblas")
    assert Policy.from_json(Policy(gemm_library="mkl").to_json()).gemm_library == \
        "mkl"


# ------------------------------------------------- bound kernels: results, counts

class AttentionProjections(nn.Module):
    """Q, K, V from one input (fuse_qkv makes them one linear), an output
    projection, then a GELU feed-forward: BERT's linears (each from 2^24 FLOPs on
    128 rows, where the default rule binds oneDNN)."""

    def __init__(self, d: int = 256, ffn: int = 1024):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out, self.up, self.down = nn.Linear(d, d), nn.Linear(d, ffn), \
            nn.Linear(ffn, d)

    def forward(self, x):
        h = self.out(self.q(x) * self.k(x) + self.v(x))
        return self.down(F.gelu(self.up(h)))


def _linears(result) -> list[LinearReLU]:
    return [m for m in result.module.modules() if isinstance(m, LinearReLU)]


def _kernels_per_linear(result, x) -> dict[str, int]:
    report = graphopt.run(result.module, x)
    names = {n.name: n for n in report.nodes}
    return {name: node.kernels for name, node in names.items()
            if node.op in ("PackedLinear", "LinearReLU")}


@needs_onednn
@pytest.mark.parametrize("policy, gelu_kernels", [(None, 1), ("mkl", 2)])
def test_bound_linears_match_eager_with_fused_qkv_and_count_kernels(policy,
                                                                    gelu_kernels):
    torch.manual_seed(0)
    model, x = AttentionProjections().eval(), torch.randn(4, 32, 256)  # M = 128
    if policy == "mkl" and not onednn.mkl_available():
        pytest.skip("no MKL here")
    chosen = Policy(gemm_library=policy) if policy else None
    res = graphopt.optimize(model, x, policy=chosen, stats=False)
    assert any(n.startswith("fuse_qkv: ") and "(768 outputs)" in n for n in res.notes)
    linears = _linears(res)
    assert len(linears) == 4  # q, k, v as one; out; up + GELU; down
    with torch.no_grad():
        for seed in range(2):
            xi = torch.randn(4, 32, 256, generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(res.module(xi), model(xi), rtol=1e-4,
                                       atol=1e-5)
    gelu = next(m for m in linears if m.act.name == "gelu")
    plain = [m for m in linears if m.act.name == "none"]
    if policy is None:
        assert all(m.kernel == "onednn" and m.is_prepacked for m in linears)
        assert all("post-op" in m.why for m in linears)
    elif onednn.mkl_available():
        assert gelu.kernel == "mkl" and all(m.kernel == "mkl" for m in plain)
    counts = sorted(_kernels_per_linear(res, x).values())
    assert counts == sorted([1, 1, 1, gelu_kernels])


@needs_onednn
@pytest.mark.parametrize("act", ["none", "gelu", "relu", "gelu_tanh"])
def test_onednn_post_ops_equal_f_linear_bias_and_activation(act):
    """The one oneDNN call with the bias and `act` as post-ops gives F.linear +
    bias + act on 2-d and 3-d inputs, on the rows it was packed for and others."""
    from graphopt.passes import activations

    torch.manual_seed(3)
    w, b = torch.randn(96, 64) / 8, torch.randn(96)
    a = activations.ACTIVATIONS[act]
    packed = onednn.pack_linear_weight(w, 128)
    for x in (torch.randn(128, 64), torch.randn(4, 32, 64), torch.randn(7, 64)):
        want = a.eager(F.linear(x, w, b))
        weight = packed if x.shape[:-1].numel() == 128 else w
        torch.testing.assert_close(onednn.linear_act(x, weight, b, a), want,
                                   rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------- BERT, eval and train

@needs_onednn
def test_eval_bert_binds_onednn_per_linear_and_equals_eager():
    from graphopt import models

    model, (ids, mask) = models.example("bert", batch=2, seq_len=64)
    res = graphopt.optimize(model, ids, mask, check=True, stats=False,
                            keep_stages=False)
    linears = _linears(res)
    big = [m for m in linears if "FLOPs:" not in m.why]
    # 4 layers x (QKV, output, FFN up + GELU, FFN down) on 128 rows, each from
    # onednn_gemm_flops; the pooler (2 rows) is below small_gemm_flops
    assert len(linears) == 17 and len(big) == 16
    assert all(m.kernel == "onednn" and m.is_prepacked for m in big)
    assert sum(m.act.name == "gelu" for m in big) == 4
    notes = [n for n in res.notes if "runs oneDNN: oneDNN on its blocked" in n]
    assert len(notes) == 16
    with torch.no_grad():
        got, want = res.module(ids, mask), model(ids, mask)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)


@needs_onednn
def test_train_mode_bert_falls_back_to_eager_ops_with_gradients():
    """In training mode QKV stays apart (a note says why) and, while autograd
    records, every linear runs its eager ops (oneDNN's post-op kernel has no
    backward): gradients flow and equal eager's."""
    from graphopt import models

    model, (ids, mask) = models.example("bert", batch=1, seq_len=8)
    model.train()
    for m in model.modules():  # dropout off, so two runs can be compared
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    res = graphopt.optimize(model, ids, mask, stats=False, keep_stages=False)
    assert any("fuse_qkv: kept" in n and "training mode" in n for n in res.notes)
    assert any(n.startswith("backend: training mode: while autograd records")
               for n in res.notes)
    got = res.module(ids, mask)[0]
    got.sum().backward()
    mine = {k: p.grad.clone() for k, p in res.module.named_parameters()
            if p.grad is not None}
    model.zero_grad()
    model(ids, mask)[0].sum().backward()
    want = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    assert mine and len(mine) <= len(want)
    torch.testing.assert_close(got, model(ids, mask)[0], rtol=1e-4, atol=1e-4)
