"""Peak memory and time of every public entry point on real models (issue #21).

Each (model, entry point) runs in a fresh subprocess, one at a time, so the numbers
are that call's alone: peak RSS (memory touched), VmPeak (address space mapped;
torch maps much more than it touches, and RLIMIT_AS limits this one) and wall time,
import and model building included. The bounds in src/graphopt/README.md and in
tests/test_entry_point_bounds.py come from this table.

    python benchmarks/entry_points.py            # every model, every entry point
    python benchmarks/entry_points.py --quick    # small inputs, no static explorer
    python benchmarks/entry_points.py --model resnet18 --entry capture

`resnet34` is not an `example()` name; it is built the same way (seeded, batch
norms randomised, eval mode) for the static explorer's bound on a bigger model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# model -> example() sizes; --quick uses the second (smaller inputs, same weights)
MODELS = {
    "resnet18": ({"size": 64}, {"size": 32}),
    "mobilenet_v3_small": ({"size": 64}, {"size": 32}),
    "bert": ({"seq_len": 32}, {"seq_len": 16}),
    "resnet50": ({}, {}),  # example("resnet50") is fixed at 1x3x224x224
    "resnet34": ({"size": 64}, {"size": 32}),  # built as example() builds resnet18
}

# entry point -> the call, with `m` the model and `x` its inputs
ENTRIES = {
    "capture": "graphopt.capture(m, *x)",
    "optimize": "graphopt.optimize(m, *x)",
    "optimize_check": "graphopt.optimize(m, *x, check=True)",
    "explore_live": "e = graphopt.explore(m, *x, static=False, prefetch=False); "
                    "e.checkboxes[graphopt.PIPELINE[0]].value = True",
    "explore_static": "graphopt.explore(m, *x, static=True, time_budget_s=0.01)",
    "compare_capture": "graphopt.compare_capture(m, *x, compile_backend='eager')",
    "draw": "graphopt.draw(graphopt.capture(m, *x)).svg()",
}

CHILD = """
import json, resource, sys, time
limit = int(sys.argv[3])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
start = time.perf_counter()
import graphopt, graphopt.models as models
sizes = json.loads(sys.argv[2])
if sys.argv[1] == "resnet34":  # not an example(): the same recipe as resnet18's
    import torch
    torch.manual_seed(0)
    m = models.resnet34()
    models.randomize_bn(m, 0)
    m = m.eval()
    x = (torch.randn(1, 3, sizes["size"], sizes["size"],
                     generator=torch.Generator().manual_seed(0)),)
else:
    m, x = models.example(sys.argv[1], **sizes)
{call}
status = open("/proc/self/status").read()
kib = {{k: int(v.split()[0]) for k, v in (l.split(":", 1) for l in
       status.splitlines()) if k in ("VmPeak", "VmHWM")}}
print(json.dumps({{"rss_mib": kib["VmHWM"] / 1024, "vmpeak_mib": kib["VmPeak"] / 1024,
                  "wall_s": time.perf_counter() - start}}))
"""


# The thread counts the table was measured with, on every machine: each thread maps
# a stack and may get its own malloc arena (up to 64 MiB of address space), so an
# unpinned VmPeak grows with the number of cores and a bound from 2 cores would not
# hold on a 16-core laptop.
THREADS = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2"}


def run_one(model: str, sizes: dict, entry: str, limit: int = 0,
            timeout: float = 1800) -> dict:
    """One entry point on one model in a fresh process (2 threads); its peaks and
    wall time."""
    env = {**os.environ, "GRAPHOPT_QUIET": "1", **THREADS}
    code = CHILD.format(call=ENTRIES[entry])
    out = subprocess.run([sys.executable, "-c", code, model, json.dumps(sizes),
                          str(limit)], capture_output=True, text=True,
                         timeout=timeout, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{entry} on {model} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--model", action="append", choices=list(MODELS))
    ap.add_argument("--entry", action="append", choices=list(ENTRIES))
    args = ap.parse_args()
    entries = args.entry or [e for e in ENTRIES
                             if not (args.quick and e == "explore_static")]
    print(f"{'model':<20} {'sizes':<16} {'entry point':<16} {'RSS MiB':>8} "
          f"{'VmPeak MiB':>10} {'wall s':>7}", flush=True)
    for model in args.model or MODELS:
        sizes = MODELS[model][1 if args.quick else 0]
        for entry in entries:
            t0 = time.perf_counter()
            try:
                r = run_one(model, sizes, entry)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                why = str(e).strip().splitlines()[-1]  # the exception's last line
                print(f"{model:<20} {json.dumps(sizes):<16} {entry:<16} failed: "
                      f"{why} ({time.perf_counter() - t0:.0f} s)", flush=True)
                continue
            print(f"{model:<20} {json.dumps(sizes):<16} {entry:<16} "
                  f"{r['rss_mib']:8.0f} {r['vmpeak_mib']:10.0f} {r['wall_s']:7.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
