"""Bad inputs get one clear graphopt error that says what to do (chapter 1)."""

import pytest
import torch
from torch import nn

import graphopt
from graphopt import errors, models
from graphopt.errors import CaptureError, GraphoptError, InputError, MissingDotError

LEVELS = ("aten", "module")


class DataDependentIf(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_one_exception_family():
    family = [CaptureError, InputError, MissingDotError, errors.UnsupportedOpError,
              errors.NoGPUError, errors.NotEquivalentError, errors.ShapeError]
    assert all(issubclass(e, GraphoptError) for e in family)
    assert issubclass(InputError, TypeError)  # callers catching TypeError still work


@pytest.mark.parametrize("level", LEVELS)
def test_data_dependent_branch_points_to_torch_cond_and_chapter_2(level):
    with pytest.raises(CaptureError) as info:
        graphopt.capture(DataDependentIf(), torch.randn(3), level=level)
    text = str(info.value)
    assert "torch.cond" in text and "chapter 2" in text
    assert info.value.__cause__ is None  # no torch traceback dumped on the learner


def test_failing_export_says_nothing_on_stderr(capfd):
    with pytest.raises(CaptureError):
        graphopt.capture(DataDependentIf(), torch.randn(3))
    assert "GuardOnDataDependent" not in capfd.readouterr().err


@pytest.mark.parametrize("level", LEVELS)
def test_other_capture_failures_say_what_to_try(level):
    class Broken(nn.Module):
        def forward(self, x):
            return x @ torch.ones(7, 7)  # wrong inner dimension

    with pytest.raises(CaptureError, match="runs eagerly") as info:
        graphopt.capture(Broken(), torch.randn(2, 3), level=level)
    assert "RuntimeError" in str(info.value)  # torch's own reason, in one line


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("bad", [3, 2.5, [1.0, 2.0], None])
def test_non_tensor_input_is_named_by_index(level, bad):
    match = r"example input 1 is a \w+, not a torch.Tensor"
    with pytest.raises(InputError, match=match):
        graphopt.capture(models.AddMul(), torch.randn(2), bad, torch.randn(2),
                         level=level)


@pytest.mark.parametrize("level", LEVELS)
def test_float64_input_to_a_float32_model_names_both_dtypes(level):
    with pytest.raises(InputError) as info:
        graphopt.capture(models.MLP(), torch.randn(2, 16, dtype=torch.float64),
                         level=level)
    text = str(info.value)
    assert "example input 0" in text
    assert "torch.float64" in text and "torch.float32" in text
    assert "x.to(torch.float32)" in text


def test_run_checks_inputs_too():
    model, (x,) = models.example("mlp")
    gm = graphopt.capture(model, x)
    with pytest.raises(InputError, match="example input 0 has dtype torch.float64"):
        graphopt.run(gm, x.double())
    with pytest.raises(InputError, match="example input 0 is a list"):
        graphopt.run(gm, x.tolist())


def test_integer_inputs_are_not_a_dtype_error():
    emb = nn.Embedding(10, 4)
    gm = graphopt.capture(emb, torch.tensor([1, 2, 3]))
    assert graphopt.run(gm, torch.tensor([1, 2, 3])).outputs.shape == (3, 4)


# ---------------------------------------------------------------- missing dot

@pytest.fixture
def no_dot(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no `dot` anywhere


def test_missing_dot_gives_an_install_hint(no_dot, tmp_path):
    model, (x,) = models.example("seed_conv_block")
    d = graphopt.draw(graphopt.capture(model, x, level="module"))
    with pytest.raises(MissingDotError) as info:
        d.svg()
    text = str(info.value)
    assert "apt-get install graphviz" in text and "conda install" in text
    assert "brew install graphviz" in text and "drawing.source" in text
    assert "conv" in d.source  # the DOT text needs no binary
    with pytest.raises(MissingDotError):
        d.render(tmp_path / "out", format="svg")  # graphviz writes the DOT file first


def test_notebook_display_falls_back_to_text(no_dot):
    d = graphopt.draw(graphopt.autograd_graph(torch.randn(3, requires_grad=True).sum()))
    bundle = d._repr_mimebundle_()
    assert list(bundle) == ["text/plain"]
    assert "apt-get install graphviz" in bundle["text/plain"]
    assert "SumBackward0" in bundle["text/plain"]


# ---------------------------------------------------------------- autograd graphs

@pytest.mark.parametrize("make", [
    lambda: torch.randn(3),                                   # nothing requires grad
    lambda: torch.randn(3, requires_grad=True),               # a leaf: no grad_fn yet
])
def test_autograd_graph_without_grad_fn(make):
    with pytest.raises(InputError, match="requires_grad=True"):
        graphopt.autograd_graph(make())


def test_autograd_graph_under_no_grad():
    w = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        y = (w * 2).sum()
    with pytest.raises(InputError, match="no_grad"):
        graphopt.autograd_graph(y)


def test_autograd_graph_wants_a_tensor():
    with pytest.raises(InputError, match="takes a tensor, not a float"):
        graphopt.autograd_graph(1.5)


def test_cache_output_gets_the_use_cache_hint():
    class DynamicCache:  # what Hugging Face returns with use_cache=True
        def __init__(self, t):
            self.t = t

    class GPT2Like(nn.Module):
        def forward(self, x, use_cache=True):
            return (x * 2, DynamicCache(x)) if use_cache else x * 2

    with pytest.raises(CaptureError) as info:
        graphopt.capture(GPT2Like(), torch.randn(2))
    assert "use_cache=False" in str(info.value) and info.value.__cause__ is None
    gm = graphopt.capture(GPT2Like(), torch.randn(2), use_cache=False)  # the fix works
    assert torch.equal(gm(torch.ones(2), use_cache=False), torch.full((2,), 2.0))


def test_shape_error_is_a_graphopt_error_saying_what_to_do():
    gm = graphopt.capture(models.MLP(), torch.randn(2, 16))
    with pytest.raises(errors.ShapeError) as info:
        gm(torch.randn(5, 16))
    assert isinstance(info.value, GraphoptError)
    text = str(info.value)
    assert "(2, 16)" in text and "capture or optimize the model again" in text
    assert "dynamic_shapes" in text and info.value.__cause__ is None
