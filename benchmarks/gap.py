"""Where graphopt's gap to ONNX Runtime lies, op category by op category (chapter 7).

Run:  python benchmarks/gap.py [--quick] [--threads N] [--rounds R] [--model-s S]
                               [--models NAME ...] [--batch B] [--no-gemm]

For ResNet-18, MobileNetV3-Small (224x224) and the BERT encoder (128 tokens), batch 1
(`--batch 8`: eight images or sequences a call), in ONE process, with the same
intra-op threads everywhere (torch, numba, ORT). Idle threads: `--wait bounded`
(default; torch's OpenMP threads spin about a millisecond, then sleep:
`graphopt.peers.waiting`) or `--wait passive` (they sleep at once), set before
torch loads. ORT does not spin in either: its threads spin for tens of
milliseconds after a run, and here the next call follows at once:

- graphopt: `graphopt.optimize(model, *x).module`, its plain call timed, and each of
  its nodes timed by `graphopt.peers.breakdown.time_nodes` (a clock per fx node: it
  sees the numba kernels torch.profiler cannot);
- ONNX Runtime at "all" and "disable_all": a plain session timed, and a profiled one
  whose JSON trace gives the kernel time per op type (`ort_profile.ort_runs`).

All of them are timed in rounds of one call each, in turn, round after round, so load
drift hits all alike; every number is an interquartile mean over the rounds (the
parts over the same middle half of the calls, so they add up). A category's time is
seconds per call; `overhead` is the plain call's time minus the sum of the parts
(Python and dispatch for graphopt; the executor for ORT). Then a GEMM microbenchmark
at BERT's linear shapes (M=128; torch F.linear, MKL packed, oneDNN packed, OpenBLAS
via numpy, ORT single-node Gemm; no bias; best per call over rounds) at 1 and 2
threads (`--no-gemm` skips it; `gemm_libraries.py` times M=1024 too). Last line:

  RESULT resnet18_gap_top=<category>:<share> ... gemm_2t_torch_vs_best=<x>

where share = that category's part of the graphopt - ORT(all) gap, and x = the best
torch-side GEMM sum (F.linear, MKL, oneDNN) / the best other one, at 2 threads.
"""

from __future__ import annotations

import os

import wait_policy  # before torch loads: OpenMP reads its variables once

WAIT = wait_policy.from_argv()

import argparse  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

import graphopt  # noqa: E402
from gemm_libraries import gemm_table  # noqa: E402  (benchmarks/, beside this file)
from graphopt import peers  # noqa: E402
from graphopt.measure.thread_count import set_threads  # noqa: E402
from graphopt.models import example  # noqa: E402
from graphopt.peers import breakdown as bd  # noqa: E402
from graphopt.peers import ort_profile, waiting  # noqa: E402

MODELS = ("resnet18", "mobilenet_v3_small", "bert")
LEVELS = ("all", "disable_all")


def build(name: str, threads: int, folder: str, batch: int = 1) -> dict:
    """The optimised GraphModule, ORT sessions plain and profiled, and the feeds."""
    model, inputs = example(name, batch=batch)
    gm = graphopt.optimize(model, *inputs, stats=False).module
    set_threads(threads)  # numba is loaded now: torch and numba on the same count
    path = peers.export_onnx(model, inputs, os.path.join(folder, f"{name}.onnx"))
    plain = {lv: peers.ort_session(path, threads, lv) for lv in LEVELS}
    prof = {lv: ort_profile.profiled_session(path, threads, lv,
                                    os.path.join(folder, f"{name}_{lv}"))
            for lv in LEVELS}
    feed = {n: x.numpy() for n, x in zip(plain["all"].input_names, inputs)}
    with torch.no_grad():
        want = peers.flat_tensors(model(*inputs))
        got = peers.flat_tensors(gm(*inputs))
    ort_out = [torch.from_numpy(o) for o in plain["all"].session.run(None, feed)]
    diff = tuple(max(float((g - w).abs().max()) for g, w in zip(out, want))
                 for out in (got, ort_out))
    return {"gm": gm, "inputs": inputs, "labels": bd.node_labels(gm), "plain": plain,
            "prof": prof, "feed": feed, "diff": diff}


