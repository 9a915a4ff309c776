"""BERT alone against its peers, one process per variant (the runs cpu_bert_*.txt).

Run:  python benchmarks/results/cpu_bert_script.py [threads] [rounds]

graphopt.models.example("bert") (4 layers, 256 wide, 1 x 128 tokens), each variant
built in its own spawned `graphopt.peers.Worker` (OMP_WAIT_POLICY=PASSIVE, ONNX
Runtime without spinning), timed in interleaved rounds (`peers.interleave`); then,
in this process, every stage (`graphopt.optimize`) with and without `fuse_qkv`,
interleaved.
Ratios are time over time, taken in the same rounds.
"""

import functools
import os
import statistics
import sys
import time
import warnings

import torch

import graphopt
from graphopt import peers
from graphopt.optimizer import PIPELINE, optimize


def main(threads: int, rounds: int) -> None:
    print(f"load {os.getloadavg()}; threads {threads}; {peers.ort_version()}; "
          f"torch {torch.__version__}")
    factory = functools.partial(graphopt.models.example, "bert")
    workers = {v: peers.Worker(factory, v, threads=threads, start=False)
               for v in peers.VARIANTS}
    for w in workers.values():
        w.wait()
    res = peers.interleave({k: w.time for k, w in workers.items()}, rounds, 10)
    for w in workers.values():
        w.close()
    for k, m in res.items():
        print(f"{k:<18} {m.median * 1e3:8.2f} ms  (rounds {m.low * 1e3:.2f}-"
              f"{m.high * 1e3:.2f})")
    ours = res["graphopt"].median
    ind = min(res["inductor"].median, res["inductor_freezing"].median)
    print(f"RESULT bert_vs_inductor={ours / ind:.3f} "
          f"bert_vs_ort={ours / res['ort'].median:.3f} "
          f"bert_vs_eager={ours / res['eager'].median:.3f}")
    qkv_ab(threads, rounds)
    print(f"load at the end {os.getloadavg()}")


def qkv_ab(threads: int, rounds: int) -> None:
    """graphopt with and without fuse_qkv, interleaved in this process."""
    torch.set_num_threads(threads)
    model, inputs = graphopt.models.example("bert")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fns = {"with fuse_qkv": optimize(model, *inputs, stats=False).module,
               "without": optimize(model, *inputs, stats=False, passes=[
                   p for p in PIPELINE if p != "fuse_qkv"]).module}
    times = {k: [] for k in fns}
    with torch.no_grad():
        for r in range(rounds):
            for k, f in (list(fns.items())[::1 if r % 2 else -1]):
                f(*inputs)
                ts = []
                for _ in range(10):
                    s = time.perf_counter()
                    f(*inputs)
                    ts.append(time.perf_counter() - s)
                times[k].append(statistics.median(ts))
    med = {k: statistics.median(v) for k, v in times.items()}
    print("; ".join(f"{k} {v * 1e3:.2f} ms" for k, v in med.items()))
    print(f"RESULT qkv_vs_without={med['with fuse_qkv'] / med['without']:.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2,
         int(sys.argv[2]) if len(sys.argv) > 2 else 7)
