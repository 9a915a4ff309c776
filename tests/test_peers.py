"""The peers of chapter 7 compute what eager computes, with the threads asked for.

Correctness only: no timing is asserted (timings live in benchmarks/models.py).
"""

import functools
import os
import pathlib
import re

import pytest
import torch
from torch import nn

from graphopt import peers

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


class Tiny(nn.Module):
    """Conv+BN+ReLU, a residual add, a linear head: the ops the real models use."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.proj = nn.Conv2d(3, 8, 1)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))) + self.proj(x)
        return self.head(y.mean((2, 3))), y


def tiny(seed: int = 0):
    """(model, inputs) in eval mode with non-trivial BN statistics."""
    torch.manual_seed(seed)
    m = Tiny().eval()
    m.bn.running_mean.uniform_(-0.5, 0.5)
    m.bn.running_var.uniform_(0.5, 2.0)
    return m, (torch.randn(2, 3, 8, 8),)


def fresh():
    return (torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(7)),)


def close(got, model, args):
    with torch.no_grad():
        want = peers.flat_tensors(model(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def ort_model(tmp_path_factory):
    m, x = tiny()
    folder = str(tmp_path_factory.mktemp("onnx"))
    return m, peers.onnx_runtime(m, x, threads=1, folder=folder)


def test_ort_matches_eager_on_fresh_inputs_repeatedly(ort_model):
    m, ort = ort_model
    for _ in range(2):
        close(ort(*fresh()), m, fresh())
    close(ort(*tiny()[1]), m, tiny()[1])


def test_ort_thread_settings_are_applied(ort_model):
    _, ort = ort_model
    assert ort.settings() == {"intra_op_threads": 1, "allow_spinning": "0",
                              "level": "ORT_ENABLE_ALL"}
    assert ort.nodes() > 0


def test_ort_levels_and_optimized_graph(ort_model, tmp_path):
    m, ort = ort_model
    plain = peers.ort_session(ort.path, threads=1, level="disable_all")
    assert plain.settings()["level"] == "ORT_DISABLE_ALL"
    close(plain(*fresh()), m, fresh())
    all_ops = peers.optimized_op_counts(ort.path, threads=1, level="all")
    none_ops = peers.optimized_op_counts(ort.path, threads=1, level="disable_all")
    assert none_ops["Relu"] == 1 and none_ops["Add"] == 1    # as exported
    assert "Relu" not in all_ops and "Add" not in all_ops    # fused into a conv
    assert all_ops.get("com.microsoft.nchwc.Conv", 0) == 2   # blocked layout
    assert sum(all_ops.values()) < sum(none_ops.values())
    with pytest.raises(peers.PeerError, match="level must be one of"):
        peers.ort_session(ort.path, level="fastest")


def test_export_takes_int_inputs(tmp_path):
    """Token ids (int64) go through export and ORT as the BERT encoder's do."""
    torch.manual_seed(0)
    emb = nn.Sequential(nn.Embedding(11, 4), nn.Linear(4, 3)).eval()
    ids = torch.randint(0, 11, (1, 6))
    ort = peers.onnx_runtime(emb, (ids,), threads=1, folder=str(tmp_path))
    other = torch.randint(0, 11, (1, 6), generator=torch.Generator().manual_seed(3))
    close(ort(other), emb, (other,))


def test_compiled_with_and_without_freezing_match_eager():
    m, x = tiny()
    for freezing in (False, True):
        torch._dynamo.reset()
        fn = peers.compiled(m, freezing=freezing)
        with torch.no_grad():
            close(peers.flat_tensors(fn(*x)), m, x)
            close(peers.flat_tensors(fn(*fresh())), m, fresh())
    torch._dynamo.reset()


def test_build_leaves_the_model_alone():
    m, x = tiny()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    fn = peers.build("graphopt", m, x)
    close(peers.flat_tensors(fn(*fresh())), m, fresh())
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(peers.PeerError, match="unknown variant"):
        peers.build("tensorrt", m, x)


def test_worker_runs_its_variant_in_its_own_process():
    """The subprocess path: built there, same answers, same thread count, timings."""
    with peers.Worker(tiny, "inductor_freezing", threads=1, start=False) as w, \
            peers.Worker(tiny, "ort", threads=1) as o:
        w.wait()
        m, _ = tiny()
        for worker in (w, o):
            close(worker.run(*fresh()), m, fresh())
        info_w, info_o = w.info(), o.info()
        assert info_w["torch_threads"] == info_o["torch_threads"] == 1
        assert info_o["ort"]["intra_op_threads"] == 1
        # the default policy: a bounded spin in torch, ORT's own spinning
        assert info_o["ort"]["allow_spinning"] == "1"
        assert info_w["wait_policy"] == info_o["wait_policy"] == "bounded"
        assert info_o["onnx_path"].endswith(".onnx") and info_w["onnx_path"] is None
        assert len({info_w["pid"], info_o["pid"], os.getpid()}) == 3
        result = peers.interleave({"inductor_freezing": w.time, "ort": o.time},
                                  rounds=2, calls=3)
        for r in result.values():
            assert len(r.rounds) == 2 and r.low <= r.median <= r.high and r.low > 0


def test_worker_reports_a_failure_clearly():
    bad = functools.partial(_raises, "no such model")
    with pytest.raises(peers.PeerError, match="eager: ValueError: no such model"):
        peers.Worker(bad, "eager", threads=1)


def _raises(message):
    raise ValueError(message)


def test_package_keeps_its_api_and_small_files():
    """One concept per file (STYLE.md): every file under 300 lines of at most 88
    characters, a docstring naming its chapter; every public name importable."""
    for name in peers.__all__:
        obj = getattr(peers, name)
        if not isinstance(obj, (tuple, str, float)):  # VARIANTS, SETTLE_S: constants
            assert obj.__module__.startswith("graphopt.peers."), name
    folder = pathlib.Path(peers.__file__).parent
    for path in sorted(folder.glob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        assert len(lines) < 300 and max(map(len, lines)) <= 88, path.name
        assert re.search(r"\b(chapter|ch\.) \d", text.split('"""')[1]), path.name
