"""BERT end to end: the backend's GEMM rule before and after, eager and ORT (ch. 7).

Run:  python benchmarks/bert_gemm_choice.py [--wait bounded|passive] [--rounds R]
                                            [--batches 1 8] [--threads 1 2] [--no-ort]

The BERT encoder of `graphopt.models.example("bert")` (128 tokens a sequence) at
each batch and thread count, four variants timed in the same interleaved rounds
(`graphopt.measure.compare`: median and interquartile range per call):

- eager: the model as it is;
- graphopt mkl: `optimize` under `Policy(gemm_library="mkl")`, the earlier rule
  (BERT's plain and GELU linears on MKL's packed GEMM, then torch's GELU);
- graphopt onednn: `optimize` under the default policy (every linear from
  `small_gemm_flops` on oneDNN's prepacked weight, bias and GELU as post-ops);
- ORT: ONNX Runtime at level "all" (skipped with --no-ort or when not installed).

Each optimized model's output is checked against eager's first. Last line:
RESULT bert_b<batch>_t<threads>=<onednn / mkl median ratio> ...
"""

from __future__ import annotations

import wait_policy  # before torch loads: OpenMP reads its variables once

WAIT = wait_policy.from_argv()

import argparse  # noqa: E402
import tempfile  # noqa: E402
from collections import Counter  # noqa: E402

import torch  # noqa: E402

import graphopt  # noqa: E402
from graphopt.measure import compare  # noqa: E402
from graphopt.models import example  # noqa: E402
from graphopt.passes.fused_modules import LinearReLU  # noqa: E402
from graphopt.policy import Policy  # noqa: E402

RULES = {"graphopt mkl": Policy(gemm_library="mkl"), "graphopt onednn": Policy()}


def first_tensor(out) -> torch.Tensor:
    """The last hidden state: a model output's first tensor."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        out = list(out.values())
    return first_tensor(out[0])


def kernels_of(module) -> str:
    """How the linears were bound: 'onednn 12, mkl 1'."""
    count = Counter(m.kernel for m in module.modules() if isinstance(m, LinearReLU))
    return ", ".join(f"{k} {v}" for k, v in sorted(count.items()))


def variants(batch: int, folder: str, ort: bool) -> tuple[dict, tuple]:
    """{label: callable} for one batch, every output checked against eager's."""
    model, inputs = example("bert", batch=batch)
    with torch.no_grad():
        want = first_tensor(model(*inputs))
    fns = {"eager": model}
    for label, policy in RULES.items():
        fns[label] = graphopt.optimize(model, *inputs, policy=policy).module
        print(f"  {label}: linears {kernels_of(fns[label])}")
    if ort:
        from graphopt import peers
        fns["ORT"] = peers.onnx_runtime(model, inputs, torch.get_num_threads(),
                                        folder=folder)
    with torch.no_grad():
        for label, fn in fns.items():
            got = first_tensor(fn(*inputs))
            err = (got - want).abs().max().item()
            assert err < 1e-4, f"{label}: max |diff| {err:.2e} against eager"
            print(f"  {label}: max |diff| vs eager {err:.1e}")
    return fns, inputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wait", choices=wait_policy.CHOICES, default="bounded")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--no-ort", action="store_true")
    args = p.parse_args()
    wait_policy.check(WAIT)
    ort = not args.no_ort
    if ort:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            ort = False
    results = []
    print(f"torch {torch.__version__}, wait policy {WAIT}, {args.rounds} rounds")
    with tempfile.TemporaryDirectory(prefix="graphopt-bert-") as folder:
        for batch in args.batches:
            for threads in args.threads:
                torch.set_num_threads(threads)
                print(f"\nbatch {batch} ({batch * 128} tokens), {threads} thread(s)")
                fns, inputs = variants(batch, folder, ort)
                with torch.no_grad():
                    cmp = compare(fns, *inputs, rounds=args.rounds, threads=threads)
                print(cmp)
                print(cmp.verdict("graphopt onednn", "graphopt mkl"))
                print(cmp.verdict("graphopt onednn", "eager"))
                if ort:
                    print(cmp.verdict("graphopt onednn", "ORT"))
                print(cmp.conditions)
                ratio = cmp.ratio("graphopt mkl", "graphopt onednn")
                results.append(f"bert_b{batch}_t{threads}={1 / ratio:.3f}")
    print("RESULT " + " ".join(results))


if __name__ == "__main__":
    main()
