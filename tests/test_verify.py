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
