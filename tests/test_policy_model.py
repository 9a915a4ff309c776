"""The fixed policy's thresholds against the performance model (chapter 6)."""

import pytest

from graphopt import policy_model as pm
from graphopt.policy import DEFAULT, Policy


def test_every_rule_is_derived_or_a_measured_exception_with_its_data():
    for rule in pm.rules():
        assert rule.data, rule.name
        assert rule.verdict.startswith("derived" if rule.derived else "measured")


def test_the_rules_read_the_policy_in_force():
    thresholds = {r.name.split(" ")[0]: r.threshold for r in pm.rules()}
    assert thresholds["short_group_numel"] == DEFAULT.short_group_numel
    assert thresholds["operand_group_numel"] == DEFAULT.operand_group_numel
    assert thresholds["small_gemm_flops"] == DEFAULT.small_gemm_flops
    other = Policy(short_group_numel=1 << 10)
    row = next(r for r in pm.rules(other) if r.name.startswith("short_group"))
    assert row.threshold == 1 << 10 and not row.derived  # 32x below the model


def test_the_size_rules_the_model_explains():
    derived = {r.name.split(" ")[0] for r in pm.rules() if r.derived}
    assert {"short_group_numel", "operand_group_numel", "scalar_math_numel",
            "parallel_numel", "small_gemm_flops"} <= derived
    layout = next(r for r in pm.rules() if r.name.startswith("MIN_CONVS"))
    assert not layout.derived and "1.02-1.11x" in layout.verdict


@pytest.mark.parametrize("ops", [2, 3, 4])
def test_each_tensor_a_kernel_reads_moves_its_break_even_up(ops):
    evens = [pm.group_break_even(ops, operands) for operands in range(1, 6)]
    assert evens == sorted(evens) and evens[-1] > evens[0]


def test_more_ops_in_a_group_pay_sooner():
    assert pm.group_break_even(4, 3) <= pm.group_break_even(3, 3) \
        <= pm.group_break_even(2, 3)
    assert pm.group_break_even(3, 1) == 1  # a long chain pays from one element


def test_more_threads_and_more_work_per_element_go_parallel_sooner():
    assert pm.parallel_break_even(4) <= pm.parallel_break_even(2)
    assert pm.parallel_break_even(2, 32) < pm.parallel_break_even(2, 8)


def test_the_derivation_takes_no_timing_and_is_the_same_every_call():
    assert [(r.threshold, r.model) for r in pm.rules()] == \
        [(r.threshold, r.model) for r in pm.rules()]
    assert pm.NOMINAL_CPU.origin == "nominal"
