"""verify.equivalent: dtype-aware numerical equivalence of two graphs or models."""

import pytest
import torch

from graphopt import errors
from graphopt.verify import equivalent, mismatch, random_like


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
