"""compare_capture: every capture method on the seed's example and on control flow.

torch.compile is slow on a small CPU, so only two tests call it: the seed's
z = (x + y) * w with inductor (marked slow) and the data-dependent branch with
backend="eager" (TorchDynamo alone, which decides the graph breaks). The other tests
leave it out with `methods=`.
"""

import warnings

import pytest
import torch
from torch import nn
from torch.fx import GraphModule

import graphopt
from graphopt.compare import (
    METHODS,
    CaptureRow,
    CaptureTable,
    inductor_launches,
    make_fresh_inputs,
    static_vs_dynamic,
)
from graphopt.compare.quiet import quiet
from graphopt.errors import InputError

NO_COMPILE = tuple(m for m in METHODS if m != "torch.compile")
GRAPH_METHODS = ("fx.symbolic_trace", "torch.export(strict=False)",
                 "torch.export(strict=True)")


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


# ------------------------------------------------------------------ the seed's example

@pytest.fixture(scope="module")
def add_mul_table():
    model, inputs = graphopt.models.example("add_mul")
    return compare_once(model, inputs)


def compare_once(model, inputs):
    return graphopt.compare_capture(model, *inputs)  # all methods, inductor included


@pytest.mark.slow
def test_every_method_captures_add_mul(add_mul_table):
    table = add_mul_table
    assert [r.method for r in table] == list(METHODS)
    assert all(r.captured for r in table), table
    assert table["eager"].matches_eager is None  # eager is the reference
    for r in table[1:]:
        assert r.matches_eager is True, r.method
        assert r.run_s > 0 and r.capture_s > 0
        assert r.error_type is None


@pytest.mark.slow
def test_add_mul_graphs_are_two_ops(add_mul_table):
    table = add_mul_table
    for method in GRAPH_METHODS + ("torch.compile",):
        row = table[method]
        assert isinstance(row.graph, GraphModule), method
        assert row.nodes == 2, method
        assert "add" in graphopt.draw(row.graph).source
    assert table["torch.compile"].graph_breaks == 0
    assert len(table["torch.compile"].graphs) == 1
    for method in ("torch.jit.script", "torch.jit.trace"):
        row = table[method]
        assert "aten::add" in row.graph and "aten::mul" in row.graph
        assert "/" not in row.graph.split("\n", 1)[1]  # no source paths in the IR text
        assert row.nodes == 2


@pytest.mark.slow
def test_add_mul_kernel_launches(add_mul_table):
    assert add_mul_table["eager"].kernels == ["add", "mul"]
    # inductor fuses the add and the mul into one loop
    launches = add_mul_table["torch.compile"].kernels
    assert len(launches) == 1 and launches[0].startswith("cpp_fused_add_mul")


@pytest.mark.slow
def test_torchscript_is_deprecated_and_says_so(add_mul_table):
    # by category and by naming what replaces it, not by torch's sentence: 2.13 says
    # it with a DeprecationWarning, 2.14 with a FutureWarning, Python 3.14 in others
    for method in ("torch.jit.script", "torch.jit.trace"):
        row = add_mul_table[method]
        assert row.deprecation in row.warnings, row.warnings
        category, _, text = row.deprecation.partition(": ")
        assert category in ("DeprecationWarning", "FutureWarning"), row.deprecation
        assert "torch.compile" in text or "torch.export" in text, row.deprecation
    # the methods torch does not deprecate have no notice, whatever torch's internals
    # warned while they ran
    for method in GRAPH_METHODS + ("torch.compile",):
        assert add_mul_table[method].deprecation is None, method


def test_deprecations_are_told_by_category_not_wording():
    raised = [("old API; use the new one", FutureWarning),
              ("going away", DeprecationWarning),
              ("going away", DeprecationWarning),  # the same warning: listed once
              ("this API is deprecated", UserWarning)]  # says so, but is not one
    with quiet() as record:
        for text, category in raised:
            warnings.warn(text, category, stacklevel=1)
    assert record.deprecations == ["FutureWarning: old API; use the new one",
                                   "DeprecationWarning: going away"]
    assert len(record.warnings) == 3