def clock(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def steps(b: dict) -> dict:
    """One call of each variant, as a function returning what it measured."""
    gm, x, labels, feed = b["gm"], b["inputs"], b["labels"], b["feed"]
    out = {"plain": lambda: clock(lambda: gm(*x)),
           "nodes": lambda: bd.time_nodes(gm, *x, labels=labels)}
    for lv in LEVELS:
        plain, prof = b["plain"][lv].session, b["prof"][lv]
        out[f"ort_{lv}"] = lambda s=plain: clock(lambda: s.run(None, feed))
        out[f"prof_{lv}"] = lambda s=prof: s.run(None, feed)
    return out


def rounds(b: dict, calls: int, warm: int = 2, earlier: int = 0) -> dict:
    """`calls` rounds of one call of every variant in turn: a load drift on this
    shared machine hits all of them alike. ORT's profiled runs come from its trace,
    less the `earlier` runs made before and the `warm` warm-up runs."""
    fns = steps(b)
    got = {k: [] for k in fns}
    with torch.no_grad():
        for _ in range(warm):
            for fn in fns.values():
                fn()
        for _ in range(calls):
            for k, fn in fns.items():
                got[k].append(fn())
    for lv in LEVELS:
        runs = ort_profile.ort_runs(b["prof"][lv].end_profiling())
        got[f"prof_{lv}"] = runs[earlier + warm:]
        assert len(got[f"prof_{lv}"]) == calls, "one model_run per profiled call"
    return got


def summarise(got: dict) -> dict:
    """Central Runs (the middle half of the calls, see `bd.central_run`); totals are
    the PLAIN (unprofiled) calls' interquartile means."""
    c = bd.central
    out = {"graphopt": bd.central_run(got["nodes"], c(got["plain"]))}
    for lv in LEVELS:
        out[f"ort_{lv}"] = bd.central_run(got[f"prof_{lv}"], c(got[f"ort_{lv}"]))
    out["bias"] = {
        "graphopt plain call": c(got["plain"]),
        "graphopt node-timed call": c([r.total_s for r in got["nodes"]]),
        "graphopt sum of nodes": c([r.parts_s for r in got["nodes"]]),
        **{f"ORT {lv} plain run": c(got[f"ort_{lv}"]) for lv in LEVELS},
        **{f"ORT {lv} profiled run": c([r.total_s for r in got[f"prof_{lv}"]])
           for lv in LEVELS},
        **{f"ORT {lv} sum of kernels": c([r.parts_s for r in got[f"prof_{lv}"]])
           for lv in LEVELS}}
    return out


def table(name: str, s: dict) -> tuple[str, float]:
    """Print the category table; returns the top category of the gap and its share."""
    ours, best, raw = (bd.with_overhead(s[k]) for k in ("graphopt", "ort_all",
                                                          "ort_disable_all"))
    shares = bd.gap_shares(s["graphopt"], s["ort_all"])
    print(f"  {'category':<15}{'graphopt ms':>12}{'ORT all ms':>12}"
          f"{'ORT disable_all ms':>20}{'share of gap':>14}")
    for c in ours:
        print(f"  {c:<15}{ours[c] * 1e3:>12.3f}{best[c] * 1e3:>12.3f}"
              f"{raw[c] * 1e3:>20.3f}{shares[c]:>14.0%}")
    print(f"  {'total':<15}{s['graphopt'].total_s * 1e3:>12.3f}"
          f"{s['ort_all'].total_s * 1e3:>12.3f}"
          f"{s['ort_disable_all'].total_s * 1e3:>20.3f}"
          f"{1:>14.0%}")
    # overhead is the difference of two separately timed quantities: on a loaded
    # machine it carries their noise, so the verdict names an op category
    return bd.top_share({c: v for c, v in shares.items() if c in bd.CATEGORIES})


def heaviest(ops: dict, n: int = 6) -> str:
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{o} {t * 1e3:.3f} ms" for o, t in top)


def details(s: dict, b: dict) -> None:
    """The timers' bias, the heaviest ops on each side, and torch.profiler's view
    one level down inside graphopt's nodes."""
    print("  timer bias (ms per call): " + "; ".join(
        f"{k} {v * 1e3:.3f}" for k, v in s["bias"].items()))
    for key in ("graphopt", "ort_all", "ort_disable_all"):
        print(f"  heaviest ops, {key}: {heaviest(s[key].ops)}")
    kinds = {key: bd.by_conv_kind(s[key]) for key in ("graphopt", "ort_all",
                                                       "ort_disable_all")}
    if kinds["graphopt"]:
        print("  conv by kind (ms): " + "; ".join(
            f"{key} " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in sorted(d.items()))
            for key, d in kinds.items()))
    aten = bd.aten_self_times(b["gm"], *b["inputs"])
    attention(s)
    print(f"  torch.profiler inside graphopt (profiled call {aten.total_s * 1e3:.3f} ms"
          f", sum of self times {aten.parts_s * 1e3:.3f} ms; numba kernels not seen):"
          f" {heaviest(aten.ops, 8)}")


