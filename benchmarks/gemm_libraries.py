"""GEMM libraries at BERT's linear shapes, at 1 and 2 threads (chapter 7).

Run:  python benchmarks/gemm_libraries.py [--quick] [--rounds R] [--bert-only]
(`benchmarks/gap.py` runs the first table after its breakdown.)

y = x @ W.T with M=128 tokens and BERT's (K, N), no bias, best per call over
interleaved rounds: torch F.linear (MKL), MKL's and oneDNN's prepacked kernels (what
the backend stage binds to graphopt's fused linears, `graphopt.backend.onednn`),
numpy's bundled OpenBLAS (its thread count set through ctypes to the same value),
and a one-node ONNX Runtime Gemm. Every library's product
is checked against F.linear first. Then a second table (`bert_table`): BERT's
linears as the backend binds them after fuse_qkv, with bias and exact GELU, at
M = 128 and 1024 (batch 1 and 8): F.linear (+ GELU), MKL packed (+ GELU), oneDNN
with the bias and GELU as post-ops, oneDNN then torch's GELU, and numpy's OpenBLAS
as a reference only (the backend does not bind numpy). Last line: RESULT
gemm_2t_torch_vs_best=<x> (the best torch-side sum over the best other library's,
at 2 threads) and bert_<threads>t_M<m>=<fastest torch-side library by the sum>.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from graphopt import peers
from graphopt.measure.thread_count import set_threads
from graphopt.passes import activations

SHAPES = ((256, 768), (256, 256), (256, 1024), (1024, 256))  # BERT's linears (K, N)
TOKENS = 128  # M
TORCH_SIDE = ("torch F.linear (MKL)", "MKL packed", "oneDNN packed")


def openblas_threads():
    """numpy's bundled OpenBLAS thread setter (ctypes), or None when not found."""
    import ctypes
    import glob

    import numpy as np
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs",
                                  "libscipy_openblas64_*.so"))
    if not libs:
        return None
    lib = ctypes.CDLL(libs[0])
    return getattr(lib, "scipy_openblas_set_num_threads64_", None)


def ort_gemm(k: int, n: int, weight, threads: int, folder: str):
    """A one-node ONNX model y = x @ W.T (Gemm, transB=1), in an ORT session."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    node = helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)
    graph = helper.make_graph(
        [node], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [TOKENS, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [TOKENS, n])],
        [numpy_helper.from_array(weight.numpy(), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(folder, f"gemm_{k}x{n}.onnx")
    onnx.save(model, path)
    return peers.ort_session(path, threads, "all").session


def gemm_fns(k: int, n: int, threads: int, folder: str) -> dict:
    """Every library's y = x @ W.T at one shape, as a no-argument callable."""
    import numpy as np
    import torch.nn.functional as F

    from graphopt.backend import onednn
    g = torch.Generator().manual_seed(k * n)
    x, w = torch.randn(TOKENS, k, generator=g), torch.randn(n, k, generator=g)
    mkl = onednn.pack_mkl_linear_weight(w, TOKENS)
    dnn = onednn.pack_linear_weight(w, TOKENS)
    none = activations.ACTIVATIONS["none"]
    xn, wt, out = x.numpy(), w.numpy().T.copy(), np.empty((TOKENS, n), np.float32)
    sess = ort_gemm(k, n, w, threads, folder)
    want = F.linear(x, w)
    fns = {"torch F.linear (MKL)": lambda: F.linear(x, w),
           "MKL packed": lambda: onednn.mkl_linear(x, mkl, w, None, TOKENS),
           "oneDNN packed": lambda: onednn.linear_act(x, dnn, None, none),
           "OpenBLAS (numpy)": lambda: np.matmul(xn, wt, out=out),
           "ORT Gemm": lambda: sess.run(None, {"x": xn})[0]}
    for name, fn in fns.items():  # every library computes the same product
        got = torch.as_tensor(np.asarray(fn()))
        assert torch.allclose(got, want, rtol=1e-3, atol=1e-2), name
    return fns


def best_per_call(fns: dict, rounds: int, calls: int) -> dict:
    """Each callable's best seconds per call over interleaved rounds."""
    best = {k: float("inf") for k in fns}
    with torch.no_grad():
        for _ in range(rounds):
            for k, fn in fns.items():
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                best[k] = min(best[k], (time.perf_counter() - start) / calls)
    return best


def gemm_table(folder: str, rounds: int, quick: bool) -> float:
    """Print the GEMM table at 1 and 2 threads; returns torch-side / best other at 2."""
    setter = openblas_threads()
    print(f"\nGEMM at BERT's linear shapes, M={TOKENS}, (K, N) = "
          f"{', '.join(f'{k}x{n}' for k, n in SHAPES)}; y = x @ W.T, no bias; best "
          f"per call over {rounds} interleaved rounds; OpenBLAS threads "
          + ("set via scipy_openblas_set_num_threads64_" if setter else
             "NOT settable (numpy.libs has no scipy_openblas64_): its default"))
    sums = {}
    for threads in (1, 2):
        set_threads(threads)
        if setter:
            setter(threads)
        per = {(k, n): best_per_call(gemm_fns(k, n, threads, folder), rounds,
                                     10 if quick else 30) for k, n in SHAPES}
        sums[threads] = {lib: sum(p[lib] for p in per.values())
                         for lib in per[SHAPES[0]]}
        print(f"  {threads} thread(s): " + "  ".join(f"{k}x{n}" for k, n in SHAPES))
        for lib, total in sums[threads].items():
            cells = " ".join(f"{per[s][lib] * 1e3:7.3f}" for s in SHAPES)
            print(f"    {lib:<22}{cells}  sum {total * 1e3:6.3f} ms")
    two = sums[2]
    torch_best = min(two[k] for k in TORCH_SIDE)
    other = min(v for k, v in two.items() if k not in TORCH_SIDE)
    for lib in two:
        print(f"  {lib}: 2 threads / 1 thread = {two[lib] / sums[1][lib]:.2f}")
    print(f"  at 2 threads the best torch-side GEMM sum is {torch_best / other:.2f}x "
          f"the best other library's ({torch_best * 1e3:.3f} ms against "
          f"{other * 1e3:.3f} ms)")
    return torch_best / other