@pytest.mark.slow
def test_table_renders_as_text_and_html(add_mul_table):
    text, page = repr(add_mul_table), add_mul_table._repr_html_()
    for method in METHODS:
        assert method in text
        assert f"<td style='text-align:left'>{method}</td>" in page
    assert text.splitlines()[0].startswith("method")
    # a TorchScript row's note is torch's deprecation notice, in torch's words
    script = next(line for line in text.splitlines()
                  if line.startswith("torch.jit.script "))
    assert add_mul_table["torch.jit.script"].deprecation[:100] in script


# ------------------------------------------------------------------ control flow

def test_data_dependent_branch_each_method():
    model, (x,) = graphopt.models.example("data_dependent_branch")
    assert x.sum() > 0  # the example takes the `x * 2` side
    table = graphopt.compare_capture(model, x, compile_backend="eager")
    failed = {r.method: r.error_type for r in table if not r.captured}
    assert failed == {
        "fx.symbolic_trace": "TraceError",
        "torch.export(strict=False)": "GuardOnDataDependentSymNode",
        "torch.export(strict=True)": "Unsupported",
    }
    assert "control flow" in table["fx.symbolic_trace"].error
    assert "Data-dependent branching" in table["torch.export(strict=True)"].error
    # TorchScript's compiler keeps the `if`: right on both sides
    assert table["torch.jit.script"].matches_eager is True
    assert "prim::If" in table["torch.jit.script"].graph
    # dynamo splits the model at the branch and runs the `if` in Python
    compiled = table["torch.compile"]
    assert compiled.method == "torch.compile(backend='eager')"
    assert compiled.graph_breaks == 1 and len(compiled.graphs) == 2
    assert compiled.matches_eager is True


def test_jit_trace_silently_wrong_on_other_branch():
    model, (x,) = graphopt.models.example("data_dependent_branch")
    other = (-x,)  # takes the `x - 1` side
    table = graphopt.compare_capture(model, x, methods=("eager", "torch.jit.trace"),
                                     fresh_inputs=[other])
    row = table["torch.jit.trace"]
    assert row.captured and row.matches_eager is False
    assert row.fresh_error is None  # no error at all: that is what makes it dangerous
    assert row.verdict == "WRONG"
    assert any(w.startswith("TracerWarning") for w in row.warnings)
    # check the wrong answer by hand: the trace always doubles
    with torch.no_grad():
        assert torch.equal(row.module(*other), -x * 2)
        assert torch.equal(model(*other), -x - 1)


def test_same_branch_inputs_do_not_reveal_the_trace():
    model, (x,) = graphopt.models.example("data_dependent_branch")
    table = graphopt.compare_capture(model, x, methods=("eager", "torch.jit.trace"),
                                     fresh_inputs=[(x * 3,)])
    assert table["torch.jit.trace"].matches_eager is True


def test_cond_branch_exports():
    model, (x,) = graphopt.models.example("cond_branch")
    table = graphopt.compare_capture(model, x, methods=NO_COMPILE)
    for method in ("torch.export(strict=False)", "torch.export(strict=True)"):
        row = table[method]
        assert row.captured and row.matches_eager is True, method
        targets = [str(n.target) for n in row.graph.graph.nodes]
        assert "cond" in targets, targets
        assert len(row.graph.true_graph_0.graph.nodes) > 0  # both sides are there
    failed = {r.method: r.error_type for r in table if not r.captured}
    assert failed == {"fx.symbolic_trace": "RuntimeError",
                      "torch.jit.script": "UnsupportedNodeError",
                      "torch.jit.trace": "RuntimeError"}


def test_shape_loop_unrolls_for_one_length():
    model, (x,) = graphopt.models.example("shape_loop")
    steps = x.shape[0]
    table = graphopt.compare_capture(model, x, methods=NO_COMPILE)
    assert table["fx.symbolic_trace"].error_type == "TypeError"
    for method in ("torch.export(strict=False)", "torch.jit.trace"):
        assert table[method].matches_eager is True, method
    # one relu per step: the loop was unrolled for this length
    relus = [n for n in table["torch.export(strict=False)"].graph.graph.nodes
             if "relu" in str(n.target)]
    assert len(relus) == steps
    assert "prim::Loop" in table["torch.jit.script"].graph


def test_shape_loop_other_length():
    model, (x,) = graphopt.models.example("shape_loop")
    longer = (torch.randn(x.shape[0] + 2, x.shape[1]),)
    table = graphopt.compare_capture(model, x, methods=NO_COMPILE,
                                     fresh_inputs=[longer])
    assert table["torch.jit.script"].matches_eager is True
    # the trace still runs 5 steps: a wrong answer, no error
    assert table["torch.jit.trace"].verdict == "WRONG"
    # export guarded the length and refuses
    exported = table["torch.export(strict=False)"]
    assert exported.verdict == "raises" and "Guard failed" in exported.fresh_error


