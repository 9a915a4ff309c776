"""The squeeze-excite gates inside MobileNetV3-Small, before and after a change (ch. 7).

Run:  python benchmarks/squeeze_excite_ab.py [--before COMMIT] [--batch B]
                                             [--threads N] [--calls C]

A gate alone runs with its weights and its code in the caches; inside the model the
convolutions between two gates have pushed them out, and every Python line and
every weight read costs more (here, two to four times). So this times the gates
where they run: the model is optimised twice, once with `backend.squeeze_excite` and
its numba kernel as they are in the work tree, once with both files as they were
at `--before` (read with `git show`); in each, a clock wraps the plan call the fast
path makes for every gate (the weights' check, the binding, the kernel). The two
models run in turn, call by call; each call's nine gate times are summed.

Last line:  RESULT gates_before_us=<median> gates_after_us=<median> ratio=<after/before>
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import graphopt
from graphopt.backend import plan as plans
from graphopt.backend import squeeze_excite
from graphopt.measure.thread_count import set_threads
from graphopt.models import example

FILES = ("squeeze_excite_numba", "squeeze_excite")  # the kernel first: the other
# imports it


def load_before(commit: str, folder: str):
    """Both files at `commit`, imported as graphopt.backend._before_<name> (the
    binding made to import the old kernel); numba's cache off for them."""
    modules = {}
    for name in FILES:
        text = subprocess.run(
            ["git", "show", f"{commit}:src/graphopt/backend/{name}.py"],
            check=True, capture_output=True, text=True).stdout
        text = text.replace("cache=True", "cache=False").replace(
            "squeeze_excite_numba", "_before_squeeze_excite_numba")
        path = Path(folder) / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(
            f"graphopt.backend._before_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules[name] = module
    return modules["squeeze_excite"]


def optimised(model, inputs, module, clock: list):
    """The model optimised with `module`'s gate and Weights, each gate's plan call
    wrapped in a clock that adds to clock[0]."""
    original = plans._squeeze_excite_plan

    def timed_plan(fused, device):
        plan = original(fused, device)
        call = plan.call

        def timed(*args):
            start = time.perf_counter()
            out = call(*args)
            clock[0] += time.perf_counter() - start
            return out
        return dataclasses.replace(plan, call=timed)

    saved = plans._BUILDERS, squeeze_excite.gate, squeeze_excite.Weights
    plans._BUILDERS = tuple((c, timed_plan if b is original else b)
                            for c, b in plans._BUILDERS)
    squeeze_excite.gate, squeeze_excite.Weights = module.gate, module.Weights
    try:
        return graphopt.optimize(model, *inputs, stats=False).module
    finally:
        plans._BUILDERS, squeeze_excite.gate, squeeze_excite.Weights = saved


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--before", default="HEAD")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()
    model, inputs = example("mobilenet_v3_small", batch=a.batch)
    clocks = {"before": [0.0], "after": [0.0]}
    with tempfile.TemporaryDirectory() as folder:
        before = load_before(a.before, folder)
        models = {"before": optimised(model, inputs, before, clocks["before"]),
                  "after": optimised(model, inputs, squeeze_excite, clocks["after"])}
    set_threads(a.threads)
    gates = {k: [] for k in models}
    whole = {k: [] for k in models}
    with torch.no_grad():
        want = model(*inputs)
        for m in models.values():
            torch.testing.assert_close(m(*inputs), want, atol=1e-4, rtol=1e-4)
        for _ in range(a.calls):
            for k, m in models.items():
                clocks[k][0] = 0.0
                start = time.perf_counter()
                m(*inputs)
                whole[k].append(time.perf_counter() - start)
                gates[k].append(clocks[k][0])
    medians = {}
    for k in models:
        g, w = np.array(gates[k][10:]) * 1e6, np.array(whole[k][10:]) * 1e3
        medians[k] = float(np.median(g))
        print(f"{k} ({a.before if k == 'before' else 'work tree'}): the nine gates "
              f"{medians[k]:.0f} us a call (IQR {np.percentile(g, 25):.0f}-"
              f"{np.percentile(g, 75):.0f}), the model {np.median(w):.2f} ms "
              f"(IQR {np.percentile(w, 25):.2f}-{np.percentile(w, 75):.2f})")
    print(f"batch {a.batch}, {a.threads} thread(s), {a.calls} calls each in turn")
    print(f"RESULT gates_before_us={medians['before']:.0f} "
          f"gates_after_us={medians['after']:.0f} "
          f"ratio={medians['after'] / medians['before']:.2f}")


if __name__ == "__main__":
    main()
