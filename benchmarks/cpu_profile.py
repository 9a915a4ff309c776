"""Where a model's CPU time goes, by library, sampled with Linux `perf` (chapter 7).

Run:  python benchmarks/cpu_profile.py [--model mobilenet_v3_small] [--batch 1]
                                       [--threads 1] [--seconds 8]

`benchmarks/gap.py` splits the time by op category with a clock per node; this
script asks the CPU instead. For each variant (graphopt, eager, ONNX Runtime) it
starts a child process that calls the model in a loop, samples it with
`perf record` (about 2000 samples a second, no call graphs), and sorts the samples
into what ran:

- `kernels (JIT)`: code generated at run time (oneDNN's convolutions, numba's and
  ORT's jitted kernels: perf sees them as [JIT] or anonymous memory);
- `MKL`: Intel MKL's routines (in libtorch_cpu: `mkl_*`);
- `oneDNN setup`: oneDNN's C++ outside its kernels (`dnnl::`, `ideep::`): the
  descriptors, hashes and primitive-cache lookups made on every call;
- `torch other`: the rest of libtorch (dispatcher, TensorIterator loops, allocator);
- `OpenMP`: torch's thread runtime (libgomp): with two threads or more, mostly a
  worker spinning at a barrier for the next parallel region (CPU time, not wall
  time: the main thread's time is in the other rows);
- `malloc`: glibc's allocator (`malloc`, `free`, `_int_*`, `malloc_consolidate`);
- `Python`: the interpreter and torch's Python bindings;
- `onnxruntime`: ORT's own library (its executor and MLAS kernels);
- `other`.

The shares are of the samples, so of CPU time; the time per call is printed
beside them, measured while perf samples (not a benchmark). Needs `perf` and
permission to profile a child (perf_event_paranoid).
Last line:  RESULT <variant>_<category>=<share> ...
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

CATEGORIES = ("kernels (JIT)", "MKL", "oneDNN setup", "torch other", "OpenMP", "malloc",
              "Python", "onnxruntime", "other")
MALLOC = re.compile(r"^(_int_|malloc|cfree|free|unlink_chunk|_mid_memalign|"
                    r"__libc_|tcache|__malloc)")

CHILD = """
import os, sys, time
import torch
from graphopt.models import example
model, inputs = example({model!r}, batch={batch})
from graphopt import peers
fn = peers.build({variant!r}, model, inputs, threads={threads}, wait="bounded")
with torch.no_grad():
    for _ in range(30):
        fn(*inputs)
    print("ready", flush=True)
    sys.stdin.readline()                      # the parent has attached perf
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < {seconds}:
        fn(*inputs)
        calls += 1
print(calls / (time.perf_counter() - start), flush=True)
sys.stdin.readline()                          # perf has stopped: exit unsampled
"""


def category(dso: str, symbol: str) -> str:
    """The category of one sample, from its library and symbol."""
    if dso.startswith("[JIT]") or dso in ("[unknown]", "//anon", "[anon]"):
        return "kernels (JIT)"
    if "onnxruntime" in dso:
        return "onnxruntime"
    if dso.startswith("libc.so") and MALLOC.match(symbol):
        return "malloc"
    if "libtorch_cpu" in dso:
        if symbol.startswith("mkl_"):
            return "MKL"
        if "dnnl" in symbol or "ideep" in symbol:
            return "oneDNN setup"
        return "torch other"
    if "libpython" in dso or "libtorch_python" in dso or dso.startswith("python"):
        return "Python"
    if dso.startswith("libgomp") or dso.startswith("libiomp"):
        return "OpenMP"
    if dso.startswith("libc10"):
        return "torch other"
    return "other"


def profile(variant: str, a) -> tuple[dict[str, float], float]:
    """(share per category, calls per second) of one variant; prints its `a.top`
    heaviest symbols."""
    src = CHILD.format(threads=a.threads, model=a.model, batch=a.batch,
                       variant=variant, seconds=a.seconds)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        child = subprocess.Popen([sys.executable, "-c", src], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        perf = subprocess.Popen(["perf", "record", "-q", "-F", "1999", "-p",
                                 str(child.pid), "-o", data],
                                stderr=subprocess.DEVNULL)
        child.stdin.write("\n")
        child.stdin.flush()
        rate = float(child.stdout.readline())
        perf.send_signal(signal.SIGINT)  # before the child's exit: its teardown
        perf.wait()                      # (freeing every object) is not the model
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait()
        report = subprocess.run(
            ["perf", "report", "-i", data, "--no-children", "-n", "--sort",
             "dso,sym", "--stdio", "-q", "--percent-limit", "0"],
            capture_output=True, text=True, check=True).stdout
    shares, by_dso = dict.fromkeys(CATEGORIES, 0.0), {}
    rows = [m.groups() for m in (re.match(r"\s*[\d.]+%\s+(\d+)\s+(.+?)\s+\[.\]\s+(.*)",
                                          line) for line in report.splitlines()) if m]
    total = sum(int(n) for n, _, _ in rows)  # sample counts: no rounding per row
    for n, dso, symbol in rows:
        share = 100.0 * int(n) / total
        shares[category(dso, symbol.strip())] += share
        by_dso[dso.split()[0]] = by_dso.get(dso.split()[0], 0.0) + share
    if a.top:
        heaviest = sorted(by_dso.items(), key=lambda kv: -kv[1])[:a.top]
        print(f"{variant}: " + ", ".join(f"{d} {s:.1f}%" for d, s in heaviest))
    return shares, rate


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mobilenet_v3_small")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--variants", default="graphopt,eager,ort")
    p.add_argument("--top", type=int, default=6, help="libraries printed per variant")
    a = p.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("this script needs Linux perf (apt install linux-perf)")
    result = []
    print(f"{a.model}, batch {a.batch}, {a.threads} thread(s), {a.seconds:g} s each; "
          "share of the sampled CPU time, %")
    print(f"{'':18}" + "".join(f"{v:>12}" for v in a.variants.split(",")))
    table = {v: profile(v, a) for v in a.variants.split(",")}
    for cat in CATEGORIES:
        print(f"{cat:18}" + "".join(f"{table[v][0][cat]:12.1f}" for v in table))
    print(f"{'ms per call':18}" + "".join(f"{1e3 / table[v][1]:12.2f}" for v in table))
    for v, (shares, _) in table.items():
        result += [f"{v}_{c.split()[0].lower()}={s:.1f}" for c, s in shares.items()]
    print(textwrap.fill("RESULT " + " ".join(result), 10_000))


if __name__ == "__main__":
    main()