# ------------------------------------------------------------------ debugging: prints

def test_when_a_print_in_forward_runs():
    model, inputs = graphopt.models.example("printing_add_mul")
    table = graphopt.compare_capture(model, *inputs, methods=NO_COMPILE)
    seen = {r.method: (r.prints_at_capture, r.prints_per_call) for r in table}
    assert seen["eager"] == (0, 1)               # every call
    assert seen["fx.symbolic_trace"] == (1, 0)   # once, while tracing
    assert seen["torch.export(strict=False)"] == (1, 0)
    assert seen["torch.export(strict=True)"] == (0, 0)  # dynamo drops the print
    assert seen["torch.jit.script"] == (0, 1)    # TorchScript keeps print as an op
    assert seen["torch.jit.trace"][0] >= 1 and seen["torch.jit.trace"][1] == 0
    assert "prints: capture / call" in repr(table)


def test_nothing_reaches_the_screen(capsys):
    model, (x,) = graphopt.models.example("data_dependent_branch")
    graphopt.compare_capture(model, x, methods=NO_COMPILE)
    out, err = capsys.readouterr()
    assert out == "" and err == ""


# ------------------------------------------------------------------ robustness

class _Broken(nn.Module):
    def forward(self, x):
        return x @ torch.ones(x.shape[1] + 1, 2)  # shapes never match


def test_a_failing_model_gives_failed_rows_not_an_exception():
    table = graphopt.compare_capture(_Broken(), torch.randn(3, 4), methods=NO_COMPILE)
    assert isinstance(table, CaptureTable) and len(table) == len(NO_COMPILE)
    assert not any(r.captured for r in table)
    # each method says it in its own words (strict export: TorchRuntimeError)
    assert all(r.error_type.endswith("RuntimeError") and r.error for r in table
               if r.method != "fx.symbolic_trace")


def test_the_callers_model_is_untouched():
    model, (x,) = graphopt.models.example("mlp")
    model.train()
    before = _state(model)
    table = graphopt.compare_capture(model, x, methods=NO_COMPILE)
    assert all(r.captured and r.matches_eager is not False for r in table)
    assert model.training
    after = _state(model)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_training_mode_batchnorm_is_not_updated():
    model, (x,) = graphopt.models.example("basic_block")
    model.train()
    before = _state(model)
    table = graphopt.compare_capture(model, x, methods=("eager", "fx.symbolic_trace"))
    assert all(r.captured for r in table)
    after = _state(model)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_plain_functions_work():
    def f(x, y):
        return torch.relu(x) * y

    x, y = torch.randn(3, 3), torch.randn(3, 3)
    table = graphopt.compare_capture(f, x, y, methods=NO_COMPILE)
    assert all(r.captured for r in table), table


def test_bad_arguments_say_what_to_do():
    model, inputs = graphopt.models.example("add_mul")
    with pytest.raises(InputError, match="choose from"):
        graphopt.compare_capture(model, *inputs, methods=("torch.jit.freeze",))
    with pytest.raises(InputError, match="torch.Tensor"):
        graphopt.compare_capture(model, 1.0, *inputs[1:], methods=("eager",))
    with pytest.raises(InputError, match=r"fresh_inputs\[0\] must be a tuple of 3"):
        graphopt.compare_capture(model, *inputs, methods=("eager",),
                                 fresh_inputs=list(inputs))  # tensors, not tuples
    with pytest.raises(InputError, match="runs"):
        graphopt.compare_capture(model, *inputs, methods=("eager",), runs=0)


def test_fresh_inputs_keep_shapes_and_change_values():
    inputs = (torch.randn(2, 3), torch.arange(4), torch.ones(2, dtype=torch.bool))
    draw, negated = make_fresh_inputs(inputs)
    for old, new in zip(inputs, draw):
        assert new.shape == old.shape and new.dtype == old.dtype
    assert not torch.equal(draw[0], inputs[0])
    assert torch.equal(negated[0], -draw[0])
    assert draw[1].min() >= 0 and draw[1].max() <= 3
    assert torch.equal(make_fresh_inputs(inputs)[0][0], draw[0])  # deterministic


