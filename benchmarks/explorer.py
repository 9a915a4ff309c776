"""How quickly the pass explorer answers: toggle latency and the first measurement.

Run:  python benchmarks/explorer.py [--quick]

For the small ResNet and the Transformer block, measured in one run:
- open: building the explorer (capture, baseline graph, drawing, plot);
- cold toggle: ticking every pass at once on a fresh explorer (each new combination
  costs one pass application, one count and one drawing);
- first measurement: pressing "measure" (baseline, selection and the baseline again
  timed in the same interleaved rounds in the background thread) until the numbers
  are on screen; the run's noise is how far the two baseline timings differ;
- warm toggles: single-box flips once every combination is cached, the interaction a
  learner repeats (the issue asks for under 300 ms);
- static build: every combination precomputed into one HTML fragment (not in --quick).

Toggle latency is the time the widget's callback takes to put the new SVG, plot and
numbers into the widgets, including encoding the comm messages to JSON as the kernel
does (headless: the browser's share, receiving and painting an SVG, is not counted;
tests/test_explorer_browser.py checks that it happens).

Last line: RESULT toggle_ms=<median warm toggle over both models, in ms>
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import warnings

import graphopt
from graphopt import explorer as widgets

MODELS = ("small_resnet", "transformer_block")


def _encode_like_a_kernel(self, msg_type, data=None, metadata=None, buffers=None,
                          **keys):
    """Stand-in for ipykernel's send: serialise the message as the kernel would."""
    json.dumps({"msg_type": msg_type, "data": data, "metadata": metadata or {}},
               default=str)
    sum(len(memoryview(b)) for b in buffers or ())


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms"


def bench(name: str, flips: int, static: bool) -> list[float]:
    model, inputs = graphopt.models.example(name)
    start = time.perf_counter()
    ex = widgets.explore(model, *inputs, prefetch=False, static=False)
    opened = time.perf_counter() - start

    start = time.perf_counter()
    ex.select(ex.engine.passes)
    cold = time.perf_counter() - start

    start = time.perf_counter()
    ex.measure(wait=True)
    first = time.perf_counter() - start

    start = time.perf_counter()
    ex._prefetch()  # what the background thread does after the explorer opens
    fill = time.perf_counter() - start
    for k in ex.engine.combinations():  # each combination shown once (plots cached)
        ex.select(k)

    rng = random.Random(0)
    boxes = list(ex.checkboxes.values())
    latencies = []
    for _ in range(flips):
        box = rng.choice(boxes)
        start = time.perf_counter()
        box.value = not box.value  # the observer redraws synchronously
        latencies.append(time.perf_counter() - start)

    n = len(ex.engine.combinations())
    distinct = len({ex.engine.result(k).signature for k in ex.engine.combinations()})
    print(f"{name}: {len(ex.engine.passes)} passes, {n} combinations, "
          f"{distinct} distinct graphs")
    print(f"  open explorer          {_ms(opened)}")
    print(f"  cold toggle (all on)   {_ms(cold)}")
    run = ex.engine.measured["cpu"]
    print(f"  first measurement      {_ms(first)}  (baseline "
          f"{ex.engine.time((), 'cpu') * 1e3:.3f} ms, all passes "
          f"{ex.engine.time(ex.engine.passes, 'cpu') * 1e3:.3f} ms per run, "
          f"{run.rounds} interleaved rounds on {run.threads} thread(s), "
          f"noise {run.noise:.0%})")
    print(f"  fill every combination {_ms(fill)}  (background thread)")
    print(f"  warm toggle median     {_ms(statistics.median(latencies))}  "
          f"max {_ms(max(latencies)).strip()} over {flips} flips")
    if static:
        start = time.perf_counter()
        st = widgets.explore(model, *inputs, static=True)
        print(f"  static fragment        {_ms(time.perf_counter() - start)}  "
              f"({len(st.html) / 1024:.0f} KiB)")
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer flips, no static")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import comm
    comm.DummyComm.publish_msg = _encode_like_a_kernel  # headless widgets: no kernel
    latencies = []
    for name in MODELS:
        latencies += bench(name, flips=20 if args.quick else 100, static=not args.quick)
    print(f"RESULT toggle_ms={statistics.median(latencies) * 1e3:.2f}")


if __name__ == "__main__":
    main()
