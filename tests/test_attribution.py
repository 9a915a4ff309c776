"""peers.attribution: the backend taken apart one mechanism at a time, and the split.

Counts and equivalence, never a timing: the arithmetic of `split` is checked on
hand-made timings.
"""

import pytest
import torch

import graphopt
from graphopt import models
from graphopt.backend import onednn_capi
from graphopt.errors import InputError
from graphopt.measure.report import Comparison, from_times
from graphopt.passes.fused_modules import ConvAddReLU
from graphopt.passes.prepacked import Prepacked
from graphopt.peers import attribution as at

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                reason="the backend's kernels need oneDNN")


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(0)
    model, inputs = models.example("small_resnet")
    return model, inputs, graphopt.optimize(model, *inputs)


def test_every_link_computes_the_model(block):
    model, inputs, result = block
    chain = at.variants(result)
    assert list(chain)[0] == "captured"
    assert list(chain)[-5:] == ["library kernels", "prepacked weights",
                                "post-ops fused", "backend, fx forward", "backend"]
    assert "fold_conv_bn" in chain and "fuse_patterns" in chain
    with torch.no_grad():
        want = model(*inputs)
        for label, fn in chain.items():
            torch.testing.assert_close(fn(*inputs), want, rtol=1e-4, atol=1e-4,
                                       msg=label)


def test_post_ops_unfused_launch_one_more_kernel_per_activation(block):
    _, inputs, result = block
    chain = at.variants(result)
    fused = graphopt.run(chain["backend, fx forward"], *inputs)
    unfused = graphopt.run(chain["prepacked weights"], *inputs)
    plain = graphopt.run(chain["library kernels"], *inputs)
    onednn = [m for m in result.module.modules()
              if getattr(m, "kernel", "") == "onednn"]
    # a ConvAddReLU's add and ReLU run after its conv: two kernels more;
    # a ConvReLU's or LinearReLU's activation: one more (none for "none")
    extra = sum(2 if isinstance(m, ConvAddReLU) else m.act.attr != "none"
                for m in onednn)
    assert extra > 0
    assert unfused.kernels == fused.kernels + extra
    assert plain.kernels == unfused.kernels          # the same kernels, plain weights
    # torch's mkldnn ops for the primitives made once: the same kernels
    assert graphopt.run(chain["post-ops fused"], *inputs).kernels == fused.kernels


def test_post_ops_fused_runs_torchs_ops_not_the_primitives(block):
    _, inputs, result = block
    chain = at.variants(result)
    with torch.no_grad():
        chain["post-ops fused"](*inputs)
        chain["backend, fx forward"](*inputs)
    made = [getattr(m, "_primitive", None) is not None
            for m in chain["post-ops fused"].modules() if hasattr(m, "_primitive")]
    direct = [getattr(m, "_primitive", None) is not None
              for m in chain["backend, fx forward"].modules()
              if hasattr(m, "_primitive")]
    assert not any(made)
    assert all(direct) == (not onednn_capi.why_unavailable())


def test_packs_dropped_only_in_the_copy(block):
    _, _, result = block
    chain = at.variants(result)
    def packed(gm):
        return [name for name, m in gm.named_modules()
                if isinstance(m, Prepacked) and m.is_prepacked]

    assert packed(result.module)
    assert packed(chain["prepacked weights"]) == packed(result.module)
    assert packed(chain["library kernels"]) == []


def test_variants_wants_the_backend_stage():
    model, inputs = models.example("small_resnet")
    result = graphopt.optimize(model, *inputs, passes=["fold_conv_bn"])
    with pytest.raises(InputError, match="backend stage"):
        at.variants(result)


def _comparison(rounds: dict[str, list[float]]) -> Comparison:
    timings = {k: from_times(k, v, "cpu", 1) for k, v in rounds.items()}
    return Comparison(timings, [], 1)


def test_split_by_hand():
    # quartiles (inclusive) of [9, 10, 11, 12, 13]: 10, 11, 12
    times = _comparison({"a": [9, 10, 11, 12, 13], "b": [6, 7, 8, 9, 10],
                         "c": [5.5, 6.5, 7.5, 8.5, 9.5]})
    first, second = at.split(times, ["a", "b", "c"])
    assert first.saved == pytest.approx(3 / 11)
    assert first.low == pytest.approx((10 - 9) / 11)      # q1(a) - q3(b)
    assert first.high == pytest.approx((12 - 7) / 11)     # q3(a) - q1(b)
    assert first.verdict == "saves"
    assert second.verdict == "within noise"
    assert second.verdict == "within noise" and times.below_noise("b", "c")
    assert at.total(times, "a", "c").saved == pytest.approx(3.5 / 11)
    with pytest.raises(InputError):
        at.split(times, ["a"])


def test_a_loss_is_a_cost():
    times = _comparison({"a": [1.0, 1.0, 1.0], "b": [2.0, 2.0, 2.0]})
    assert at.split(times, ["a", "b"])[0].verdict == "costs"


@pytest.mark.parametrize("low, high, where", [
    (0.22, 0.28, "within"), (0.35, 0.40, "above"), (0.05, 0.10, "below"),
    (0.15, 0.25, "not separable from")])
def test_against_range(low, high, where):
    step = at.Step("fusion", (low + high) / 2, low, high)
    assert at.against_range(step, 0.2, 0.3) == where


def test_largest_and_its_ties():
    a, b, c = (at.Step("a", 0.30, 0.25, 0.35), at.Step("b", 0.27, 0.20, 0.30),
               at.Step("c", 0.05, 0.0, 0.1))
    top, ties = at.largest([c, b, a])
    assert top is a and ties == [b]


def test_timed_is_a_comparison_with_conditions():
    def timer(calls):
        return [1e-3 * (1 + i % 3) for i in range(calls)]

    times = at.timed({"x": timer, "y": timer}, rounds=3, calls=3, threads=1)
    assert set(times) == {"x", "y"} and times["x"].rounds == 3
    assert times["x"].median == pytest.approx(2e-3)
    assert times.conditions.startswith("measured on ")
    assert at.mechanism("backend") == "wrapper (dispatch)"
    assert at.mechanism("fold_conv_bn") == "BN folding"
