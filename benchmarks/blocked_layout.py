"""Does oneDNN's blocked layout pay? `optimize(layout="blocked")` against the default.

Two parts, both printed by this run (nothing typed in by hand):

1. what torch's CPU build runs on oneDNN ("mkldnn") tensors: each op tried on a
   real blocked tensor, its output layout and its largest difference from eager;
2. eager, graphopt (default: channels-last regions), graphopt with blocked regions
   and ONNX Runtime (NCHWc, `--ort`) on ResNet-18 and MobileNetV3-Small, batch 1
   and 8, timed in ONE process in interleaved rounds (`graphopt.measure.compare`)
   at each thread count: medians, interquartile ranges, the book's verdict, the
   load before and after.

3. with `--attribute`: where oneDNN spends each variant's time, from its own
   clock (ONEDNN_VERBOSE, in a child process, 1 thread): each primitive's fastest
   of 5 calls (noise only adds time), summed by kind; weight reorders apart.

    python benchmarks/blocked_layout.py [--quick] [--ort] [--threads 2 1]
    python benchmarks/blocked_layout.py --attribute [--models resnet18]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wait_policy  # noqa: E402  before torch loads: OpenMP reads it once

WAIT = wait_policy.from_argv()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import graphopt  # noqa: E402
from graphopt.backend.blocked import count_blocked_conversions  # noqa: E402
from graphopt.measure import compare  # noqa: E402
from graphopt.models import example  # noqa: E402

MK = torch.ops.mkldnn
PAD = ([1, 1], [1, 1], [1, 1])


def probe_rows():
    """(op, how it is called) pairs, each run on a blocked input."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 8, 8, generator=g)
    w, b = torch.randn(32, 16, 3, 3, generator=g), torch.randn(32, generator=g)
    dw = torch.randn(16, 1, 3, 3, generator=g)
    packed = MK._reorder_convolution_weight(w, *PAD, 1, [1, 16, 8, 8])
    o = torch.randn(1, 32, 8, 8, generator=g)
    gate = torch.rand(1, 16, 1, 1, generator=g)
    stats = (torch.randn(16, generator=g), torch.rand(16, generator=g) + 0.5,
             torch.randn(16, generator=g), torch.randn(16, generator=g))
    conv = F.conv2d(x, w, b, padding=1)

    def pointwise(attr, weight=w):
        return lambda v: MK._convolution_pointwise(v, weight, b, *PAD, 1, attr, [], "")

    return x, [
        ("conv2d (aten)", lambda v: F.conv2d(v, w, b, padding=1), conv),
        ("depthwise conv2d (aten)", lambda v: F.conv2d(v, dw, None, padding=1,
                                                       groups=16),
         F.conv2d(x, dw, None, padding=1, groups=16)),
        ("_convolution_pointwise, plain weight, relu", pointwise("relu"),
         F.relu(conv)),
        ("_convolution_pointwise, plain weight, hardswish", pointwise("hardswish"),
         F.hardswish(conv)),
        ("_convolution_pointwise, plain weight, hardsigmoid",
         pointwise("hardsigmoid"), F.hardsigmoid(conv)),
        ("_convolution_pointwise, prepacked weight", pointwise("relu", packed),
         F.relu(conv)),
        ("_convolution_pointwise.binary add+relu", lambda v: MK._convolution_pointwise
         .binary(v, o.to_mkldnn(), w, b, *PAD, 1, "add", 1.0, "relu", [], ""),
         F.relu(conv + o)),
        ("mkldnn_convolution, prepacked weight", lambda v: torch.mkldnn_convolution(
            v, packed, b, *PAD, 1), conv),
        ("relu", torch.relu, F.relu(x)),
        ("sigmoid", torch.sigmoid, torch.sigmoid(x)),
        ("add (same shape)", lambda v: v + v, x + x),
        ("mul (same shape)", lambda v: v * v, x * x),
        ("mul (broadcast, SE gate)", lambda v: v * gate.to_mkldnn(), x * gate),
        ("hardswish", F.hardswish, F.hardswish(x)),
        ("hardsigmoid", F.hardsigmoid, F.hardsigmoid(x)),
        ("silu", F.silu, F.silu(x)),
        ("max_pool2d", lambda v: F.max_pool2d(v, 3, 2, 1), F.max_pool2d(x, 3, 2, 1)),
        ("avg_pool2d", lambda v: F.avg_pool2d(v, 2), F.avg_pool2d(x, 2)),
        ("batch_norm (eval)", lambda v: F.batch_norm(v, *stats),
         F.batch_norm(x, *stats)),
        ("adaptive_avg_pool2d(1)", lambda v: F.adaptive_avg_pool2d(v, 1),
         F.adaptive_avg_pool2d(x, 1)),
        ("mean over H, W", lambda v: v.mean([2, 3], keepdim=True),
         x.mean([2, 3], keepdim=True)),
    ]