# How the exporter writes attention: QK^T scaled (ORT fuses it into FusedMatMul), the
# softmax, then probabilities x V (MatMul); at level "all" the linears are all Gemm
ORT_ATTENTION = ("FusedMatMul", "MatMul", "Softmax")


def attention(s: dict) -> None:
    """ORT has no Attention op here: its attention ops sit under GEMM and softmax."""
    ours = s["graphopt"].categories.get("attention", 0.0)
    ort = s["ort_all"].ops
    if not ours or "Attention" in ort:
        return
    parts = {op: ort.get(op, 0.0) for op in ORT_ATTENTION}
    print(f"  attention like for like: graphopt's scaled_dot_product_attention "
          f"{ours * 1e3:.3f} ms; ORT (all) runs it unfused, "
          + " + ".join(f"{op} {t * 1e3:.3f}" for op, t in parts.items())
          + f" = {sum(parts.values()) * 1e3:.3f} ms (booked under linear/GEMM and "
          "norm/softmax above)")


def verdict(name: str, s: dict, top: tuple[str, float]) -> str:
    ours, peer = s["graphopt"].total_s, s["ort_all"].total_s
    a, b = bd.with_overhead(s["graphopt"]), bd.with_overhead(s["ort_all"])
    cat, share = top
    over = bd.gap_shares(s["graphopt"], s["ort_all"])[bd.OVERHEAD]
    if ours <= peer:
        return (f"{name}: graphopt took {ours * 1e3:.2f} ms, ORT (all) "
                f"{peer * 1e3:.2f} ms:"
                f" no gap in this run.")
    return (f"{name}: graphopt took {ours * 1e3:.2f} ms per call, ORT (all) "
            f"{peer * 1e3:.2f} ms ({ours / peer:.2f}x); {cat} holds the largest share "
            f"of the {(ours - peer) * 1e3:.2f} ms gap, {share:.0%} "
            f"({a[cat] * 1e3:.2f} ms against {b[cat] * 1e3:.2f} ms); the "
            f"overhead row (noisiest) holds {over:.0%}.")


def bench_model(name: str, args, folder: str) -> tuple[str, float]:
    start = time.perf_counter()
    b = build(name, args.threads, folder, args.batch)
    fns = steps(b)
    with torch.no_grad():
        one = sum(min(clock(fn) for _ in range(2)) for fn in fns.values())
    calls = max(10, min(300, int(args.model_s / one)))
    got = rounds(b, calls, warm=2, earlier=2)  # 2 calls each were timed just now
    s = summarise(got)
    print(f"\n{name}, batch {args.batch}: {calls} rounds of one call of each "
          "variant in turn, "
          f"{args.threads} threads (torch {torch.get_num_threads()}, ORT intra-op "
          f"{args.threads}); max |diff| vs eager: graphopt {b['diff'][0]:.1e}, "
          f"ORT {b['diff'][1]:.1e}; {time.perf_counter() - start:.0f} s")
    top = table(name, s)
    details(s, b)
    print("  " + verdict(name, s, top))
    return top


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, help="GEMM rounds (default 5, quick 4)")
    p.add_argument("--model-s", type=float, help="seconds of timing per model")
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--batch", type=int, default=1, help="images or sequences a call")
    p.add_argument("--no-gemm", action="store_true",
                   help="skip the GEMM microbenchmark at M=128")
    p.add_argument("--wait", choices=("bounded", "passive"), default="bounded",
                   help="how torch's idle threads wait (read before torch loads)")
    args = p.parse_args()
    wait_policy.check(args.wait)
    args.rounds = args.rounds or (4 if args.quick else 7)
    args.model_s = args.model_s or (20 if args.quick else 60)
    print("uptime:", uptime())
    print(f"torch {torch.__version__}, {peers.ort_version()}, "
          f"idle torch threads: {args.wait} ({waiting.omp_env(args.wait)}), "
          f"ORT allow_spinning=0")
    set_threads(args.threads)
    result = {}
    with tempfile.TemporaryDirectory(prefix="graphopt-gap-") as folder:
        for name in args.models:
            cat, share = bench_model(name, args, folder)
            result[f"{name}_gap_top"] = f"{cat.replace(' ', '_')}:{share:.2f}"
        ratio = (None if args.no_gemm else
                 gemm_table(folder, rounds=args.rounds, quick=args.quick))
    set_threads(args.threads)
    print("uptime:", uptime())
    if ratio is not None:
        result["gemm_2t_torch_vs_best"] = f"{ratio:.2f}"
    print("RESULT " + " ".join(f"{k}={v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
