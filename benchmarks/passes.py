"""How long the optimisation pipeline takes as graphs grow (chapter 5's cost question).

Builds aten-level graphs of about 1k, 10k and 100k nodes directly with the fx Graph
API (a repeated block with a matmul+bias+relu, a constant subgraph, an elementwise
chain, a shared subexpression and a dead branch; shapes written into node.meta, so
no example run is needed), plus a deep Transformer stack captured with torch.export,
and times `graphopt.optimize(gm, stats=False, keep_stages=False)`: one working copy,
every stage of `graphopt.PIPELINE` (the graph passes, then `lower` and `backend`; no
generated kernel is compiled here: each compiles at its first call), one recompile.
Prints time per node and the growth
time(10N)/time(N); near 10 means linear. Last line:

    RESULT pipeline_100k_s=<float> scaling_10x=<float>

Usage: python benchmarks/passes.py [--quick]   (--quick: 1k and 10k nodes, 4 layers)
"""

from __future__ import annotations

import argparse
import gc
import time

import torch
from torch import fx, nn

import graphopt
from graphopt import models
from graphopt.torch_internals import tensor_metadata

aten = torch.ops.aten
NODES_PER_BLOCK = 12


def block_graph(n_nodes: int, size: int = 8) -> fx.GraphModule:
    """A graph of about `n_nodes` nodes made of one repeated block."""
    root, g = nn.Module(), fx.Graph()
    meta = tensor_metadata(torch.empty(size, size))
    x = g.placeholder("x")
    for i in range(max(1, n_nodes // NODES_PER_BLOCK)):
        root.register_buffer(f"w{i}", torch.randn(size, size))
        root.register_buffer(f"c{i}", torch.randn(size, size))
        w, c = g.get_attr(f"w{i}"), g.get_attr(f"c{i}")
        mm = g.call_function(aten.mm.default, (x, w))                # MatMul+Add+ReLU
        h = g.call_function(aten.add.Tensor, (mm, c))
        h = g.call_function(aten.relu.default, (h,))
        s = g.call_function(aten.mul.Tensor, (c, 0.5))               # constant: folded
        e = g.call_function(aten.mul.Tensor, (h, s))
        e = g.call_function(aten.add.Tensor, (e, 1.0))
        e = g.call_function(aten.sigmoid.default, (e,))
        dup = g.call_function(aten.mul.Tensor, (h, s))               # shared subexpr.
        g.call_function(aten.neg.default, (e,))                      # dead branch
        x = g.call_function(aten.add.Tensor, (e, dup))
    g.output(x)
    for n in g.nodes:
        if n.op != "output":
            n.meta["tensor_meta"] = meta
    return fx.GraphModule(root, g)


def time_pipeline(gm: fx.GraphModule, repeats: int = 1) -> tuple[float, float]:
    """Best (wall seconds, CPU seconds of this process) over `repeats` runs.

    On a shared machine wall time includes waiting for a core; the CPU time is what
    the pipeline itself used (it is single-threaded Python).
    """
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        graphopt.optimize(gm, stats=False, keep_stages=False)
        best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    return best


def transformer_stack(layers: int) -> fx.GraphModule:
    torch.manual_seed(0)
    model = nn.Sequential(*[models.TransformerBlock() for _ in range(layers)]).eval()
    return graphopt.capture(model, torch.randn(2, 16, 64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k nodes only")
    args = parser.parse_args()
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    times, cpus = {}, {}
    print(f"{'graph':<28}{'nodes':>9}{'wall s':>9}{'cpu s':>9}{'us/node':>10}")
    for n in sizes:
        gm = block_graph(n)
        nodes = len(gm.graph.nodes)
        times[n], cpus[n] = time_pipeline(gm, repeats=3 if n <= 10_000 else 1)
        print(f"{'generated blocks':<28}{nodes:>9}{times[n]:>9.3f}{cpus[n]:>9.3f}"
              f"{times[n] / nodes * 1e6:>10.1f}")
        del gm
    layers = 4 if args.quick else 48
    gm = transformer_stack(layers)
    t, c = time_pipeline(gm)
    nodes = len(gm.graph.nodes)
    print(f"{f'Transformer x{layers} (aten)':<28}{nodes:>9}{t:>9.3f}{c:>9.3f}"
          f"{t / nodes * 1e6:>10.1f}")
    for small, big in zip(sizes, sizes[1:]):
        print(f"time({big // 1000}k) / time({small // 1000}k) = "
              f"{times[big] / times[small]:.2f} wall, {cpus[big] / cpus[small]:.2f} cpu"
              "  (10 = linear)")
    largest = sizes[-1]
    scaling = times[largest] / times[largest // 10]
    print(f"cpu: pipeline_{largest // 1000}k_cpu_s={cpus[largest]:.3f}")
    print(f"RESULT pipeline_{largest // 1000}k_s={times[largest]:.3f} "
          f"scaling_10x={scaling:.2f}")

if __name__ == "__main__":
    main()