def probe() -> None:
    """Print what each op does with an mkldnn input."""
    x, rows = probe_rows()
    print(f"torch {torch.__version__}: ops on a blocked (mkldnn) input")
    print(f"  {'op':50s} {'result':10s} max |diff| vs eager")
    with torch.no_grad():
        for name, fn, want in rows:
            try:
                out = fn(x.to_mkldnn())
            except Exception as e:  # what the refusal says is the finding
                msg = str(e).splitlines()[0][:36]
                print(f"  {name:50s} {'refused':10s} {type(e).__name__}: {msg}")
                continue
            layout = "mkldnn" if out.layout == torch._mkldnn else "dense"
            got = out.to_dense() if layout == "mkldnn" else out
            print(f"  {name:50s} {layout:10s} {(got - want).abs().max().item():.1e}")


def variants(name: str, batch: int, size: int, threads: list[int], ort: bool):
    """The callables to time, built once (ORT once per thread count)."""
    model, x = example(name, batch=batch, size=size)
    fns = {"eager": model,
           "graphopt": graphopt.optimize(model, *x, stats=False).module}
    blocked = graphopt.optimize(model, *x, layout="blocked", stats=False).module
    fns["blocked"] = blocked
    with torch.no_grad():
        want = model(*x)
        for k, f in fns.items():
            diff = (f(*x) - want).abs().max().item()
            print(f"  {k}: max |diff| vs eager {diff:.1e}")
    print(f"  blocked conversions: {count_blocked_conversions(blocked)}")
    orts = {}
    if ort:
        from graphopt.peers.ort import onnx_runtime
        for t in threads:
            orts[t] = onnx_runtime(model, x, t)
    return x, fns, orts


def timed(x, fns, orts, t: int, rounds: int):
    run = dict(fns)
    if t in orts:
        run["ort"] = orts[t]
    with torch.no_grad():
        cmp = compare(run, *x, rounds=rounds, threads=t)
    for k in run:
        tm = cmp[k]
        print(f"    {k:9s} median {tm.median * 1e3:8.3f} ms  IQR "
              f"{tm.iqr * 1e3:7.3f} ms  ({tm.iqr / tm.median:5.1%})")
    print(f"    blocked / graphopt = {cmp.ratio('blocked', 'graphopt'):.2f}; "
          f"{cmp.verdict('blocked', 'graphopt')}")
    if "ort" in run:
        print(f"    blocked / ort = {cmp.ratio('blocked', 'ort'):.2f}")
    print(f"    {cmp.conditions}")
    return cmp


CALLS = 5


def child(name: str, batch: int, size: int) -> None:
    """Time each variant's call (fastest of CALLS, verbose off), then run CALLS
    calls between markers with oneDNN's verbose log on."""
    import time

    torch.set_num_threads(1)
    model, x = example(name, batch=batch, size=size)
    fns = {"graphopt": graphopt.optimize(model, *x, stats=False).module,
           "blocked": graphopt.optimize(model, *x, layout="blocked",
                                        stats=False).module}
    verbose = torch.backends.mkldnn.verbose
    with torch.no_grad():
        for label, fn in fns.items():
            fn(*x)  # primitives created and cached
            walls = []
            for _ in range(CALLS):
                start = time.perf_counter()
                fn(*x)
                walls.append(time.perf_counter() - start)
            print(f"@@wall {label} {min(walls) * 1e3:.3f}", flush=True)
            for _ in range(CALLS):
                print(f"@@call {label}", flush=True)
                with verbose(torch.backends.mkldnn.VERBOSE_ON):
                    fn(*x)
    print("@@end", flush=True)


