"""What a reader on another CPU or torch build gets, simulated on this machine.

ARM builds of torch carry no MKL, some builds no oneDNN, and numba may be missing or
compile for another CPU. Each case disables the feature here and checks that the
optimizer still gives eager's answer, says why in its notes, and counts what really
runs. The instruction-set side (scalar, AVX2, generic numba) is `make test-cpus`.
"""

import os
import subprocess
import sys

import pytest
import torch

import graphopt
from graphopt import codegen, models
from graphopt.backend import onednn
from graphopt.passes.fused_modules import ConvReLU, LinearReLU
from graphopt.passes.prepacked import FusedPattern

MODELS = ("basic_block", "small_resnet", "transformer_block", "mlp")


def _agree(name):
    """optimize(example(name)) gives eager's answer; (result, inputs)."""
    model, inputs = models.example(name)
    result = graphopt.optimize(model, *inputs)
    with torch.no_grad():
        torch.testing.assert_close(result.module(*inputs), model(*inputs),
                                   rtol=1e-4, atol=1e-4)
    return result, inputs


@pytest.mark.parametrize("name", MODELS)
def test_without_onednn_or_mkl_fused_nodes_run_torch_kernels(monkeypatch, name):
    """A torch build without oneDNN (and ARM's, without MKL): the backend binds no
    library kernel to a fused Conv or Linear, says so in its notes, and it runs
    torch's own kernel, then its activation; the interpreter counts both kernels."""
    monkeypatch.setattr(onednn, "available", lambda: False)
    monkeypatch.setattr(onednn, "mkl_available", lambda: False)
    result, inputs = _agree(name)
    gm = result.module
    fused = [(n, gm.get_submodule(n.target)) for n in gm.graph.nodes
             if n.op == "call_module"
             and isinstance(gm.get_submodule(n.target), FusedPattern)]
    assert all(m.kernel not in ("onednn", "mkl") for _, m in fused)
    convs = [(n, m) for n, m in fused if isinstance(m, (ConvReLU, LinearReLU))]
    assert convs and all(m.kernel == "eager" for _, m in convs)
    for n, m in convs:  # the backend stage says why, node by node
        note = f"backend: {n.name} ({type(m).__name__}) runs the eager ops: " \
               "this torch build has no oneDNN"
        assert note in result.notes, (note, result.notes)
    with torch.no_grad():
        report = graphopt.run(result.module, *inputs)
    assert report.kernels >= len(result.module.graph.find_nodes(op="call_module"))


@pytest.mark.parametrize("name", ["transformer_block", "mlp"])
def test_without_numba_fused_groups_run_their_ops(monkeypatch, name):
    monkeypatch.setattr(codegen.kernel, "numba_available",
                        lambda: (False, "numba is not installed"))
    codegen.clear_cache()  # kernels compiled by earlier tests must not be reused
    _agree(name)


def test_numba_kernels_use_numbas_own_thread_pool():
    """numba's 'workqueue' pool exists on every platform (no OpenMP or TBB needed,
    macOS included): the generated kernels pick it unless NUMBA_THREADING_LAYER says
    otherwise, so threading never falls back to something else on another OS."""
    code = ("import torch, numba\n"
            "from torch import fx\n"
            "from graphopt import codegen\n"
            "gm = fx.symbolic_trace(lambda x: torch.relu(x) * 2.0)\n"
            "x = torch.randn(1 << 24)\n"
            "k = codegen.compile_group(gm, (x,), backend='numba')\n"
            "k(x); k(x)\n"
            "print(numba.config.THREADING_LAYER, numba.threading_layer())\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["workqueue", "workqueue"], out.stdout