def test_row_lookup_by_name():
    model, inputs = graphopt.models.example("add_mul")
    table = graphopt.compare_capture(model, *inputs,
                                     methods=("eager", "torch.jit.script"))
    assert table["torch.jit.script"] is table[1]
    with pytest.raises(KeyError, match="rows are"):
        table["torch.export"]


# ------------------------------------------------------------------ the seed's table

def _row(method, **kw):
    return CaptureRow(method, captured=kw.pop("captured", True), **kw)


def test_static_vs_dynamic_reads_its_cells_off_the_rows():
    plain = CaptureTable([
        _row("eager", kernels=["add", "mul"], prints_per_call=1),
        _row("torch.export(strict=False)", nodes=2, capture_s=0.02, prints_at_capture=1,
             prints_per_call=0),
        _row("torch.jit.script", nodes=3, capture_s=0.003, prints_per_call=1),
        _row("torch.compile", nodes=2, kernels=["cpp_fused_add_mul_0"], capture_s=3.0,
             prints_at_capture=1, prints_per_call=1),
    ])
    branching = CaptureTable([
        _row("eager"),
        _row("torch.export(strict=False)", captured=False,
             error_type="GuardOnDataDependentSymNode"),
        _row("torch.jit.script", matches_eager=True),
        _row("torch.compile(backend='eager')", graph_breaks=1, graphs=[1, 2],
             matches_eager=True),
    ])
    table = static_vs_dynamic(plain, branching)
    assert table.headers[1:] == [
        "dynamic: eager", "static: torch.export", "static: TorchScript (deprecated)",
        "JIT: torch.compile"]
    cells = {row[0]: row[1:] for row in table.rows}
    assert cells["what an optimiser sees"][0] == "one op at a time: 2 kernel launches"
    assert cells["what an optimiser sees"][3] == (
        "the whole graph (2 ops), run as 1 kernel(s)")
    assert cells["print() inside forward"][1].startswith("only while capturing")
    assert cells["print() inside forward"][2].startswith("on every call")
    assert cells["if on a tensor's value"] == [
        "just works: Python decides each call", "fails: GuardOnDataDependentSymNode",
        "kept in the graph", "1 graph break: 2 graphs, Python decides"]
    assert cells["when the graph is built"][1] == "before it runs, once (20.0 ms)"
    assert "ONNX" in repr(table) and "<table>" in table._repr_html_()


def test_inductor_launches_reads_cpu_and_gpu_code():
    # the shape of inductor's output code: one line per launch inside call()
    cpu = """
cpp_fused_add_0 = async_compile.cpp_pybinding(['float*'], r'''...''')
def call(self, args):
    buf0 = empty_strided_cpu((32, 192), (192, 1), torch.float32)
    extern_kernels.addmm(arg2_1, arg0_1, arg1_1, alpha=1, beta=1, out=buf0)
    buf1 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(buf0)
    cpp_fused_add_0(buf0, arg3_1)
    return (buf0, )

runner = Runner(partitions=[])
"""
    gpu = """
def call(self, args):
    stream0 = get_raw_stream(0)
    triton_poi_fused_add_mul_0.run(arg0_1, arg1_1, buf0, 16, stream=stream0)
    extern_kernels.mm(buf0, arg2_1, out=buf1)
    return (buf1, )
"""
    assert inductor_launches([cpu]) == [
        "extern_kernels.addmm",
        "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu",
        "cpp_fused_add_0"]
    assert inductor_launches([gpu]) == ["triton_poi_fused_add_mul_0", "extern_kernels.mm"]


class _Masked(torch.nn.Module):
    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out = input_ids.float()
        if attention_mask is not None:
            out = out * attention_mask
        return out if token_type_ids is None else out + token_type_ids


@pytest.mark.parametrize("kwargs", [("attention_mask",), ("token_type_ids",)])
def test_keyword_inputs_are_passed_as_the_model_takes_them(kwargs):
    ids = torch.tensor([[3, 1, 4]])
    given = {k: torch.tensor([[1, 1, 0]]) for k in kwargs}
    table = graphopt.compare_capture(_Masked(), input_ids=ids, **given,
                            methods=("eager", "torch.export(strict=False)"), runs=1)
    rows = list(table)
    assert all(r.captured for r in rows), [(r.method, r.error) for r in rows]
    assert rows[1].matches_eager is True