# ------------------------------------------- BERT's linears as the backend binds them
# After fuse_qkv: (name, K, N, activation); every one has a bias (BertModel's do).
BERT_LINEARS = (("QKV", 256, 768, "none"), ("attn out", 256, 256, "none"),
                ("FFN up+GELU", 256, 1024, "gelu"), ("FFN down", 1024, 256, "none"))
BERT_TOKENS = (128, 1024)  # M: batch 1 and batch 8 of 128 tokens


def bert_fns(k: int, n: int, act_name: str, m: int) -> dict:
    """Each kernel's act(x @ W.T + b) at one BERT linear, x of shape (m/128, 128, k),
    checked against F.linear then F.gelu; oneDNN's GELU both as a post-op and after."""
    import numpy as np
    import torch.nn.functional as F

    from graphopt.backend import onednn
    g = torch.Generator().manual_seed(k * n + m)
    x = torch.randn(m // 128, 128, k, generator=g)
    w, b = torch.randn(n, k, generator=g) / k ** 0.5, torch.randn(n, generator=g)
    act = activations.ACTIVATIONS[act_name]
    eager = act.eager
    mkl, dnn = onednn.pack_mkl_linear_weight(w, m), onednn.pack_linear_weight(w, m)
    none = activations.ACTIVATIONS["none"]
    xn, wt, bn = x.reshape(m, k).numpy(), w.numpy().T.copy(), b.numpy()
    out = np.empty((m, n), np.float32)

    def blas():  # the reference BLAS: GEMM, bias, then torch's activation
        np.matmul(xn, wt, out=out)
        np.add(out, bn, out=out)
        return eager(torch.from_numpy(out))

    fns = {"torch F.linear (MKL)": lambda: eager(F.linear(x, w, b)),
           "MKL packed": lambda: eager(onednn.mkl_linear(x, mkl, w, b, m)),
           "oneDNN packed, post-ops": lambda: onednn.linear_act(x, dnn, b, act),
           "oneDNN packed, then act": lambda: eager(onednn.linear_act(x, dnn, b,
                                                                      none)),
           "OpenBLAS (numpy, ref)": blas}
    if act_name == "none":  # the same call as the row before
        del fns["oneDNN packed, then act"]
    want = eager(F.linear(x, w, b)).reshape(m, n)
    for name, fn in fns.items():
        got = torch.as_tensor(np.asarray(fn())).reshape(m, n)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), name
    return fns


def bert_table(rounds: int, quick: bool) -> dict:
    """BERT's linears with bias (and GELU) at M = 128, 1024 and 1, 2 threads; returns
    {(threads, m): the fastest library's name by the sum over the four linears}."""
    setter = openblas_threads()
    names = [s[0] for s in BERT_LINEARS]
    print(f"\nBERT's linears after fuse_qkv, act(x @ W.T + b): "
          f"{', '.join(f'{s[0]} {s[1]}x{s[2]}' for s in BERT_LINEARS)}; best per call "
          f"over {rounds} interleaved rounds, ms")
    winners = {}
    for threads in (1, 2):
        set_threads(threads)
        if setter:
            setter(threads)
        for m in BERT_TOKENS:
            calls = max(2, (10 if quick else 30) * 128 // m)
            per = [best_per_call(bert_fns(k, n, a, m), rounds, calls)
                   for _, k, n, a in BERT_LINEARS]
            print(f"  {threads} thread(s), M={m}: " + "  ".join(names))
            libs = list(per[0]) + [lib for lib in per[2] if lib not in per[0]]
            sums = {}
            for lib in libs:  # a lib missing at a shape runs its other row there
                row = [p.get(lib, p.get("oneDNN packed, post-ops")) for p in per]
                sums[lib] = sum(row)
                cells = " ".join(f"{t * 1e3:8.3f}" for t in row)
                print(f"    {lib:<25}{cells}  sum {sums[lib] * 1e3:7.3f}")
            torch_side = {k: v for k, v in sums.items() if "ref" not in k}
            winners[(threads, m)] = best = min(torch_side, key=torch_side.get)
            print(f"    fastest torch-side: {best}; per linear: " + ", ".join(
                f"{nm} {min((lib for lib in p if 'ref' not in lib), key=p.get)}"
                for nm, p in zip(names, per)))
    return winners


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--bert-only", action="store_true",
                   help="only the table of BERT's linears with bias and GELU")
    args = p.parse_args()
    results = []
    if not args.bert_only:
        with tempfile.TemporaryDirectory(prefix="graphopt-gemm-") as folder:
            ratio = gemm_table(folder, args.rounds, args.quick)
        results.append(f"gemm_2t_torch_vs_best={ratio:.2f}")
    for (threads, m), lib in bert_table(args.rounds, args.quick).items():
        results.append(f"bert_{threads}t_M{m}={lib.split()[0]}")
    print("RESULT " + " ".join(results))
