"""Which of several runs is fastest: interleaved rounds, the best of each.

The one timer the measured policy uses (`calibrate`, oneDNN against MKL, the
parallel row kernels). Interleaving puts drift from other programs on every run
alike; noise only adds time, so each run's minimum is its estimate. Only the
opt-in measured policy (graphopt.policy) times anything: the default path decides
from shapes.
"""

from __future__ import annotations

import time


def _per_call(fn, budget: float = 0.002) -> float:
    """Seconds per call: repeat until `budget` seconds have passed."""
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / n


def fastest(runs: dict, rounds: int) -> dict:
    """Each run's best seconds per call over `rounds` interleaved rounds (ch. 6):
    drift hits all alike and noise only adds time, so the minimum is the estimate."""
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            times[name].append(_per_call(fn))
    return {name: min(t) for name, t in times.items()}
