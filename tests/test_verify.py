"""verify.equivalent: dtype-aware numerical equivalence of two graphs or models."""

import pytest
import torch

from graphopt import errors
from graphopt.verify import (
    Float64Reference,
    equivalent,
    float64_twin,
    mismatch,
    random_like,
)


def test_same_function_is_equivalent():
    x = torch.randn(4, 4)
    assert equivalent(torch.relu, lambda t: t.clamp(min=0), (x,))


def test_different_values_are_not_equivalent_and_can_raise():
    x = torch.randn(4, 4)
    assert not equivalent(torch.relu, torch.sigmoid, (x,))
    with pytest.raises(errors.NotEquivalentError, match="output 0: max abs difference"):
        equivalent(torch.relu, torch.sigmoid, x, raise_on_mismatch=True)


def test_float32_tolerates_reassociation_but_not_real_errors():
    x = torch.randn(64, 64)
    assert equivalent(lambda t: t * 3.0, lambda t: (t * 1.5) * 2.0, (x,))
    assert equivalent(lambda t: t, lambda t: t * (1 + 1e-6), (x,))
    assert not equivalent(lambda t: t, lambda t: t * (1 + 1e-2), (x,))


def test_tolerance_depends_on_dtype():
    x = torch.randn(64)
    bump = lambda t: t * (1 + 3e-3)  # noqa: E731
    assert equivalent(lambda t: t, bump, (x.half(),))
    assert not equivalent(lambda t: t, bump, (x.float(),))
    assert not equivalent(lambda t: t, lambda t: t * (1 + 1e-6), (x.double(),))


def test_integers_must_match_exactly():
    x = torch.arange(10)
    assert equivalent(lambda t: t + 1, lambda t: 1 + t, (x,))
    assert not equivalent(lambda t: t + 1, lambda t: t + 2, (x,))


def test_shape_dtype_and_structure_mismatches_are_named():
    a = torch.zeros(2, 3)
    assert "shapes differ" in mismatch(a, torch.zeros(3, 2))
    assert "dtypes differ" in mismatch(a, a.double())
    assert "structure" in mismatch((a, a), (a,))
    assert mismatch((a, [a]), (a, [a])) is None


def test_nan_in_both_outputs_is_equal():
    x = torch.tensor([1.0, float("nan")])
    assert equivalent(lambda t: t * 1, lambda t: t + 0, (x,))


def test_bad_inputs_get_a_clear_error():
    with pytest.raises(errors.InputError, match="sequence of tensors"):
        equivalent(torch.relu, torch.relu, 3)


def test_random_like_is_fresh_and_deterministic():
    inputs = (torch.zeros(2, 3), torch.zeros(4, dtype=torch.int64))
    a, b = random_like(inputs, seed=3), random_like(inputs, seed=3)
    assert [t.shape for t in a] == [t.shape for t in inputs]
    assert [t.dtype for t in a] == [t.dtype for t in inputs]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], inputs[0])


def test_random_like_keeps_token_ids_and_masks_valid():
    ids = torch.tensor([[101, 7, 2000, 102]])
    mask = torch.tensor([[1, 1, 1, 0]])
    fmask, bmask = mask.float(), mask.bool()
    image = torch.rand(2, 3)  # non-negative floats stay in [min, max]
    new_ids, new_mask, new_f, new_b, new_img = random_like((ids, mask, fmask, bmask,
                                                            image), seed=3)
    assert new_ids.dtype == torch.long and int(new_ids.min()) >= 7
    assert int(new_ids.max()) <= 2000 and not torch.equal(new_ids, ids)
    assert set(new_mask.unique().tolist()) <= {0, 1} and new_mask.dtype == mask.dtype
    assert set(new_f.unique().tolist()) <= {0.0, 1.0} and new_f.dtype == torch.float32
    assert new_b.dtype == torch.bool
    assert float(new_img.min()) >= float(image.min())
    assert float(new_img.max()) <= float(image.max())
    assert random_like({"input_ids": ids}, seed=3)["input_ids"].shape == ids.shape


def test_equivalent_runs_both_sides_from_the_same_state():
    from torch import nn

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls.add_(1)
            return torch.nn.functional.dropout(x, 0.5) * self.calls

    a, b, rng = Noisy(), Noisy(), torch.get_rng_state()
    assert equivalent(a, b, torch.ones(8, 8))  # same seed, same step
    assert a.calls.item() == 0 and torch.equal(torch.get_rng_state(), rng)
    assert equivalent(a, b, {"x": torch.ones(2)})


# ------------------------------------------------ float64 as the reference (#21)

def test_float64_twin_casts_weights_constants_and_named_dtypes():
    from torch import nn

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.offset = torch.ones(3)  # a plain tensor attribute: a constant

        def forward(self, x, ids):
            ones = torch.ones(3, dtype=torch.float32)
            return self.lin(x) + self.offset + ones, ids + 1

    gm = torch.fx.symbolic_trace(Mixed())
    twin = float64_twin(gm)
    x, ids = torch.randn(2, 3), torch.arange(3)
    out, out_ids = twin(x.double(), ids)
    assert out.dtype is torch.float64 and out_ids.dtype is torch.int64
    assert next(gm.parameters()).dtype is torch.float32  # the original untouched
    torch.testing.assert_close(out.float(), gm(x, ids)[0])


def test_a_graph_that_draws_random_numbers_has_no_float64_twin():
    gm = torch.fx.symbolic_trace(
        lambda x: torch.nn.functional.dropout(x, 0.5, training=True))
    assert float64_twin(gm) is None
    x = torch.randn(4)
    assert Float64Reference(gm).recheck(0, (x,), x, "as today") == "as today"
    evaluating = torch.fx.symbolic_trace(  # eval-mode dropout draws nothing
        lambda x: torch.nn.functional.dropout(x, 0.5, training=False))
    assert float64_twin(evaluating) is not None


def test_recheck_allows_what_eager_float32_gets_wrong_and_no_more():
    # x + 3000 - 3000 rounds at the scale of 3000 in float32 (some 1e-4 off)
    gm = torch.fx.symbolic_trace(lambda x: (x + 3000.0) - 3000.0)
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    truth = Float64Reference(gm)
    assert truth.recheck(0, (x,), x.clone(), "differs") is None  # exact: fine
    off = truth.recheck(0, (x,), x + 1e-2, "differs")
    assert off.startswith("output 0: 0.01 from float64")
    assert "eager float32 is at most" in off


def test_recheck_compares_integer_outputs_with_eager_exactly():
    gm = torch.fx.symbolic_trace(lambda x, ids: (x * 2, ids + 1))
    x, ids = torch.randn(3), torch.arange(3)
    truth = Float64Reference(gm)
    assert truth.recheck(0, (x, ids), (x * 2, ids + 1), "?") is None
    assert "integer" in truth.recheck(0, (x, ids), (x * 2, ids + 2), "?")
