"""The performance model (chapter 6): predictions from counts, checked by hand."""

import pytest
import torch

import graphopt
from graphopt.analysis import total_flops
from graphopt.errors import InputError
from graphopt.measure import perf_model as pm

CPU = pm.Machine("test CPU", bandwidth_gbps=20, peak_gflops=100, launch_us=0.0,
                 dispatch_us=2.0, asynchronous=False, origin="measured")
GPU = pm.Machine("test GPU", bandwidth_gbps=2000, peak_gflops=20_000, launch_us=3.0,
                 dispatch_us=5.0, asynchronous=True, origin="published")


def test_a_memory_bound_kernel_is_its_bytes_over_bandwidth_plus_fixed_costs():
    p = pm.predict(CPU, flops=1e6, nbytes=20e6, kernels=1)
    assert p.memory_s == pytest.approx(1e-3)
    assert p.compute_s == pytest.approx(1e-5)
    assert p.seconds == pytest.approx(1e-3 + 2e-6)
    assert p.bound == "memory"


def test_a_compute_bound_kernel_is_its_flops_over_peak():
    p = pm.predict(CPU, flops=1e9, nbytes=1e6, kernels=1)
    assert p.seconds == pytest.approx(1e-2 + 2e-6)
    assert p.bound == "compute"


def test_a_gpu_overlaps_dispatch_with_the_device_and_small_kernels_are_launch_bound():
    tiny = pm.predict(GPU, nbytes=1e3, kernels=10)
    # the host needs 10 x 5 us to queue what the device runs in 10 x 3 us
    assert tiny.seconds == pytest.approx(50e-6)
    assert tiny.bound == "fixed cost"
    big = pm.predict(GPU, nbytes=2e9, kernels=10)
    assert big.seconds == pytest.approx(1e-3 + 30e-6)  # the device sets the pace


def test_fewer_kernels_and_bytes_predict_less_time():
    unfused = pm.predict(CPU, nbytes=6 * 4e6, kernels=3)
    fused = pm.predict(CPU, nbytes=2 * 4e6, kernels=1)
    assert fused.seconds < unfused.seconds / 2.5


def test_bad_counts_are_refused():
    with pytest.raises(InputError):
        pm.predict(CPU, nbytes=-1)
    with pytest.raises(InputError):
        pm.error_verdict(0.0, 1.0)


def test_a_run_is_predicted_node_by_node_from_the_interpreters_counts():
    model, inputs = graphopt.models.example("seed_conv_block")
    gm = graphopt.capture(model, *inputs)
    report = graphopt.run(gm, *inputs)
    stage = pm.predict_run(CPU, gm, report)
    assert set(stage.nodes) == {n.name for n in report.nodes}
    kernels = sum(round(p.dispatch_s / 2e-6) for p in stage.nodes.values())
    assert kernels == report.kernels
    memory = sum(p.memory_s for p in stage.nodes.values())
    assert memory == pytest.approx(report.bytes_moved / 20e9)
    flops = total_flops(gm)
    assert sum(p.compute_s for p in stage.nodes.values()) == pytest.approx(
        flops / 100e9)
    assert stage.seconds == pytest.approx(stage.device_s + stage.host_s)


def test_fusion_lowers_the_prediction_of_a_stage():
    model, inputs = graphopt.models.example("basic_block")
    result = graphopt.optimize(model, *inputs)
    first, last = result.stages[0].module, result.stages[-1].module
    counts = [graphopt.run(gm, *inputs) for gm in (first, last)]
    assert counts[1].kernels < counts[0].kernels  # what the model is fed
    before, after = (pm.predict_run(CPU, gm, r) for gm, r in zip((first, last), counts))
    assert after.seconds < before.seconds
    assert after.host_s == pytest.approx(counts[1].kernels * 2e-6)


def test_published_gpus_are_labelled_and_this_cpu_is_measured():
    assert pm.H100.origin == pm.A100.origin == "published"
    assert pm.H100.asynchronous and pm.H100.bandwidth_gbps == 3350
    cpu = pm.this_cpu(1)
    assert cpu.origin == "measured" and not cpu.asynchronous
    assert cpu.bandwidth_gbps > 0 and cpu.peak_gflops > 0 and cpu.dispatch_us > 0


@pytest.mark.parametrize("measured, words", [
    (1.2e-3, "agrees"), (3e-3, "slower than the model"), (0.2e-3, "faster than")])
def test_the_error_verdict_says_which_way_the_model_is_wrong(measured, words):
    assert words in pm.error_verdict(1e-3, measured)


def test_inputs_follow_torch_semantics():
    # a prediction never depends on the tensors, only on counts
    a = pm.predict(CPU, nbytes=torch.tensor(4e6).item())
    assert a == pm.predict(CPU, nbytes=4e6)