def primitive_kind(fields: list[str]) -> str:
    """A verbose line's kind: the primitive and its implementation; a reorder of a
    tensor shaped like one of the model's weights is a weight reorder."""
    prim, impl, dims = fields[5], fields[6], fields[-2]
    if prim == "reorder":
        return "reorder (weights)" if dims in WEIGHT_DIMS else "reorder (activations)"
    return f"{prim} ({impl.split(':')[0]})"


WEIGHT_DIMS: set[str] = set()  # "64x64x3x3", and "64x1x1x3x3" for grouped convs


def attribute(name: str, batch: int, size: int) -> None:
    """Sum oneDNN's own time per primitive kind, fastest of CALLS calls each."""
    model, _ = example(name, batch=batch, size=size)
    WEIGHT_DIMS.update("x".join(map(str, p.shape)) for p in model.parameters())
    WEIGHT_DIMS.update("x".join(map(str, (p.shape[0], 1) + tuple(p.shape[1:])))
                       for p in model.parameters() if p.dim() == 4)
    out = subprocess.run([sys.executable, __file__, "--child", name, str(batch),
                          str(size)], capture_output=True, text=True,
                         check=True).stdout
    calls: dict[str, list[list[tuple[str, float]]]] = {}
    walls, label = {}, None
    for line in out.splitlines():
        if line.startswith("@@wall"):
            walls[line.split()[1]] = float(line.split()[2])
        elif line.startswith("@@"):
            label = line.split()[1] if line.startswith("@@call") else None
            if label:
                calls.setdefault(label, []).append([])
        elif label and line.startswith("onednn_verbose") and ",exec," in line:
            f = line.split(",")
            calls[label][-1].append((primitive_kind(f), float(f[-1])))
    print(f"\n{name}, batch {batch}, {size}x{size}, 1 thread: a call's wall time and "
          f"oneDNN's own time in it (ms), each the fastest of {CALLS} calls")
    for label, runs in calls.items():
        per: dict[str, float] = {}
        for i, (kind, _) in enumerate(runs[0]):
            per[kind] = per.get(kind, 0.0) + min(r[i][1] for r in runs)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(),
                                                            key=lambda kv: -kv[1]))
        print(f"  {label:9s} wall {walls[label]:7.2f}, oneDNN "
              f"{sum(per.values()):7.2f}: {parts}")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 rounds, 112x112 images")
    ap.add_argument("--ort", action="store_true", help="ONNX Runtime too")
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--models", nargs="+",
                    default=["resnet18", "mobilenet_v3_small"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--wait", choices=wait_policy.CHOICES, default="bounded")
    ap.add_argument("--attribute", action="store_true",
                    help="oneDNN's own time per primitive kind (1 thread)")
    args = ap.parse_args()
    wait_policy.check(WAIT)
    rounds, size = (5, 112) if args.quick else (11, 224)
    if args.attribute:
        for name in args.models:
            for batch in args.batches:
                attribute(name, batch, size)
        return
    probe()
    summary = []
    for name in args.models:
        for batch in args.batches:
            print(f"\n{name}, batch {batch}, {size}x{size}, {rounds} interleaved "
                  f"rounds, wait {WAIT}")
            x, fns, orts = variants(name, batch, size, args.threads, args.ort)
            for t in args.threads:
                print(f"  {t} thread(s):")
                cmp = timed(x, fns, orts, t, rounds)
                summary.append(f"{name}_b{batch}_t{t}="
                               f"{cmp.ratio('blocked', 'graphopt'):.2f}")
    print("\nRESULT blocked/graphopt " + " ".join(summary))


if __name__ == "__main__":
    main()
